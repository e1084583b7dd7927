"""Voice cloning without torch: a Base plan's speaker encoder and speech encoder graphs
(``pipelines.clone_encoders``, ``runtime.tts.clone_encoders``) in the numpy host loop.

The session's reduced Base root built with ``rkspeech build qwen3-tts`` (``tts_base_build``: the
vocoder plan reused, talker and code predictor cpu-fp32, the two cloning graphs exported, checked
against torch and listed in the plan).  What must hold:

* ``python -m rkspeech speak --ref-audio`` (x-vector) and ``--ref-audio --ref-text`` (in context)
  with torch unimportable exit 0 and give the greedy codes of the torch host loop (torch speaker
  encoder, torch speech encoder) over the same talker / code predictor graphs;
* a Base plan without the graphs, torch absent: one line saying what to do, exit 2;
* a graph from another checkpoint is refused in one line (its weights' fingerprint);
* (the build's own checks: tests/pipelines/test_build_clone.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkfixtures import rkspeech_child
from rkspeech.core.errors import RkspeechError

FRAMES = 12
TEXT = "Cloned voices, without torch."
REF_TEXT = "A short reference transcript."


@pytest.fixture(scope="module")
def plans(tts_base_build):
    """``{"clone": the built plan, "bare": the same plan without the two cloning records}``."""
    from rkspeech.plan.plan import read_plan, write_plan_data

    out = tts_base_build[1]
    raw = read_plan(out / "plan.json")
    for name in ("speaker_encoder", "speech_encoder"):
        raw.pop(name)
    return {"clone": out / "plan.json", "bare": write_plan_data(out / "plan_bare.json", raw)}


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory):
    from rkspeech.runtime.wav import write_wav

    t = np.arange(int(24000 * 1.7)) / 24000
    rng = np.random.default_rng(9)
    pcm = (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
           + 0.03 * rng.standard_normal(t.size)).astype(np.float32)
    return write_wav(tmp_path_factory.mktemp("ref") / "ref.wav", pcm, 24000)


def _speak(tmp_path, root, plan, name, *extra, blocked=False, expect=0):
    """``python -m rkspeech speak`` in a child (torch unimportable when ``blocked``): (codes or
    None, report or None, stderr)."""
    codes, report = tmp_path / f"{name}.npy", tmp_path / f"{name}.json"
    res = rkspeech_child(["speak", TEXT, "--model-dir", str(root), "--plan", str(plan), "-o", str(tmp_path / f"{name}.wav"),
                          "--language", "english", "--max-frames", str(FRAMES), "--threads", "1", "--greedy",
                          "--codes-out", str(codes), "--report", str(report), *extra], blocked=blocked)
    assert res.returncode == expect, res.stderr[-3000:]
    if expect:
        return None, None, res.stderr
    return np.load(codes), json.loads(report.read_text()), res.stderr


@pytest.mark.parametrize("mode", ["xvector", "icl"])
def test_cloning_without_torch_gives_the_torch_paths_codes(tts_base_ckpt, plans, ref_wav, tmp_path, mode):
    extra = ["--ref-audio", str(ref_wav)] + (["--ref-text", REF_TEXT] if mode == "icl" else [])
    got, report, err = _speak(tmp_path, tts_base_ckpt, plans["clone"], "numpy", *extra, blocked=True)
    assert "TORCH-MODULES [] ATTEMPTS 0" in err, err[-2000:]  # torch never loaded, nothing even tried
    assert report["host_loop"] == "numpy"
    assert "speaker encoder: graph speaker_encoder.onnx" in err
    ref, ref_report, _ = _speak(tmp_path, tts_base_ckpt, plans["clone"], "torch", *extra, "--host-loop", "torch")
    assert ref_report["host_loop"] == "torch"
    assert got.shape == ref.shape == (FRAMES, 16)
    np.testing.assert_array_equal(got, ref)


def test_icl_and_xvector_prompts_differ(tts_base_ckpt, plans, ref_wav):
    """The in-context prompt carries the reference's codes: its prompt is longer than the x-vector one
    by the reference's frames and transcript, and the codes come from the graph."""
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.tts.speak import Speaker

    audio = decode_audio(str(ref_wav), sample_rate=24000, what="reference audio")
    with Speaker(tts_base_ckpt, plans["clone"], threads=1, host="numpy") as sp:
        m = sp.model
        codes = m.reference_codes(audio)
        assert codes.shape == (-(-audio.size // 1920), 16) and codes.dtype == np.int64
        x, _, _ = m.build_prompt(TEXT, ref_audio=audio, language="english")
        icl, _, _ = m.build_prompt(TEXT, ref_audio=audio, ref_text=REF_TEXT, language="english")
        assert icl.shape[0] > x.shape[0] + codes.shape[0] - 5


def test_a_base_plan_without_the_graphs_and_no_torch_is_one_line(tts_base_ckpt, plans, ref_wav, tmp_path):
    for extra, words in ((["--ref-audio", str(ref_wav)], "speaker encoder graph"),):
        _, _, err = _speak(tmp_path, tts_base_ckpt, plans["bare"], "bare", *extra, blocked=True, expect=2)
        line = [x for x in err.splitlines() if x.startswith("rkspeech:") or "error" in x.lower()]
        assert any(words in x and "rebuild the plan" in x for x in line), err[-2000:]
        assert "Traceback" not in err


def test_icl_on_a_plan_without_the_speech_encoder_is_one_line(tts_base_ckpt, plans, ref_wav):
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

    m = NumpyTTSModel.load(tts_base_ckpt)
    with pytest.raises(RkspeechError, match="speech tokenizer's encoder graph") as e:
        m.reference_codes(np.zeros(4000, np.float32))
    assert "\n" not in str(e.value)


def test_graphs_of_another_checkpoint_are_refused(tmp_path_factory, plans):
    """The cloning graphs carry their weights' fingerprint: opened for a Base root with other
    weights of the same shape, they are refused in one line."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
    from rkspeech.runtime.tts.open_stages import open_clone_encoders

    plan = load_plan(plans["clone"], backend="ort")
    assert sorted(plan.encoders) == ["speaker_encoder", "speech_encoder"] and sorted(plan.stages) == [
        "code_predictor", "talker"]
    other = write_tts_checkpoint(tmp_path_factory.mktemp("tts_base_other"), "reduced", "base", 3)
    with pytest.raises(RkspeechError, match="speaker encoder graph speaker_encoder.onnx does not match") as e:
        open_clone_encoders(plan, "ort", model=NumpyTTSModel.load(other))
    assert "\n" not in str(e.value) and "weights fingerprint" in str(e.value)
