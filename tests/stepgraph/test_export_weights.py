"""A step graph's weights put in by ``export.weights``, not by torch's exporter (issue 54, item 3).

The graph that leaves ``export_traced`` is torch's own folded graph (the same ops in the same order,
as many initializers) and computes the same bits; above ``INLINE_LIMIT`` its weights are in one
``<graph>.onnx.data`` beside it, each tensor 64 KiB aligned, and a plan carries that file along.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _torch_export(step, path):
    """The reference: torch's exporter given the weights, its constant folding on."""
    import warnings

    from rkspeech.export.opset import OPSET

    c = step.contract()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(step, step.dummy_inputs(), str(path), input_names=c.input_names,
                          output_names=c.output_names, opset_version=OPSET, do_constant_folding=True, dynamo=False)
    return path


def _run(path, step):
    feeds = {n: t.numpy() for n, t in zip(step.contract().input_names, step.dummy_inputs(start=5))}
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _compute_ops(path):
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type != "Constant"]


@pytest.mark.parametrize("layout", [{}, {"kv_layout": "grouped", "cache_io": "layers"}], ids=["npu", "cpu"])
def test_the_graph_is_torchs_folded_graph(tts, tmp_path, layout):
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.stepgraph.talker_step import TalkerStep

    step = TalkerStep(tts.net.talker.model, capacity=32, B=4, **layout).eval()
    ours = export_talker_onnx(step, tmp_path / "ours.onnx")
    ref = _torch_export(step, tmp_path / "torch.onnx")
    assert _compute_ops(ours) == _compute_ops(ref)
    a, b = (onnx.load(str(p)).graph for p in (ours, ref))
    assert len(a.initializer) == len(b.initializer) and not any(
        i.name in {w.name for w in a.initializer} for i in a.input)  # no weight left as an input
    for x, y in zip(_run(ours, step), _run(ref, step)):
        np.testing.assert_array_equal(x, y)
    assert not (tmp_path / "ours.onnx.data").exists()


def test_large_graphs_keep_their_weights_beside_them(tts, tmp_path, monkeypatch):
    import rkspeech.export.weights as weights
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.plan.linking import plan_name
    from rkspeech.stepgraph.talker_step import TalkerStep

    step = TalkerStep(tts.net.talker.model, capacity=32, B=1, kv_layout="grouped", cache_io="layers").eval()
    inline = export_talker_onnx(step, tmp_path / "inline.onnx")
    monkeypatch.setattr(weights, "INLINE_LIMIT", 0)
    path = export_talker_onnx(step, tmp_path / "decode.onnx")
    data = tmp_path / "decode.onnx.data"
    graph = onnx.load(str(path), load_external_data=False).graph
    big = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert big and len(big) == len(graph.initializer)
    for t in big:
        entry = {e.key: e.value for e in t.external_data}
        assert entry["location"] == data.name and int(entry["offset"]) % weights.ALIGN == 0
    assert path.stat().st_size < 100_000 < data.stat().st_size
    for x, y in zip(_run(path, step), _run(inline, step)):
        np.testing.assert_array_equal(x, y)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.onnx", "decode.onnx.data", "inline.onnx"]

    plan = tmp_path / "plan"
    plan.mkdir()
    assert plan_name(path, plan) == "decode.onnx" and (plan / "decode.onnx.data").is_file()
    for x, y in zip(_run(plan / "decode.onnx", step), _run(inline, step)):
        np.testing.assert_array_equal(x, y)

    monkeypatch.setattr(weights, "INLINE_LIMIT", 1 << 30)  # exported again small: the old data goes
    export_talker_onnx(step, path)
    assert not data.exists() and len(_run(path, step)) == 2


@pytest.mark.parametrize("formulation", ["reference", "npu"])
def test_the_vocoder_graph_is_torchs_folded_graph(reduced_ckpt, tmp_path, monkeypatch, formulation):
    """Convolutions, transposed convolutions and weights that serve two modules (torch keeps an
    Identity there): the NPU's graphs too are torch's."""
    import rkspeech.export.vocoder_onnx as vocoder_onnx
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.stepgraph.step_npu import make_step

    step = make_step(load_vocoder(reduced_ckpt)[0], 8, formulation)
    ours = vocoder_onnx.export_step_onnx(step, tmp_path / "ours.onnx")
    captured = {}

    def torch_side(module, dummy, output, **kw):
        captured["dummy"] = dummy
        with torch.no_grad():
            torch.onnx.export(module, dummy, str(output), input_names=list(kw["input_names"]),
                              output_names=list(kw["output_names"]), opset_version=17, do_constant_folding=True,
                              dynamo=False)
        return output

    monkeypatch.setattr(vocoder_onnx, "export_traced", torch_side)
    ref = vocoder_onnx.export_step_onnx(step, tmp_path / "torch.onnx")
    assert _compute_ops(ours) == _compute_ops(ref)
    names = [i.name for i in onnx.load(str(ours), load_external_data=False).graph.input]
    feeds = {n: t.numpy() for n, t in zip(names, captured["dummy"])}
    a, b = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds) for p in (ours, ref))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
