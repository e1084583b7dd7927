"""Cut an ONNX graph into consecutive pieces that chain back to the whole graph.

For graphs whose simulator build does not fit in memory (``runtime.runners.segmented``): the
simulator keeps every intermediate tensor, so in K pieces each build holds about 1/K of the
activations.

How: nodes stay in the graph's (topological) order and are cut into K runs of about equal
activation volume.  Constant nodes are copied into every piece that reads them.  A tensor that
crosses a cut leaves its piece flattened to 1-D and is reshaped back in the next one (the
toolkit takes 1-D inputs; the KV history is rank 5).  Pure graph surgery: onnx only.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.errors import RkspeechError

FLAT_SUFFIX = "__flat"


def _size(vi) -> int:
    n = 1
    for d in vi.type.tensor_type.shape.dim:
        n *= max(int(d.dim_value), 1)
    return n


def split_onnx(onnx_path, parts: int, out_dir, cuts: list[int] | None = None) -> list[Path]:
    """Write ``parts`` consecutive pieces of ``onnx_path`` to ``out_dir``; return their paths.

    A tensor ``t`` crossing a cut is the output ``t + FLAT_SUFFIX`` (1-D) of its piece and the
    input of the same name of every later piece that reads it.  ``cuts``: where pieces 2.. start,
    as indices into the graph's non-Constant nodes (default: equal activation volume)."""
    import onnx
    from onnx import TensorProto, helper

    if parts < 2:
        raise RkspeechError(f"split into >= 2 pieces, got {parts}")
    model = onnx.load(os.fspath(onnx_path))
    g = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    info = {vi.name: vi for vi in list(inferred.value_info) + list(g.input) + list(g.output)}
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {vi.name for vi in g.output}
    consts = {o: n for n in g.node if n.op_type == "Constant" for o in n.output}
    work = [n for n in g.node if n.op_type != "Constant"]
    volume = [sum(_size(info[o]) for o in n.output if o in info) for n in work]
    if cuts is not None:
        cuts = [0] + sorted({int(c) for c in cuts if 0 < int(c) < len(work)})
    else:
        cuts, acc, total = [0], 0, sum(volume)
        for i, v in enumerate(volume):
            acc += v
            if len(cuts) < parts and acc >= total * len(cuts) / parts:
                cuts.append(i + 1)
    pieces = [work[a:b] for a, b in zip(cuts, cuts[1:] + [len(work)]) if b > a]
    produced_in = {o: k for k, nodes in enumerate(pieces) for n in nodes for o in n.output}
    crossing = {i for k, nodes in enumerate(pieces) for n in nodes for i in n.input
                if produced_in.get(i, k) < k}
    missing = sorted(t for t in crossing if t not in info)
    if missing:
        raise RkspeechError(f"{onnx_path}: no static shape for {missing[:3]}; cannot cut the graph there")

    def reshape(src: str, dst: str, dims: list[int]) -> list:
        shape = f"{dst}__shape"
        return [helper.make_node("Constant", [], [shape], value=helper.make_tensor(
                    shape, TensorProto.INT64, [len(dims)], dims)),
                helper.make_node("Reshape", [src, shape], [dst])]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, nodes in enumerate(pieces):
        needed = sorted({i for n in nodes for i in n.input if i})
        inputs = [vi for vi in g.input if vi.name in needed and vi.name not in inits]
        head = [consts[i] for i in needed if i in consts]
        for name in needed:
            if produced_in.get(name, k) < k:
                vi = info[name]
                elem = vi.type.tensor_type.elem_type
                inputs.append(helper.make_tensor_value_info(name + FLAT_SUFFIX, elem, [_size(vi)]))
                head += reshape(name + FLAT_SUFFIX, name, [int(d.dim_value) for d in vi.type.tensor_type.shape.dim])
        outputs, tail = [], []
        for o in (o for n in nodes for o in n.output):
            if o in graph_outputs:
                outputs.append(info[o])
            elif o in crossing:
                vi = info[o]
                outputs.append(helper.make_tensor_value_info(o + FLAT_SUFFIX, vi.type.tensor_type.elem_type, [_size(vi)]))
                tail += reshape(o, o + FLAT_SUFFIX, [_size(vi)])
        sub = helper.make_graph(head + list(nodes) + tail, f"{g.name}_part{k}", inputs, outputs,
                                initializer=[inits[i] for i in needed if i in inits])
        path = out_dir / f"part{k}.onnx"
        onnx.save(helper.make_model(sub, opset_imports=model.opset_import, producer_name="rkspeech",
                                    ir_version=model.ir_version), os.fspath(path))
        paths.append(path)
    return paths
