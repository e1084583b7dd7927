"""Voice cloning without torch: a Base plan's speaker encoder and speech encoder graphs
(``pipelines.clone_encoders``, ``runtime.tts.clone_encoders``) in the numpy host loop.

The reduced Base root (seed 0; its speech tokenizer is the session's reduced vocoder), its talker
pair and code predictor step graph exported as in ``test_numpy_loop``, and its two cloning graphs
built by the build's own stages (exported and checked against torch) into one plan.  What must hold:

* ``python -m rkspeech speak --ref-audio`` (x-vector) and ``--ref-audio --ref-text`` (in context)
  with torch unimportable exit 0 and give the greedy codes of the torch host loop (torch speaker
  encoder, torch speech encoder) over the same talker / code predictor graphs;
* a Base plan without the graphs, torch absent: one line saying what to do, exit 2;
* a graph from another checkpoint is refused in one line (its weights' fingerprint);
* the build's checks hold the marks (``core.thresholds``), and the x-vector check catches a graph
  fed the wrong front end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rkfixtures import TORCH_BLOCKER
from rkspeech.core.errors import RkspeechError
from streaming_fixtures import step_graphs, write_ort_plan

FRAMES = 12
TEXT = "Cloned voices, without torch."
REF_TEXT = "A short reference transcript."


def _contract(path):
    from rkspeech.contracts.read import read_onnx_metadata

    return json.loads(read_onnx_metadata(path)["rkspeech.contract"])


@pytest.fixture(scope="module")
def base_root(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    return write_tts_checkpoint(tmp_path_factory.mktemp("tts_base_clone"), "reduced", "base", 0)


@pytest.fixture(scope="module")
def clone_build(base_root, tmp_path_factory):
    """``(folder, {"speaker_encoder": built, "speech_encoder": built})`` by the build's stages."""
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import resolve_checkpoint
    from rkspeech.pipelines.clone_encoders import build_speaker_encoder, build_speech_encoder
    from rkspeech.pipelines.resumable import StageRunner

    out = tmp_path_factory.mktemp("clone_build")
    files = resolve_model_root(base_root)
    stages = StageRunner(out)
    built = {"speaker_encoder": build_speaker_encoder(stages, files, LazyTTSModel(files), out / "clone"),
             "speech_encoder": build_speech_encoder(stages, resolve_checkpoint(base_root), 16, out / "clone")}
    return out, built


