"""Cut an ONNX graph into consecutive pieces that chain back to the whole graph.

For graphs whose simulator build does not fit in memory (``runtime.runners.segmented``): the
simulator keeps every intermediate tensor, so in K pieces each build holds about 1/K of the
activations.

How: nodes stay in the graph's (topological) order and are cut into K runs of about equal
activation volume, or at given ``cuts`` (the Whisper encoder: at block boundaries).  Constant
nodes, and Identity nodes over an initializer, are copied into every piece that reads them.  A tensor that
crosses a cut leaves its piece flattened to 1-D and is reshaped back in the next one (the
toolkit takes 1-D inputs; the KV history is rank 5).  Pure graph surgery: onnx only.

Graphs over protobuf's 2 GB (a fp32 Whisper large encoder: 2.55 GB, written by torch with one
external data file per initializer) are read without their weights (shape inference on the
weightless graph; onnx refuses to serialise a > 2 GB proto), and each piece reads only its own
initializers' data when it is written, so the host holds one piece's weights at a time.  A piece
still over ``INLINE_LIMIT`` bytes is written with its weights in one ``partK.onnx.data`` beside it.
Measured (docs/whisper-sizes.md): the large-v3 encoder's 2.55 GB graph cut into four
pieces of 629-659 MB in 35 s (the build process, which also exported the graph and ran it on
onnxruntime, peaked at 8.4 GB).
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.errors import RkspeechError

FLAT_SUFFIX = "__flat"
#: Pieces with more initializer bytes than this keep them in an external data file (protobuf: 2 GiB).
INLINE_LIMIT = 1_800_000_000


def _external(t) -> bool:
    from onnx import TensorProto

    return t.data_location == TensorProto.EXTERNAL


def _with_data(t, base_dir: str):
    """``t`` with its bytes in ``raw_data`` (a copy when they live in an external file)."""
    if not _external(t):
        return t
    from onnx import TensorProto
    from onnx.external_data_helper import load_external_data_for_tensor

    c = TensorProto()
    c.CopyFrom(t)
    load_external_data_for_tensor(c, base_dir)
    c.data_location = TensorProto.DEFAULT
    del c.external_data[:]
    return c


def _nbytes(t) -> int:
    if _external(t):
        return next((int(e.value) for e in t.external_data if e.key == "length"), 0)
    return t.ByteSize()


def _size(vi) -> int:
    n = 1
    for d in vi.type.tensor_type.shape.dim:
        n *= max(int(d.dim_value), 1)
    return n


def _copied(node, inits) -> bool:
    """Constants, and Identity nodes over an initializer (torch's export de-duplicates equal
    initializers that way: synthetic Whisper weights' zero biases and unit LayerNorm scales), are
    copied into every piece that reads them instead of crossing a cut."""
    return node.op_type == "Constant" or (node.op_type == "Identity" and node.input[0] in inits)


def work_nodes(graph) -> list:
    """The nodes ``cuts`` index: every node but the Constants (``accuracy.pieces.choose_cuts``
    counts the same way).  Nodes :func:`_copied` into every piece are dropped from their run
    after the cut."""
    return [n for n in graph.node if n.op_type != "Constant"]


def split_onnx(onnx_path, pieces: int, out_dir, cuts: list[int] | None = None) -> list[Path]:
    """Write ``pieces`` consecutive pieces of ``onnx_path`` to ``out_dir``; return their paths.

    A tensor ``t`` crossing a cut is the output ``t + FLAT_SUFFIX`` (1-D) of its piece and the
    input of the same name of every later piece that reads it.  ``cuts``: where pieces 2.. start,
    as indices into :func:`work_nodes` (default: equal activation volume)."""
    import onnx
    from onnx import TensorProto, helper

    if pieces < 2:
        raise RkspeechError(f"split into >= 2 pieces, got {pieces}")
    model = onnx.load(os.fspath(onnx_path), load_external_data=False)
    base_dir = os.fspath(Path(onnx_path).parent)
    g = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    info = {vi.name: vi for vi in list(inferred.value_info) + list(g.input) + list(g.output)}
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {vi.name for vi in g.output}
    consts = {o: n for n in g.node if _copied(n, inits) for o in n.output}
    work = work_nodes(g)
    volume = [sum(_size(info[o]) for o in n.output if o in info) for n in work]
    if cuts is not None:
        cuts = [0] + sorted({int(c) for c in cuts if 0 < int(c) < len(work)})
    else:
        cuts, acc, total = [0], 0, sum(volume)
        for i, v in enumerate(volume):
            acc += v
            if len(cuts) < pieces and acc >= total * len(cuts) / pieces:
                cuts.append(i + 1)
    pieces = [[n for n in work[a:b] if n.output[0] not in consts] for a, b in zip(cuts, cuts[1:] + [len(work)])]
    pieces = [nodes for nodes in pieces if nodes]
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
        weights = [inits[i] for i in sorted(set(needed) | {i for n in head for i in n.input}) if i in inits]
        external = sum(_nbytes(t) for t in weights) > INLINE_LIMIT
        sub = helper.make_graph(head + list(nodes) + tail, f"{g.name}_part{k}", inputs, outputs,
                                initializer=[_with_data(t, base_dir) for t in weights])
        path = out_dir / f"part{k}.onnx"
        piece = helper.make_model(sub, opset_imports=model.opset_import, producer_name="rkspeech",
                                  ir_version=model.ir_version)
        if external:
            onnx.save(piece, os.fspath(path), save_as_external_data=True, all_tensors_to_one_file=True,
                      location=f"part{k}.onnx.data", size_threshold=1024)
        else:
            onnx.save(piece, os.fspath(path))
        del sub, piece  # this piece's weights: one piece at a time in memory
        paths.append(path)
    return paths
