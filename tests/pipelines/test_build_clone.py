"""``rkspeech build qwen3-tts`` on a Base root: voice cloning's two graphs (``pipelines.clone_encoders``).

The session's reduced Base root built as a user runs it (``tts_base_build``).  What must hold: the
plan holds one stage record per cloning graph (placed cpu-fp32, contract format, hashed by the
integrity record; ``Plan.encoders``, not the per-frame ``Plan.stages``), the report their checks
against torch within ``core.thresholds``' marks, a re-run skips both stages, and the x-vector
check fails a graph fed the wrong front end.  Cloning through the plan: tests/runtime/test_clone_graphs.py.
"""

from __future__ import annotations

import json

import numpy as np


def test_the_build_lists_and_checks_both_graphs(tts_base_build, tts_base_ckpt, placeholder_vocoder_plan, capsys):
    """The plan holds one stage record each (placed cpu-fp32, hashed by its integrity record); the
    report holds the checks, within the marks; a second run of the build skips both stages."""
    from rkfixtures import run_relative, tts_base_build_argv
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE
    from rkspeech.plan.plan import load_plan

    home, out = tts_base_build
    raw = json.loads((out / "plan.json").read_text())
    for name, fmt in (("speaker_encoder", "rkspeech-speaker-encoder/1"), ("speech_encoder", "rkspeech-speech-encoder/1")):
        rec = raw[name]
        assert rec["placement"] == "cpu-fp32" and rec["contract"]["format"] == fmt
        assert rec["artifacts"] == {"encoder": {"onnx": f"clone/{name}.onnx"}}
        assert f"clone/{name}.onnx" in raw["integrity"]["files"]
    plan = load_plan(out / "plan.json", backend="ort")
    assert sorted(plan.encoders) == ["speaker_encoder", "speech_encoder"]
    assert sorted(plan.stages) == ["code_predictor", "talker"]  # the per-frame stages only
    graphs = json.loads((out / "build-report.json").read_text())["graphs"]
    xv = graphs["speaker_encoder"]["clone"]["check"]
    assert len(xv["clips"]) == 3 and xv["max_abs_diff"] <= CLONE_XVECTOR_MAX_ABS
    assert xv["cosine_min"] >= CLONE_XVECTOR_MIN_COSINE
    sc = graphs["speech_encoder"]["clone"]["check"]
    assert sc["codes"] > 100 and sc["different_codes"] == 0
    capsys.readouterr()
    rc, err, _ = run_relative(home, tts_base_build_argv(tts_base_ckpt, placeholder_vocoder_plan, home), capsys)
    assert rc == 0
    assert "skip: speaker_encoder (inputs unchanged)" in err and "skip: speech_encoder (inputs unchanged)" in err


def test_the_xvector_check_catches_a_wrong_front_end(tts_base_ckpt, tts_base_build, monkeypatch):
    """The speaker check compares against the torch path: a front end off by a scale (the graph fed
    a mel of audio at half amplitude) fails it."""
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS
    from rkspeech.models.qwen3_tts import clone_inputs
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root
    from rkspeech.pipelines import clone_encoders

    real = clone_inputs.log_mel
    monkeypatch.setattr(clone_inputs, "log_mel", lambda a, sr=24000: real(np.asarray(a) * 0.5, sr))
    files = resolve_model_root(tts_base_ckpt)
    check = clone_encoders._check_speaker(tts_base_build[1] / "clone" / "speaker_encoder.onnx", TTSModel.load(tts_base_ckpt),
                                          read_tts_config(files).speaker_encoder)
    assert check["max_abs_diff"] > 10 * CLONE_XVECTOR_MAX_ABS