@pytest.fixture(scope="module")
def plans(base_root, clone_build, reduced_model, tmp_path_factory):
    """``{"clone": plan with both cloning graphs, "bare": the same plan without them}``."""
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step

    tts = TTSModel.load(base_root)
    d = tmp_path_factory.mktemp("clone_plans")
    graphs = step_graphs(tmp_path_factory, reduced_model)
    talker = export_talker_pair(tts.net.talker.model, d / "talker", capacity=160, prefill_B=16)
    cp = export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor), d / "cp" / "step.onnx")
    out = {}
    for name in ("clone", "bare"):
        sub = d / name
        sub.mkdir()
        for p in graphs.values():
            shutil.copy(p, sub / p.name)
        plan = write_ort_plan(sub, {r: sub / p.name for r, p in graphs.items()})
        raw = json.loads(plan.read_text())
        raw["code_predictor"] = stage_section(placement="cpu-fp32", target=None, artifacts={"step": {"onnx": cp}},
                                              contract=_contract(cp), base=sub)
        raw["talker"] = stage_section(placement="cpu-fp32", target=None,
                                      artifacts={r: {"onnx": p} for r, p in talker.items()},
                                      contract=_contract(talker["decode"]), base=sub)
        if name == "clone":
            for stage, b in clone_build[1].items():
                raw[stage] = stage_section(placement="cpu-fp32", target=None, artifacts={"encoder": {"onnx": b["path"]}},
                                           contract=b["contract"], base=sub)
        plan.write_text(json.dumps(raw))
        out[name] = plan
    return out


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
    argv = ["rkspeech", "speak", TEXT, "--model-dir", str(root), "--plan", str(plan), "-o",
            str(tmp_path / f"{name}.wav"), "--language", "english", "--max-frames", str(FRAMES), "--threads", "1",
            "--greedy", "--codes-out", str(codes), "--report", str(report), *extra]
    code = (TORCH_BLOCKER if blocked else "import sys\nattempts = []\n") + textwrap.dedent(f"""
        import runpy
        sys.argv = {argv!r}
        try:
            runpy.run_module("rkspeech", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            torch_loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch")
            print("TORCH-MODULES", torch_loaded, "ATTEMPTS", len(attempts), file=sys.stderr)
            sys.exit(e.code)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == expect, res.stderr[-3000:]
    if expect:
        return None, None, res.stderr
    return np.load(codes), json.loads(report.read_text()), res.stderr


@pytest.mark.parametrize("mode", ["xvector", "icl"])
def test_cloning_without_torch_gives_the_torch_paths_codes(base_root, plans, ref_wav, tmp_path, mode):
    extra = ["--ref-audio", str(ref_wav)] + (["--ref-text", REF_TEXT] if mode == "icl" else [])
    got, report, err = _speak(tmp_path, base_root, plans["clone"], "numpy", *extra, blocked=True)
    assert "TORCH-MODULES [] ATTEMPTS 0" in err, err[-2000:]  # torch never loaded, nothing even tried
    assert report["host_loop"] == "numpy"
    assert "speaker encoder: graph speaker_encoder.onnx" in err
    ref, ref_report, _ = _speak(tmp_path, base_root, plans["clone"], "torch", *extra, "--host-loop", "torch")
    assert ref_report["host_loop"] == "torch"
    assert got.shape == ref.shape == (FRAMES, 16)
    np.testing.assert_array_equal(got, ref)


def test_icl_and_xvector_prompts_differ(base_root, plans, ref_wav):
    """The in-context prompt carries the reference's codes: its prompt is longer than the x-vector one
    by the reference's frames and transcript, and the codes come from the graph."""
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.tts.speak import Speaker

    audio = decode_audio(str(ref_wav), sample_rate=24000, what="reference audio")
    with Speaker(base_root, plans["clone"], threads=1, host="numpy") as sp:
        m = sp.model
        codes = m.reference_codes(audio)
        assert codes.shape == (-(-audio.size // 1920), 16) and codes.dtype == np.int64
        x, _, _ = m.build_prompt(TEXT, ref_audio=audio, language="english")
        icl, _, _ = m.build_prompt(TEXT, ref_audio=audio, ref_text=REF_TEXT, language="english")
        assert icl.shape[0] > x.shape[0] + codes.shape[0] - 5


def test_a_base_plan_without_the_graphs_and_no_torch_is_one_line(base_root, plans, ref_wav, tmp_path):
    for extra, words in ((["--ref-audio", str(ref_wav)], "speaker encoder graph"),):
        _, _, err = _speak(tmp_path, base_root, plans["bare"], "bare", *extra, blocked=True, expect=2)
        line = [x for x in err.splitlines() if x.startswith("rkspeech:") or "error" in x.lower()]
        assert any(words in x and "rebuild the plan" in x for x in line), err[-2000:]
        assert "Traceback" not in err


def test_icl_on_a_plan_without_the_speech_encoder_is_one_line(base_root, plans, ref_wav):
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

    m = NumpyTTSModel.load(base_root)
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


def test_the_builds_checks_hold_their_marks(clone_build):
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE

    _, built = clone_build
    xv = built["speaker_encoder"]["record"]["check"]
    assert len(xv["clips"]) == 3 and xv["max_abs_diff"] <= CLONE_XVECTOR_MAX_ABS
    assert xv["cosine_min"] >= CLONE_XVECTOR_MIN_COSINE
    sc = built["speech_encoder"]["record"]["check"]
    assert sc["codes"] > 100 and sc["different_codes"] == 0


def test_the_xvector_check_catches_a_wrong_front_end(base_root, clone_build, monkeypatch):
    """The speaker check compares against the torch path: a front end off by a scale (the graph fed
    a mel of audio at half amplitude) fails it."""
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS
    from rkspeech.models.qwen3_tts import clone_inputs
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root
    from rkspeech.pipelines import clone_encoders

    real = clone_inputs.log_mel
    monkeypatch.setattr(clone_inputs, "log_mel", lambda a, sr=24000: real(np.asarray(a) * 0.5, sr))
    files = resolve_model_root(base_root)
    check = clone_encoders._check_speaker(clone_build[1]["speaker_encoder"]["path"], TTSModel.load(base_root),
                                          read_tts_config(files).speaker_encoder)
    assert check["max_abs_diff"] > 10 * CLONE_XVECTOR_MAX_ABS
