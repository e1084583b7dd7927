"""``rkspeech speak`` with a plan that places the talker and the code predictor (``plan.sections``).

The reduced custom-voice model: its talker and code predictor graphs exported to ONNX, written
into a plan beside the session's reduced vocoder steps (impl ``onnx``: onnxruntime), then spoken
greedily.  What must hold: the stages run as graphs (the report says where), the codes and the
audio are identical to the torch stages' (``--host-stages``), sampling options the greedy code
predictor graph cannot honour are refused in one line, and the default (sampling talker) runs
with the code predictor greedy."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from streaming_fixtures import step_graphs, write_ort_plan

FRAMES = 20
TEXT = "Stages on graphs."


@pytest.fixture(scope="module")
def stage_plan(tmp_path_factory, reduced_model, tts_custom_ckpt):
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.talker_onnx import export_talker_pair
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    d = tmp_path_factory.mktemp("stage_plan")
    graphs = step_graphs(tmp_path_factory, reduced_model)
    for p in graphs.values():
        shutil.copy(p, d / p.name)
    plan = write_ort_plan(d, {r: d / p.name for r, p in graphs.items()})
    tts = TTSModel.load(tts_custom_ckpt)
    cp = export_code_predictor_onnx(CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot").eval(),
                                    d / "cp" / "frame.onnx")
    talker = export_talker_pair(tts.net.talker.model, d / "talker", capacity=96, prefill_B=16)

    def contract(path):
        from rkspeech.contracts.read import read_onnx_metadata

        return json.loads(read_onnx_metadata(path)["rkspeech.contract"])

    raw = json.loads(plan.read_text())
    raw["code_predictor"] = stage_section(placement="cpu-fp32", target=None, artifacts={"frame": {"onnx": cp}},
                                          contract=contract(cp), base=d)
    raw["talker"] = stage_section(placement="cpu-fp32", target=None, artifacts={r: {"onnx": p} for r, p in talker.items()},
                                  contract=contract(talker["decode"]), base=d)
    plan.write_text(json.dumps(raw))
    return plan


def _speak(root, plan, **kw):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    host = kw.pop("host_stages", False)
    options = kw.pop("options", GenerationOptions.greedy(max_new_tokens=FRAMES + 1))
    with Speaker(root, plan, threads=1, host_stages=host) as sp:
        codes, timing = [], SpeechTiming()
        pcm = np.concatenate(list(sp.stream(TEXT, speaker="vivian", language="english", options=options,
                                            codes_out=codes, timing=timing)))
        return sp.stage_names, np.stack(codes), pcm


@pytest.fixture(scope="module")
def both(tts_custom_ckpt, stage_plan):
    return _speak(tts_custom_ckpt, stage_plan), _speak(tts_custom_ckpt, stage_plan, host_stages=True)


def test_an_utterance_ends_at_the_talker_graphs_capacity(tts_custom_ckpt, stage_plan):
    """The random talker never stops: with max_new_tokens past the graph's 96 positions the
    utterance ends at the capacity (prompt + frames = 96), in both host loops, not with an error
    after audio went out."""
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    opts = GenerationOptions.greedy(max_new_tokens=400)
    for host in (False, True):
        names, codes, pcm = _speak(tts_custom_ckpt, stage_plan, options=opts, host_stages=host)
        if host:
            assert len(codes) > 96  # torch stages: no graph capacity
        else:
            assert 0 < len(codes) < 96 and pcm.size == len(codes) * 1920, len(codes)


def test_stages_run_as_graphs_and_match_torch(both):
    (names, codes, pcm), (host_names, host_codes, host_pcm) = both
    assert names["talker"] != "torch" and names["code_predictor"] != "torch", names
    assert host_names == {"talker": "torch", "code_predictor": "torch"}
    assert codes.shape == (FRAMES, 16)
    np.testing.assert_array_equal(codes, host_codes)
    np.testing.assert_array_equal(pcm, host_pcm)
    assert np.abs(pcm).max() > 0


def test_sampling_code_predictor_is_refused_with_a_graph(tts_custom_ckpt, stage_plan):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    with pytest.raises(RkspeechError, match="greedy graph") as e:
        _speak(tts_custom_ckpt, stage_plan, options=GenerationOptions(seed=0, max_new_tokens=4))
    assert "\n" not in str(e.value)


def test_cli_default_samples_the_talker_with_a_greedy_code_predictor(tts_custom_ckpt, stage_plan, tmp_path, capsys):
    from rkspeech.cli import main

    out = tmp_path / "s.wav"
    rc = main(["speak", TEXT, "--model-dir", str(tts_custom_ckpt), "--plan", str(stage_plan), "-o", str(out),
               "--speaker", "vivian", "--max-frames", "6", "--threads", "1", "--report", str(tmp_path / "r.json")])
    cap = capsys.readouterr()
    err = cap.err
    assert rc == 0 and out.stat().st_size > 44
    assert "code predictor graph is greedy" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["stage_backends"]["code_predictor"] != "torch"
    assert report["cpu_affinity"] == {"asked": "big", "cores": None}  # this host's cores are alike: no pinning
    # per-stage split: one code predictor call per frame, one talker call per frame plus the prompt
    assert report["stages"]["code_predictor_calls"] == report["frames"]
    assert report["stages"]["talker_calls"] == report["frames"] + 1
    assert 0 < report["stages"]["talker_s"] < report["generate_seconds"]
    assert "ms per call" in cap.out + cap.err
