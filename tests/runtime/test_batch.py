"""Batched generation (``runtime.tts.batch``, ``pipelines.lane_graphs``; issue 55).

On the trained reduced root built with int4 (and int8) CPU stages and ``--streams 3``:

* the plan holds a lanes graph per stage (B = 3, the placed graph's weights);
* greedy codes of three streams generated together equal each generated alone, in the batch and
  through the plan's one-stream graphs (int4 and int8; on the massive-activation root, whose
  random logits are near-ties, in the batch);
* a seeded sampled stream's codes do not depend on its companions;
* a stream whose listener leaves mid-way frees its lanes at once and leaves the others' codes as
  they were; a fourth stream waits for a lane and then runs.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

TEXTS = ("The quick brown fox.", "A second, longer sentence to say here.", "Short.")


def _speaker(batch_plan, streams):
    from rkspeech.runtime.tts.speak import Speaker

    root, plan = batch_plan
    return Speaker(root, plan, backend="ort", engines=3, threads=1, streams=streams)


def _codes(sp, text, options=None, stop_after=None):
    codes: list = []
    it = sp.stream(text, speaker=sp.speakers[0], options=options, codes_out=codes)
    for k, _ in enumerate(it):
        if stop_after is not None and k + 1 >= stop_after:
            it.close()
            break
    return np.array(codes)


def _together(sp, jobs):
    out: list = [None] * len(jobs)
    errors: list = []

    def run(k):
        try:
            out[k] = _codes(sp, *jobs[k])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return out


def test_plan_holds_lanes_graphs_with_the_placed_weights(batch_plan):
    from rkspeech.contracts.read import read_contract
    from rkspeech.pipelines.lane_graphs import weight_digests
    from rkspeech.plan.plan import load_plan
    from rkspeech.plan.sections import plan_streams

    plan = load_plan(batch_plan[1], backend="ort")
    assert plan_streams(plan) == 3
    for name, role in (("talker", "decode"), ("code_predictor", "step")):
        stage = plan.stages[name]
        c, placed = read_contract(stage.lanes), read_contract(stage.artifacts[role]["onnx"])
        assert (c.B, c.capacity) == (3, 3 * placed.capacity)
        assert weight_digests(stage.lanes) == weight_digests(stage.artifacts[role]["onnx"])


@pytest.mark.parametrize("variant", ["int4", "int8"])
def test_greedy_streams_together_equal_each_alone(batch_plans, variant):
    plan = batch_plans(variant)
    with _speaker(plan, 1) as one:
        greedy = one.default_options(do_sample=False, subtalker_dosample=False, max_new_tokens=40)
        placed = [_codes(one, t, greedy) for t in TEXTS]
    with _speaker(plan, 3) as sp:
        assert sp.streams == 3 and "lanes" in sp.stage_names["talker"]
        r0 = sp.batch.rounds.rounds
        alone = [_codes(sp, t, greedy) for t in TEXTS]
        r1 = sp.batch.rounds.rounds
        together = _together(sp, [(t, greedy) for t in TEXTS])
        r2 = sp.batch.rounds.rounds
        # together, a round serves every stream: fewer rounds than the longest and the rest in turn
        assert r2 - r1 < 0.7 * (r1 - r0), (r1 - r0, r2 - r1)
        assert sorted(sp.batch.talker._free) == [0, 1, 2] and sp.batch.active == 0
    for a, b, c in zip(alone, together, placed):
        assert len(a) > 2
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)  # the one-stream graphs' codes too (the trained root's wide margins)


def test_massive_activation_root_streams_together_equal_each_alone(batch_plans, tts_massive_ckpt):
    """int8 rows quantized apart on the root whose code predictor carries the published 0.6B's
    massive activation: a stream's codes do not depend on its companions (its random logits are
    near-ties, so only the batch's own alone run is the reference)."""
    with _speaker(batch_plans("int8", tts_massive_ckpt), 3) as sp:
        greedy = sp.default_options(do_sample=False, subtalker_dosample=False, max_new_tokens=24)
        alone = [_codes(sp, t, greedy) for t in TEXTS]
        together = _together(sp, [(t, greedy) for t in TEXTS])
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


def test_sampled_stream_does_not_depend_on_its_companions(batch_plan):
    with _speaker(batch_plan, 3) as sp:
        seeded = sp.default_options(seed=7, max_new_tokens=30)
        alone = _codes(sp, TEXTS[1], seeded)
        others = [sp.default_options(seed=s, max_new_tokens=30) for s in (1, 2)]
        got = _together(sp, [(TEXTS[1], seeded), (TEXTS[0], others[0]), (TEXTS[2], others[1])])
    np.testing.assert_array_equal(alone, got[0])


def test_a_stream_that_leaves_frees_its_lanes_and_spares_the_others(batch_plan):
    with _speaker(batch_plan, 3) as sp:
        greedy = sp.default_options(do_sample=False, subtalker_dosample=False, max_new_tokens=40)
        alone = [_codes(sp, t, greedy) for t in TEXTS[1:]]
        # the first stream's listener leaves after its first chunk; a fourth stream waits for a lane
        got = _together(sp, [(TEXTS[0], greedy, 1), (TEXTS[1], greedy), (TEXTS[2], greedy), (TEXTS[1], greedy)])
        assert sorted(sp.batch.talker._free) == [0, 1, 2] and sorted(sp.batch.code_predictor.group._free) == [0, 1, 2]
    for want, have in zip(alone + alone[:1], got[1:]):
        np.testing.assert_array_equal(want, have)
    assert len(got[0]) >= 1


def test_streams_beyond_the_plan_are_one_line(batch_plan):
    from rkspeech.core.errors import RkspeechError

    with pytest.raises(RkspeechError, match="--streams must be 1-3"):
        _speaker(batch_plan, 4)


def test_speak_streams_sentences_ahead_with_the_same_audio(batch_plan, tmp_path):
    """``speak --streams 3`` of a 4-sentence text, from a folder of its own with relative paths:
    the wav and codes of ``--streams 1``, the report saying 3."""
    import json

    from rkfixtures import run_relative
    from rkspeech.runtime.wav import read_wav_int16

    root, plan = batch_plan
    text = " ".join(TEXTS) + " And a fourth one, to wait for a lane."
    outs = {}
    for n in (1, 3):
        rc, err, added = run_relative(tmp_path, ["speak", text, "--model-dir", os.path.relpath(root, tmp_path),
                                                 "--plan", os.path.relpath(plan, tmp_path), "-o", f"s{n}.wav",
                                                 "--codes-out", f"s{n}.npy", "--report", f"s{n}.json", "--greedy",
                                                 "--speaker", "ryan", "--threads", "1", "--streams", str(n)])
        assert rc == 0, err
        assert json.loads((tmp_path / f"s{n}.json").read_text())["streams"] == n
        outs[n] = read_wav_int16(tmp_path / f"s{n}.wav")[0], np.load(tmp_path / f"s{n}.npy")
    assert outs[1][1].shape[0] == 4 and outs[1][0].size > 0
    np.testing.assert_array_equal(outs[1][1], outs[3][1])
    np.testing.assert_array_equal(outs[1][0], outs[3][0])
