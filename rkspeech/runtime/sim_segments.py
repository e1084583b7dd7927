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
    """Write ``parts`` consecutive pieces of ``onnx_path`` to ``out_dir``; return their paths."""
    import onnx
    from onnx import helper, numpy_helper  # noqa: F401 - numpy_helper keeps initializers typed

    if parts < 2:
        raise RkspeechError(f"split into >= 2 pieces, got {parts}")
    model = onnx.load(os.fspath(onnx_path))
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    g = model.graph
    info = {vi.name: vi for vi in list(inferred.graph.value_info) + list(g.input) + list(g.output)}
    inits = {t.name: t for t in g.initializer}
    graph_inputs = [vi.name for vi in g.input if vi.name not in inits]
    graph_outputs = [vi.name for vi in g.output]
    consts = {o: n for n in g.node if n.op_type == "Constant" for o in n.output}
    work = [n for n in g.node if n.op_type != "Constant"]
    volume = [sum(_size(info[o]) for o in n.output if o in info) for n in work]
    total, cuts, acc = sum(volume), [], 0
    for i, v in enumerate(volume):
        acc += v
        if len(cuts) < parts - 1 and acc >= total * (len(cuts) + 1) / parts:
            cuts.append(i + 1)
    bounds = [0] + cuts + [len(work)]
    pieces = [work[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    produced_in = {o: k for k, nodes in enumerate(pieces) for n in nodes for o in n.output}
    used_later: dict[str, int] = {}
    for k, nodes in enumerate(pieces):
        for n in nodes:
            for i in n.input:
                if i in produced_in and produced_in[i] < k:
                    used_later[i] = max(used_later.get(i, -1), k)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, nodes in enumerate(pieces):
        needed = {i for n in nodes for i in n.input if i}
        body = [consts[i] for i in sorted(needed) if i in consts]
        inputs, extra = [], []
        for name in graph_inputs:
            if name in needed:
                inputs.append(info[name])
        for name in sorted(needed):
            if name in produced_in and produced_in[name] < k:
                vi = info[name]
                dims = [int(d.dim_value) for d in vi.type.tensor_type.shape.dim]
                flat = helper.make_tensor_value_info(name + FLAT_SUFFIX, vi.type.tensor_type.elem_type, [_size(vi)])
                inputs.append(flat)
                shape_name = f"{name}{FLAT_SUFFIX}_shape"
                extra.append(helper.make_node("Constant", [], [shape_name], value=helper.make_tensor(
                    shape_name, onnx.TensorProto.INT64, [len(dims)], dims)))
                extra.append(helper.make_node("Reshape", [name + FLAT_SUFFIX, shape_name], [name]))
        outputs = []
        for n in nodes:
            for o in n.output:
                if o in graph_outputs:
                    outputs.append(info[o])
                elif used_later.get(o, -1) > k:
                    vi = info[o]
                    flat_shape = f"{o}{FLAT_SUFFIX}_outshape"
                    extra.append(helper.make_node("Constant", [], [flat_shape], value=helper.make_tensor(
                        flat_shape, onnx.TensorProto.INT64, [1], [_size(vi)])))
                    extra.append(helper.make_node("Reshape", [o, flat_shape], [o + FLAT_SUFFIX + "_out"]))
                    outputs.append(helper.make_tensor_value_info(o + FLAT_SUFFIX + "_out",
                                                                 vi.type.tensor_type.elem_type, [_size(vi)]))
        nodes_out = [n for n in extra if n.op_type == "Constant"] + body + \
            [n for n in extra if n.op_type == "Reshape" and n.output[0] in needed] + list(nodes) + \
            [n for n in extra if n.op_type == "Reshape" and n.output[0].endswith("_out")]
        sub = helper.make_graph(nodes_out, f"{g.name}_part{k}", inputs, outputs,
                                initializer=[inits[i] for i in sorted(needed) if i in inits])
        sub_model = helper.make_model(sub, opset_imports=model.opset_import, producer_name="rkspeech",
                                      ir_version=model.ir_version)
        path = out_dir / f"part{k}.onnx"
        onnx.save(sub_model, os.fspath(path))
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
            for name, value in out.items():
                if name.endswith(FLAT_SUFFIX + "_out"):
                    env[name[: -len("_out")]] = value.reshape(-1)
                else:
                    env[name] = value
        return self._shape_outputs([env[n] for n in self._outputs])

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
