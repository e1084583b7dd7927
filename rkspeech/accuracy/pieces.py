"""The graph cut into consecutive pieces for the accuracy map, with rank <= 3 cuts kept in shape.

``export.split.split_onnx`` passes every tensor that crosses a cut flattened to 1-D (the KV
history is rank 5, which the toolkit does not take as an input).  For the Whisper base encoder
that broke the first piece's simulator build: the Reshape of the conv stem's [1, 1500, 512]
output to [768000] made the converter ask for a 768000 x 768000 float32 matrix (2.15 TiB;
measured on rk3588).  So here a crossing tensor of rank <= 3 leaves and enters its
pieces in its own shape (the whole graph's inputs and outputs are rank-3 tensors the simulator
takes); rank 4 stays flat (the toolkit reads a 4-D input as NCHW / NHWC, a layout question the
flat form avoids), and so does rank 5.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rkspeech.export.split import FLAT_SUFFIX

MAX_SHAPED_RANK = 3


def cut(model_path: Path, pieces: int, work_dir: Path) -> list[Path]:
    """``pieces`` consecutive pieces of ``model_path`` in ``work_dir`` (1: the graph itself)."""
    from rkspeech.export.split import split_onnx

    work_dir.mkdir(parents=True, exist_ok=True)
    if pieces == 1:
        dst = work_dir / "part0.onnx"
        shutil.copyfile(model_path, dst)
        return [dst]
    paths = split_onnx(model_path, pieces, work_dir, cuts=choose_cuts(model_path, pieces))
    for p in paths:
        unflatten(p)
    return paths


def choose_cuts(model_path: Path, pieces: int) -> list[int]:
    """Where pieces 2..``pieces`` start (indices into the non-Constant nodes): near equal node
    counts, at the position within half a piece of that where the fewest values cross the cut.  So a transformer is cut on its residual stream (Whisper base: one [1, 1500, 512]
    tensor) and not inside an attention, whose [1, 8, 1500, 1500] scores would cross as 18 M
    values, and a block is a stretch of the model one can name."""
    import onnx

    model = onnx.load(os.fspath(model_path))
    g = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    size = {}
    for vi in list(inferred.value_info) + list(g.output):
        n = 1
        for d in vi.type.tensor_type.shape.dim:
            n *= max(int(d.dim_value), 1)
        size[vi.name] = n
    work = [n for n in g.node if n.op_type != "Constant"]
    made = {o: i for i, n in enumerate(work) for o in n.output}
    last = dict(made)
    for i, n in enumerate(work):
        for t in n.input:
            if t in made:
                last[t] = max(last[t], i)
    for vi in g.output:
        if vi.name in made:
            last[vi.name] = len(work)
    # crossing[c]: values of the tensors made before node c and read at or after it
    delta = [0] * (len(work) + 2)
    for t, p in made.items():
        if last[t] > p:
            delta[p + 1] += size.get(t, 1)
            delta[last[t] + 1] -= size.get(t, 1)
    crossing, acc = [], 0
    for c in range(len(work) + 1):
        acc += delta[c]
        crossing.append(acc)
    targets = [round(len(work) * j / pieces) for j in range(1, pieces)]
    half = max(1, len(work) // (2 * pieces))
    cuts: list[int] = []
    for t in targets:
        lo = max(cuts[-1] + 1 if cuts else 1, t - half)
        hi = min(len(work) - 1, t + half)
        if lo > hi:
            continue
        cuts.append(min(range(lo, hi + 1), key=lambda c: (crossing[c], abs(c - t))))
    return cuts


def unflatten(path: Path) -> None:
    """Rewrite one piece in place: each flat cut input / output whose tensor has rank <=
    ``MAX_SHAPED_RANK`` becomes that tensor, in its shape, and the Reshape that split_onnx put
    there (with its shape Constant) goes."""
    import onnx
    from onnx import helper

    model = onnx.load(os.fspath(path))
    g = model.graph
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}
    dims_of = {}  # tensor -> its dims, read from the head Reshapes' shape Constants
    for n in g.node:
        if n.op_type == "Reshape" and n.input[0].endswith(FLAT_SUFFIX) and n.input[1] in consts:
            dims_of[n.output[0]] = [int(d) for d in onnx.numpy_helper.to_array(consts[n.input[1]].attribute[0].t)]
    inferred = onnx.shape_inference.infer_shapes(model).graph
    for vi in inferred.value_info:
        if vi.name not in dims_of and vi.type.tensor_type.HasField("shape"):
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            if dims and all(d > 0 for d in dims):
                dims_of[vi.name] = dims
    drop: set[str] = set()

    def shaped(vis, is_input: bool) -> list:
        """Each flat graph I/O whose tensor has a known rank <= MAX_SHAPED_RANK, back in its
        shape; the Reshape joining it to the graph (and its shape constant) goes."""
        out = []
        for vi in vis:
            t = vi.name[: -len(FLAT_SUFFIX)] if vi.name.endswith(FLAT_SUFFIX) else None
            if t is None or len(dims_of.get(t, [0] * 9)) > MAX_SHAPED_RANK:
                out.append(vi)
                continue
            link = next(n for n in g.node if n.op_type == "Reshape"
                        and (n.input[0] if is_input else n.output[0]) == vi.name)
            drop.update({link.output[0], link.input[1]})
            out.append(helper.make_tensor_value_info(t, vi.type.tensor_type.elem_type, dims_of[t]))
        return out

    inputs, outputs = shaped(g.input, True), shaped(g.output, False)
    if not drop:
        return
    nodes = [n for n in g.node if n.output[0] not in drop]
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    g.input.extend(inputs)
    del g.output[:]
    g.output.extend(outputs)
    onnx.save(model, os.fspath(path))
