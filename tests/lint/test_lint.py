import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rkspeech.lint.checker import lint_model
from rkspeech.lint.rules import RULES

from rkfixtures import graph, save, vi


def _lint(tmp_path, nodes, inputs, outputs, inits=(), check=False, opset=17, target="rk3588"):
    p = save(graph(nodes, inputs, outputs, inits, opset=opset), tmp_path / "m.onnx")
    return lint_model(p, target=target, sample_input_check=check)


def test_rules_are_data_with_sources():
    for r in RULES:
        assert {"id", "severity", "targets", "description", "source"} <= set(r)
        assert r["severity"] in ("error", "warning") and r["source"]


def test_clean_graph_has_no_findings(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 4, 3), np.float32) * 0.1, "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1]),
             helper.make_node("Tanh", ["c"], ["y"])]
    rep = _lint(tmp_path, nodes, [vi("x", [1, 4, 16])], [vi("y", [1, 4, 16])], [w], check=True)
    assert rep.findings == [] and rep.checked_fp16


def test_dynamic_dim(tmp_path):
    rep = _lint(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["T", 4])], [vi("y", ["T", 4])])
    assert "dynamic-dim" in rep.rule_ids() and rep.errors


def test_layernorm_without_epsilon(tmp_path):
    s = numpy_helper.from_array(np.ones(4, np.float32), "s")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    bad = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    rep = _lint(tmp_path, [bad], [vi("x", [1, 4])], [vi("y", [1, 4])], [s, b])
    assert "layernorm-no-epsilon" in rep.rule_ids()
    good = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    assert "layernorm-no-epsilon" not in _lint(tmp_path, [good], [vi("x", [1, 4])], [vi("y", [1, 4])], [s, b]).rule_ids()


def _attention(rank3: bool):
    shape = [1, 8, 16] if rank3 else [1, 2, 8, 16]
    kt = [1, 16, 8] if rank3 else [1, 2, 16, 8]
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="pv")]
    return nodes, [vi("q", shape), vi("kt", kt), vi("v", shape)], [vi("y", shape)]


def test_single_head_3d_attention(tmp_path):
    rep = _lint(tmp_path, *_attention(True))
    assert "single-head-3d-attention" in rep.rule_ids()
    assert "single-head-3d-attention" not in _lint(tmp_path, *_attention(False)).rule_ids()


def test_skip_layernorm(tmp_path):
    n = helper.make_node("SkipLayerNormalization", ["x", "x", "g", "b"], ["y"], domain="com.microsoft")
    g = numpy_helper.from_array(np.ones(4, np.float32), "g")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    m = graph([n], [vi("x", [1, 2, 4])], [vi("y", [1, 2, 4])], [g, b])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    m.ir_version = 8
    import onnx

    onnx.save(m, str(tmp_path / "m.onnx"))
    assert "skip-layernorm" in lint_model(tmp_path / "m.onnx").rule_ids()


@pytest.mark.parametrize("op,rule", [("Sin", "cpu-op"), ("Cos", "cpu-op"), ("Floor", "cpu-op"),
                                     ("Round", "cpu-op"), ("Erf", "cpu-op-unverified")])
def test_cpu_ops(tmp_path, op, rule):
    rep = _lint(tmp_path, [helper.make_node(op, ["x"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])])
    assert rule in rep.rule_ids()
    assert not rep.errors


def test_cpu_op_other_chip(tmp_path):
    rep = _lint(tmp_path, [helper.make_node("Sin", ["x"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])],
                target="rk3566")
    assert rep.rule_ids() == {"cpu-op-other-chips"}


def test_float_to_int_cast_and_runtime_gather(tmp_path):
    table = numpy_helper.from_array(np.ones((16, 4), np.float32), "table")
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "i"], ["y"])]
    rep = _lint(tmp_path, nodes, [vi("x", [3])], [vi("y", [3, 4])], [table])
    assert {"float-to-int-cast", "runtime-gather"} <= rep.rule_ids()
    idx = numpy_helper.from_array(np.array([0, 2], np.int64), "idx")
    const = [helper.make_node("Gather", ["x2", "idx"], ["y"])]
    rep2 = _lint(tmp_path, const, [vi("x2", [4, 4])], [vi("y", [2, 4])], [idx])
    assert "runtime-gather" not in rep2.rule_ids()


@pytest.mark.parametrize("stride,fires", [(3, True), (5, True), (2, False), (4, False)])
def test_convtranspose_stride(tmp_path, stride, fires):
    w = numpy_helper.from_array(np.ones((4, 4, stride), np.float32), "W")
    n = helper.make_node("ConvTranspose", ["x", "W"], ["y"], strides=[stride])
    rep = _lint(tmp_path, [n], [vi("x", [1, 4, 8])], [vi("y", [1, 4, 8 * stride])], [w])
    assert ("convtranspose-stride" in rep.rule_ids()) == fires


