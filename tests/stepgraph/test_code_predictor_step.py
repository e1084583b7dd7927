"""The code predictor as one fixed-shape frame graph (``stepgraph.code_predictor_step``).

Greedy ``TTSModel`` generation on the reduced synthetic custom-voice root gives, per frame, the
code predictor's inputs (talker hidden state, codebook 0's embedding) and the 15 codes it chose;
the frame graph replays them in torch (codes identical) and through onnxruntime (codes identical
to torch, logits within 1e-4).  No conversion here (a reduced graph takes ~3-5 min to convert).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

FRAMES = 4
TEXT = "Hello there, this is a test of the code predictor."


@pytest.fixture(scope="module")
def frames(tts):
    from rkspeech.stepgraph.code_predictor_step import greedy_frames_with_inputs

    out = greedy_frames_with_inputs(tts, TEXT, FRAMES, speaker=tts.speakers[0], language="english")
    assert len(out) == FRAMES
    return out


def _step(tts, embed):
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    return CodePredictorFrame(tts.net.talker.code_predictor, embed=embed).eval()


@pytest.mark.parametrize("embed", ["gather", "onehot"])
def test_frame_graph_codes_identical_to_generate(tts, frames, embed):
    from rkspeech.stepgraph.host import greedy_codes

    step = _step(tts, embed)
    groups = tts.num_code_groups
    with torch.no_grad():
        for hidden, first, codes in frames:
            assert hidden.shape == first.shape == (1, tts.cfg.talker.hidden_size)
            out = step(hidden, first)
            logits = out[0] if isinstance(out, tuple) else out
            assert logits.shape == (groups - 1, tts.cfg.code_predictor.vocab_size)
            np.testing.assert_array_equal(greedy_codes(out), codes[1:])


def test_capture_leaves_the_model_as_it_was(tts, frames):
    from rkspeech.models.qwen3_tts.talker import CodePredictor

    cp = tts.net.talker.code_predictor
    assert isinstance(cp, CodePredictor)
    # the spy is removed again: the projection is the checkpoint's own module
    assert type(cp.small_to_mtp_projection).__name__ in ("Linear", "Identity")
    assert all(c.shape == (tts.num_code_groups,) for _, _, c in frames)


# the NPU formulation only: each export takes ~8-15 s here; the gather graph's ort run was
# checked by hand (docs/code-predictor-step.md)
@pytest.mark.parametrize("embed", ["onehot"])
def test_onnxruntime_equals_torch(tts, frames, embed, tmp_path):
    from rkspeech.contracts.code_predictor import CodePredictorContract
    from rkspeech.contracts.read import read_contract
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.vocoder_onnx import graph_summary
    from rkspeech.runtime.runners import open_runner
    from rkspeech.stepgraph.host import greedy_codes

    step = _step(tts, embed)
    path = export_code_predictor_onnx(step, tmp_path / f"cp_{embed}.onnx")
    contract = read_contract(path, CodePredictorContract)
    assert contract == step.contract()
    summary = graph_summary(path)
    assert not summary["dynamic_io"]
    ops = summary["op_histogram"]
    for op in ("Shape", "Tile", "ConstantOfShape", "Sin", "Cos", "Where"):
        assert op not in ops, (op, ops)
    if embed == "onehot":
        # the NPU formulation: no ArgMax / runtime Gather / ReduceMax / Equal (CPU on rk3588)
        for op in ("ArgMax", "Gather", "ReduceMax", "Equal", "Cast"):
            assert op not in ops, (op, ops)
    runner = open_runner("ort", path, threads=1)
    with torch.no_grad():
        for hidden, first, codes in frames:
            out = step(hidden, first)
            logits = (out[0] if isinstance(out, tuple) else out).numpy()
            got = runner.infer({"talker_hidden": hidden.numpy(), "first_embed": first.numpy()})
            assert set(got) == set(contract.output_names)
            np.testing.assert_array_equal(greedy_codes(got), codes[1:])
            assert float(np.abs(got["logits"] - logits).max()) < 1e-4


def test_contract_round_trip_and_refusals():
    from rkspeech.core.errors import RkspeechError
    from rkspeech.contracts.code_predictor import CodePredictorContract

    c = CodePredictorContract(talker_hidden=64, hidden=48, vocab_size=2048, num_code_groups=16, layers=2,
                              embed="onehot")
    assert CodePredictorContract.from_json(c.to_json()) == c
    assert c.output_shapes() == {"logits": [15, 2048]}
    g = CodePredictorContract(64, 48, 2048, 16, 2, embed="gather")
    assert g.output_shapes() == {"logits": [15, 2048], "codes": [15]}
    with pytest.raises(RkspeechError, match="not an rkspeech code-predictor contract"):
        CodePredictorContract.from_json('{"format":"rkspeech-step/1"}')
    with pytest.raises(RkspeechError, match="embed"):
        CodePredictorContract.from_json(c.to_json().replace('"onehot"', '"argmax"'))
    with pytest.raises(RkspeechError, match="not valid JSON"):
        CodePredictorContract.from_json("{")


def test_int16_ready_graph_same_codes_and_int16_legal_constants(tts, frames, tmp_path):
    """``int16_ready``: the graph the int16-hybrid conversion takes (no constant beyond the
    toolkit's +-16384, no Concat) gives generate's greedy codes, logits within 1e-5 of the
    fp16 graph's; it needs the onehot formulation."""
    from onnx import numpy_helper

    import onnx
    from rkspeech.core.errors import RkspeechError
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame
    from rkspeech.stepgraph.host import greedy_codes

    cp = tts.net.talker.code_predictor
    step = CodePredictorFrame(cp, embed="onehot", int16_ready=True).eval()
    ref = _step(tts, "onehot")
    with torch.no_grad():
        for hidden, first, codes in frames:
            out = step(hidden, first)
            np.testing.assert_array_equal(greedy_codes(out), codes[1:])
            assert float((out - ref(hidden, first)).abs().max()) < 1e-5
    path = export_code_predictor_onnx(step, tmp_path / "cp_i16.onnx")
    g = onnx.load(str(path)).graph
    ops = {n.op_type for n in g.node}
    assert "Concat" not in [n.op_type for n in g.node if n.output[0] == "logits"]
    assert "ArgMax" not in ops and "Gather" not in ops
    consts = [numpy_helper.to_array(t) for t in g.initializer]
    consts += [numpy_helper.to_array(n.attribute[0].t) for n in g.node
               if n.op_type == "Constant" and n.attribute and n.attribute[0].type == onnx.AttributeProto.TENSOR]
    big = max(float(np.abs(c).max()) for c in consts if c.size and c.dtype.kind == "f")  # Slice ends are int64
    assert big <= 16384, big
    with pytest.raises(RkspeechError, match="int16_ready needs embed='onehot'"):
        CodePredictorFrame(cp, embed="gather", int16_ready=True)
