"""The simulator for graphs too big for it: cut the ONNX into consecutive pieces and simulate
them one after another, each in its own child process.

Why: the simulator keeps every intermediate tensor.  The npu formulation of the published
vocoder step at B=64 passed 15.3 GB in its first inference (and was killed by the kernel at
24.2 GB in-process, measured 2026-11-29), so on a 24 GB machine it cannot be simulated whole.
In K pieces, each child holds about 1/K of the activations.

How: nodes stay in the graph's (topological) order and are cut into K runs of about equal
activation volume.  Constant nodes are copied into every piece that reads them.  A tensor that
crosses a cut leaves its piece flattened to 1-D and is reshaped back in the next one (the
toolkit takes 1-D inputs; the KV history is rank 5).  Each piece is built and run for every
step, one at a time (``SegmentedSimulator.infer``), so a step costs K builds: slow, but bounded
memory.  Numerics: the pieces meet in fp16 at the cuts, exactly where the whole graph would
hold fp16 too; fusions across a cut are lost (the SNR of whole vs pieces is measured in the
tests on the reduced step).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..errors import RkspeechError
from .runners import Runner, _onnx_io

FLAT_SUFFIX = "__flat"


def _size(vi) -> int:
    n = 1
    for d in vi.type.tensor_type.shape.dim:
        n *= max(int(d.dim_value), 1)
    return n


def split_onnx(onnx_path, parts: int, out_dir) -> list[Path]:
    """Write ``parts`` consecutive pieces of ``onnx_path`` to ``out_dir``; return their paths.

    A tensor ``t`` crossing a cut is the output ``t + FLAT_SUFFIX`` (1-D) of its piece and the
    input of the same name of every later piece that reads it."""
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


class SegmentedSimulator(Runner):
    """``infer(feed)`` runs the pieces of ``split_onnx`` one after another, each built in its
    own ``SimulatorProcess`` and freed before the next (``peak_rss_mb``: the largest child)."""

    name = "rknn-simulator-pieces"

    def __init__(self, onnx_path, parts: int = 4, target: str = "rk3588", dtype: str = "fp16",
                 work_dir=None, memory_limit_mb: float | None = None):
        super().__init__()
        self._inputs, self._outputs = _onnx_io(os.fspath(onnx_path))
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rkspeech-pieces-")
            work_dir = self._tmp.name
        self.paths = split_onnx(onnx_path, parts, work_dir)
        self.target, self.dtype, self.memory_limit_mb = target, dtype, memory_limit_mb
        self.peak_rss_mb = 0.0
        self.calls = 0

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .. import progress
        from .sim_process import SimulatorProcess

        env = dict(zip(self._inputs, self._ordered_feed(feed)))
        self.calls += 1
        for k, path in enumerate(self.paths):
            with progress.stage(f"simulator call {self.calls}, piece {k + 1}/{len(self.paths)}: build and run"), \
                    SimulatorProcess(path, target=self.target, dtype=self.dtype,
                                     memory_limit_mb=self.memory_limit_mb) as sim:
                wanted = sim.input_specs()
                out = sim.infer({n: env[n] for n in wanted})
                self.peak_rss_mb = max(self.peak_rss_mb, sim.peak_rss_mb)
            env.update(out)
        return self._shape_outputs([env[n] for n in self._outputs])

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
