"""The code predictor's step form (``stepgraph.code_predictor_codebook``, run by
``runtime.tts.code_predictor_codebook``): its stack as a one-position step graph, the host doing heads, choice and embeddings.

* onnxruntime in the generation loop: greedy codes identical to the torch backend's, and sampled
  codes identical too with the same seed (the host samples between calls: not greedy-only);
* 16 calls a frame; refusals in one line: a talker graph, a graph of another checkpoint;
* ``build_code_predictor(form="step")`` on the reduced root, fp16 and int16-hybrid: 0 CPU ops,
  0 REGTASK lines, the contract in the .rknn, simulator agreement (reduced, 720 frames, measured
  2026-12-01: fp16 98.14 %, int16-hybrid 99.06 %; docs/code-predictor-step.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from rkfixtures import have_rknn

torch = pytest.importorskip("torch")

TEXT = "Hello there, this is a test of the code predictor."
FRAMES = 24


@pytest.fixture(scope="module")
def step_onnx(tts, tmp_path_factory):
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step

    return export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor),
                              tmp_path_factory.mktemp("cp_step") / "cp_step.onnx")


def _codes(tts, backend=None, options=None):
    from rkspeech.models.qwen3_tts.backends import TorchCodePredictor
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    opts = options or GenerationOptions.greedy(max_new_tokens=FRAMES + 1)
    if backend is not None:
        tts.use_backends(code_predictor=backend)
    try:
        return tts.generate_codes(TEXT, speaker=tts.speakers[1], language="english", options=opts)
    finally:
        tts.use_backends(code_predictor=TorchCodePredictor(tts.net.talker))


def test_step_backend_greedy_and_sampled_codes_equal_torch(tts, step_onnx):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor

    sampled = GenerationOptions(seed=7, max_new_tokens=FRAMES + 1)
    ref_greedy, ref_sampled = _codes(tts), _codes(tts, options=sampled)
    with CodebookCodePredictor(step_onnx, "ort", model=tts, threads=1) as g:
        assert not g.greedy_only
        got_greedy = _codes(tts, g)
        assert g.calls == tts.num_code_groups  # one call per position of the last frame
        got_sampled = _codes(tts, g, options=sampled)
    assert ref_greedy.shape == (FRAMES, tts.num_code_groups)
    np.testing.assert_array_equal(got_greedy, ref_greedy)
    np.testing.assert_array_equal(got_sampled, ref_sampled)
    assert not np.array_equal(ref_sampled[:, 1:], ref_greedy[:len(ref_sampled), 1:])  # sampling did sample


def test_step_backend_refuses_other_graphs(tts, step_onnx, tmp_path):
    from rkspeech.core.errors import RkspeechError
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor
    from rkspeech.stepgraph.talker_step import TalkerStep

    talker = export_talker_onnx(TalkerStep(tts.net.talker.model, capacity=16, B=1), tmp_path / "talker.onnx")
    with pytest.raises(RkspeechError, match="a qwen3-tts-talker graph with B=1, not a code-predictor step"):
        CodebookCodePredictor(talker, "ort", model=tts)
    # the same shapes from another checkpoint: the weights' fingerprint differs
    cp = tts.net.talker.code_predictor
    with torch.no_grad():
        cp.model.norm.weight.add_(0.01)
    try:
        with pytest.raises(RkspeechError, match="does not match this model: its contract has fingerprint="):
            CodebookCodePredictor(step_onnx, "ort", model=tts)
    finally:
        with torch.no_grad():
            cp.model.norm.weight.sub_(0.01)
    with pytest.raises(RkspeechError, match="a code-predictor step needs the loaded model"):
        CodebookCodePredictor(step_onnx, "ort", model=object())


@pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")
@pytest.mark.parametrize("dtype, frames, floor", [("fp16", 20, 0.95), ("int16-hybrid", 60, 0.98)])
def test_step_build_reduced(tts_custom_ckpt, tmp_path, dtype, frames, floor):
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.resumable import StageRunner
    from rkspeech.contracts.read import read_contract
    from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL as MODEL_NAME

    r = build_code_predictor(StageRunner(tmp_path), resolve_model_root(tts_custom_ckpt), tmp_path, target="rk3588",
                             verify_frames=frames, timeout=900, dtype=dtype, calibration_frames=24)
    assert r["form"] == "step" and r["role"] == "step" and r["dtype"] == dtype
    c = read_contract(r["artifacts"]["rknn"])  # the .rknn custom string
    assert c == read_contract(r["artifacts"]["onnx"]) and c.model == MODEL_NAME
    assert c.mask_value == (-20.0 if dtype == "int16-hybrid" else -30000.0)
    assert r["placement"]["npu_ops"] > 0 and r["placement"]["cpu_ops"] == 0, r["placement"]
    assert r["build"]["regtask_overflow_lines"] == 0
    sim = r["sim"]
    assert sim["frames"] == frames and sim["code_agreement"] >= floor and sim["logit_snr_db"] > 55, sim
    if dtype == "int16-hybrid":
        assert r["calibration"]["samples"] == 24 * 16  # one line per NPU call
