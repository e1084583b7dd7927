"""Graph rewrites run with onnxruntime: every intermediate as an output, and the fp16 storage model.

The fp16 storage model is the graph with its weights rounded to fp16 and a Cast to fp16 and
back inserted after every float node output (and its float inputs rounded to fp16), so each
activation is stored in fp16 the way the NPU stores it between layers, while every op still
computes and accumulates in fp32.  It is what fp16 storage alone costs: if the simulator's error
matches it, the rest is fp16's and not the compiler's; where they part, the compiler's fusions,
its accumulation or its op implementations differ from "round after each op" (a fused
MatMul+Add does not round between the two; a LayerNorm or Softmax may keep more precision
inside, or less).

onnxruntime runs both with graph optimisations off: its Cast-pair elimination would otherwise
be free to remove the rounding.
"""

from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0


def float_outputs(model) -> dict[str, int]:
    """The float32 node outputs of ``model`` (Constant nodes excluded) in node order, with their
    element counts (1 where shape inference does not know)."""
    import onnx
    from onnx import TensorProto

    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    info = {vi.name: vi.type.tensor_type
            for vi in list(inferred.value_info) + list(inferred.output) + list(inferred.input)}
    out = {}
    for n in model.graph.node:
        if n.op_type == "Constant":
            continue
        for o in n.output:
            t = info.get(o)
            if o and t is not None and t.elem_type == TensorProto.FLOAT:
                size = 1
                for d in t.shape.dim:
                    size *= max(int(d.dim_value), 1)
                out[o] = size
    return out


def batches(sizes: dict[str, int], budget_values: int) -> list[list[str]]:
    """Consecutive groups of the tensors ``sizes`` of at most ``budget_values`` values each
    (a larger tensor alone): how many intermediates one onnxruntime run may expose."""
    groups: list[list[str]] = [[]]
    acc = 0
    for name, n in sizes.items():
        if groups[-1] and acc + n > budget_values:
            groups.append([])
            acc = 0
        groups[-1].append(name)
        acc += n
    return [g for g in groups if g]


def with_outputs(model, names) -> object:
    """A copy of ``model`` whose graph outputs are its own plus ``names`` (float32)."""
    from onnx import TensorProto, helper

    m = type(model)()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
            have.add(name)
    return m


def _round_tensor(t) -> None:
    from onnx import TensorProto, numpy_helper

    if t.data_type == TensorProto.FLOAT:
        a = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array(a.astype(np.float16).astype(np.float32), t.name))


def fp16_storage(model, rounded: list[str]) -> object:
    """A copy of ``model`` with float weights and Constant values rounded to fp16 and each
    tensor of ``rounded`` (node outputs) passed through Cast(fp16) -> Cast(fp32) where it is
    produced.  The rounded tensors keep their names, so the two graphs compare name by name."""
    from onnx import TensorProto, helper

    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        _round_tensor(t)
    targets = set(rounded)
    nodes = []
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    _round_tensor(a.t)
            nodes.append(n)
            continue
        casts = []
        for i, o in enumerate(n.output):
            if o in targets:
                n.output[i] = o + "__fp32"
                casts += [helper.make_node("Cast", [o + "__fp32"], [o + "__fp16"], to=TensorProto.FLOAT16,
                                           name=o + "__to_fp16"),
                          helper.make_node("Cast", [o + "__fp16"], [o], to=TensorProto.FLOAT,
                                           name=o + "__from_fp16")]
        nodes += [n] + casts
    del g.node[:]
    g.node.extend(nodes)
    return m


class OrtGraph:
    """onnxruntime over an in-memory ModelProto, optimisations off.  ``fp16_inputs``: float
    inputs are rounded to fp16 first (the NPU's graph boundary)."""

    def __init__(self, model, threads: int = 2, fp16_inputs: bool = False):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = max(1, int(threads))
        so.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.fp16_inputs = fp16_inputs

    def run(self, env: dict) -> dict[str, np.ndarray]:
        feed = {}
        for name in self.inputs:
            a = np.asarray(env[name])
            if self.fp16_inputs and a.dtype == np.float32:
                with np.errstate(over="ignore"):
                    a = a.astype(np.float16).astype(np.float32)
            feed[name] = a
        return dict(zip(self.outputs, self.session.run(self.outputs, feed)))
