"""The code predictor's ``int16-hybrid`` build of the frame form (``code_predictor_build(dtype="int16-hybrid",
form="frame")``, ``convert.hybrid_int16``; the step form's: tests/runtime/test_code_predictor_codebook.py): the
``int16_ready`` reduced frame graph, calibrated on greedy frames of
``CALIB_TEXTS``, converted w16a16i_dfp with the fp16 layers, verified on the simulator built the
same way: 0 CPU ops, 0 REGTASK lines, greedy agreement >= 99 % (fp16 of the same graph: 98.48 %
over 720 frames, docs/code-predictor-step.md).  Plus the one-line refusals of a bad dtype.

The root is the reduced one with a 1-layer, 4-group code predictor: the hybrid conversion, done
twice (the .rknn, then the simulator's build), is the test's cost, not its frames (17 s here against
176 s for the 5-layer, 16-group one; the path is the same).  The agreement judged is the decisions' (``compare_frames``), the
gate's kind of figure: a miss early in a frame changes that frame's later inputs, so the entries'
agreement counts one near-tie up to 15 times; every miss must be a near-tie.  Figures in
docs/code-predictor-step.md.
"""

from __future__ import annotations

import pytest

#: verify / calibration frames of the build test (see docs/code-predictor-step.md for the figures)
VERIFY_FRAMES = 100
CALIB_FRAMES = 60


def test_bad_code_predictor_dtype_is_one_line(tmp_path):
    from rkspeech.convert.conversion import convert
    from rkspeech.core.errors import RkspeechError
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.tts_options import TTSBuildOptions, validate

    with pytest.raises(RkspeechError, match="unknown code predictor dtype 'int4'; choose one of fp16, int16-hybrid"):
        build_code_predictor(None, None, tmp_path, target="rk3588", dtype="int4")
    with pytest.raises(RkspeechError, match="unknown --code-predictor-dtype 'int16'"):
        validate(TTSBuildOptions(out_dir=tmp_path, code_predictor_dtype="int16"))
    onnx = tmp_path / "m.onnx"
    import onnx as onnx_mod
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx_mod.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(onnx))
    with pytest.raises(RkspeechError, match="int16-hybrid needs a calibration dataset"):
        convert(onnx, tmp_path / "m.rknn", target="rk3588", dtype="int16-hybrid")
    with pytest.raises(RkspeechError, match="unknown dtype 'w16'; choose one of fp16, int8, int16-hybrid"):
        convert(onnx, tmp_path / "m.rknn", target="rk3588", dtype="w16")


@pytest.mark.slow
def test_int16_hybrid_build_reduced(tmp_path):
    from rkfixtures import write_small_code_predictor_root
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.resumable import StageRunner
    from rkspeech.contracts.read import read_contract

    files = resolve_model_root(write_small_code_predictor_root(tmp_path / "root", layers=1, groups=4))
    r = build_code_predictor(StageRunner(tmp_path), files, tmp_path, target="rk3588", verify_frames=VERIFY_FRAMES,
                             timeout=900, dtype="int16-hybrid", calibration_frames=CALIB_FRAMES, form="frame")
    assert r["dtype"] == "int16-hybrid" and r["calibration"]["frames"] == CALIB_FRAMES
    assert r["artifacts"]["rknn"].endswith("_i16_rk3588.rknn")
    assert read_contract(r["artifacts"]["rknn"]) == read_contract(r["artifacts"]["onnx"])
    assert r["placement"]["npu_ops"] > 0 and r["placement"]["cpu_ops"] == 0, r["placement"]
    assert r["build"]["regtask_overflow_lines"] == 0
    assert r["hybrid"]["fp16_tensors"] > 0 and r["hybrid"]["pick_ranges"] > 0, r["hybrid"]
    sim = r["sim"]
    assert sim["frames"] == VERIFY_FRAMES
    assert sim["decision_agreement"] >= 0.99 and sim["logit_snr_db"] > 55, sim
    assert all(m["fp32_gap"] < 0.01 for m in sim["misses"]), sim["misses"]  # only near-ties flip
    # the golden replay came from the verify stage's hybrid simulator (one simulator build, not two)
    assert sim["golden"]["source"] == "sim" and sim["golden"]["steps"] >= 1, sim["golden"]
    assert "code_predictor_golden" not in r["stages"], r["stages"]