def test_dilated_conv(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 4, 7), np.float32), "W")
    n = helper.make_node("Conv", ["x", "W"], ["y"], dilations=[9], pads=[27, 27])
    rep = _lint(tmp_path, [n], [vi("x", [1, 4, 64])], [vi("y", [1, 4, 64])], [w])
    assert "dilated-conv-regtask" in rep.rule_ids()


def _codes_head(B, one_channel=False):
    """[1,16,B] -> 1x1 Conv -> Relu -> [1,64,B], or its one-channel (1,1,16,B) view -> Relu -> back."""
    shapes = {"s4": [1, 1, 16, B], "s3": [1, 16, B]}
    if one_channel:
        inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in shapes.items()]
        nodes = [helper.make_node("Reshape", ["x", "s4"], ["x4"]), helper.make_node("Relu", ["x4"], ["r"]),
                 helper.make_node("Reshape", ["r", "s3"], ["y"])]
        return nodes, [vi("x", [1, 16, B])], [vi("y", [1, 16, B])], inits
    w = numpy_helper.from_array(np.ones((64, 16, 1), np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    return nodes, [vi("x", [1, 16, B])], [vi("y", [1, 64, B])], [w]


@pytest.mark.parametrize("B,one_channel,fires", [(4, False, 2), (12, False, 2), (16, False, 0), (24, False, 0),
                                                 (4, True, 0)])
def test_unaligned_3d_io(tmp_path, B, one_channel, fires):
    """Measured (rk3588 fp16, 2026-12-01): these very graphs put a Reshape on the CPU at the input
    and at the output for B = 4, 12, none for 16, 24 or the one-channel view."""
    rep = _lint(tmp_path, *_codes_head(B, one_channel))
    assert sum(f.rule == "unaligned-3d-io" for f in rep.findings) == fires
    assert "unaligned-3d-io" not in _lint(tmp_path, *_codes_head(B, one_channel), target="rk3576").rule_ids()


def test_unaligned_3d_io_fires_on_the_old_first_step(reduced_model, tmp_path, monkeypatch):
    """The vocoder's B=4 first step as it was (the codes read by a 1x1 conv: 903 NPU / 1 CPU at the
    published size, the input's Reshape) fires; the step as it is does not."""
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.stepgraph import npu_ops
    from rkspeech.stepgraph.step_npu import NpuVocoderStep

    new = lint_model(export_step_onnx(NpuVocoderStep(reduced_model, 4), tmp_path / "new.onnx"))
    monkeypatch.setattr(npu_ops, "IO_WIDTH_ALIGN", 1)  # every width: the plain form of before
    old = lint_model(export_step_onnx(NpuVocoderStep(reduced_model, 4), tmp_path / "old.onnx"))
    hits = [f for f in old.findings if f.rule == "unaligned-3d-io"]
    assert [f.op_type for f in hits] == ["Conv"] and "audio_codes" in hits[0].message
    assert "unaligned-3d-io" not in new.rule_ids()


def test_fp16_overflow_names_the_node(tmp_path):
    big = numpy_helper.from_array(np.array(1e5, np.float32), "big")
    nodes = [helper.make_node("Mul", ["x", "big"], ["m"], name="scale_up"),
             helper.make_node("Mul", ["m", "m"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq"], ["y"], name="sum", keepdims=1)]
    rep = _lint(tmp_path, nodes, [vi("x", [1, 8])], [vi("y", [1, 1])], [big], check=True, opset=13)
    hits = [f for f in rep.findings if f.rule == "fp16-overflow"]
    assert {"scale_up", "square", "sum"} <= {f.node for f in hits}
    rep2 = _lint(tmp_path, nodes, [vi("x", [1, 8])], [vi("y", [1, 1])], [big], check=False, opset=13)
    assert "fp16-overflow" not in rep2.rule_ids()


def test_cli_exit_codes(tmp_path, capsys):
    from rkspeech.cli import main

    p = save(graph([helper.make_node("Sin", ["x"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])]),
             tmp_path / "w.onnx")
    assert main(["lint", str(p)]) == 0  # warnings only
    p2 = save(graph([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["T"])], [vi("y", ["T"])]),
              tmp_path / "e.onnx")
    assert main(["lint", str(p2), "--json"]) == 1
    assert main(["lint", str(tmp_path / "missing.onnx")]) == 2


def test_lint_reads_no_external_weights(tmp_path):
    """A graph's weights beside it (``<graph>.onnx.data``: 6.1 GB for the 1.7B talker) are not read:
    the lint needs names, types and dims (it had loaded them whole and was killed at 22.3 GiB)."""
    import onnx

    w = numpy_helper.from_array(np.ones((4, 4, 3), np.float32) * 0.1, "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1]), helper.make_node("Sin", ["c"], ["y"])]
    model = graph(nodes, [vi("x", [1, 4, 16])], [vi("y", [1, 4, 16])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()  # were it read, the load would fail
    rep = lint_model(path, target="rk3588")
    assert rep.rule_ids() == {"cpu-op"}  # Sin on the CPU, as with the weights inline
