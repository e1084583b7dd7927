"""Preflight lint of an ONNX graph for the RKNN compiler: find what crashes it, what is not
static, what lands on the CPU and what overflows fp16 -- before a long conversion.

The facts live in ``lint_rules.RULES`` (each with its source); this module only matches them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET
from rkspeech.lint import rules as lint_rules

_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}


@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    node: str | None = None
    op_type: str | None = None
    source: str = ""


@dataclass
class LintReport:
    model: str
    target: str
    findings: list[Finding] = field(default_factory=list)
    checked_fp16: bool = False

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def rule_ids(self) -> set[str]:
        return {f.rule for f in self.findings}

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "errors": len(self.errors),
                "warnings": len(self.warnings), "checked_fp16": self.checked_fp16,
                "findings": [asdict(f) for f in self.findings]}


def _add(report: LintReport, rule_id: str, message: str, node=None) -> None:
    r = lint_rules.rule(rule_id)
    if not lint_rules.applies(r, report.target):
        return
    report.findings.append(Finding(rule=rule_id, severity=r["severity"], message=message,
                                   node=(node.name or (node.output[0] if node.output else None)) if node is not None else None,
                                   op_type=node.op_type if node is not None else None,
                                   source=r["source"]))


def _shape_map(model) -> dict[str, tuple]:
    """Static shape of every tensor that shape inference can tell (unknown dims as None),
    initializers included."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - lint works without shapes
        inferred = model
    shapes: dict[str, tuple] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    for init in g.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _one_channel(shape) -> bool:
    """A 4-D shape (1, 1, H, W): one channel, which the compiler stores without a transpose."""
    return shape is not None and len(shape) == 4 and shape[0] == 1 and shape[1] == 1


def _readers(g, name: str, depth: int = 0) -> list:
    """``(node, input name)`` of the nodes reading ``name``, looking through Identity and float
    Casts (an exported ``x.to(float32)`` of a float32 input; the compiler drops them)."""
    out = []
    for n in g.node:
        if name not in n.input:
            continue
        to = next((a.i for a in n.attribute if a.name == "to"), None)
        if depth < 4 and (n.op_type == "Identity" or (n.op_type == "Cast" and to in _FLOAT_TYPES)):
            out += _readers(g, n.output[0], depth + 1)
        else:
            out.append((n, name))
    return out


def _check_unaligned_io(report: LintReport, g, initializers, producers, shapes) -> None:
    """Rank-3 graph inputs/outputs [1, C, W], C > 1, W % align != 0 that are not read / written
    through a one-channel (1, 1, C, W) Reshape (rule ``unaligned-3d-io``)."""
    align = lint_rules.rule("unaligned-3d-io")["align"]

    def unaligned(shape) -> bool:
        return (shape is not None and len(shape) == 3 and None not in shape and shape[1] > 1
                and shape[2] % align != 0)

    for vi in g.input:
        if vi.name in initializers or not unaligned(shapes.get(vi.name)):
            continue
        bad = [n for n, src in _readers(g, vi.name) if not (n.op_type == "Reshape" and n.input[0] == src
                                                           and _one_channel(shapes.get(n.output[0])))]
        if bad:
            _add(report, "unaligned-3d-io", f"graph input {vi.name} {list(shapes[vi.name])} is read by "
                 f"{bad[0].op_type}: a (1,C,W) -> (1,C,1,W) Reshape on the CPU", bad[0])
    for vi in g.output:
        if not unaligned(shapes.get(vi.name)):
            continue
        n = producers.get(vi.name)
        if n is not None and n.op_type == "Reshape" and _one_channel(shapes.get(n.input[0])):
            continue
        _add(report, "unaligned-3d-io", f"graph output {vi.name} {list(shapes[vi.name])} is written by "
             f"{n.op_type if n is not None else 'nothing'}: a (1,C,1,W) -> (1,C,W) Reshape on the CPU", n)


def _elem_types(model) -> dict[str, int]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001
        inferred = model
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        out[vi.name] = vi.type.tensor_type.elem_type
    for init in g.initializer:
        out[init.name] = init.data_type
    return out


def lint_model(onnx_path: str | os.PathLike, target: str = DEFAULT_TARGET,
               sample_input_check: bool = False) -> LintReport:
    import onnx

    path = os.fspath(onnx_path)
    if not os.path.isfile(path):
        raise RkspeechError(f"{path}: no such ONNX file")
    try:  # names, types and dims only: a graph's external weights (6.1 GB at 1.7B) stay on disk
        model = onnx.load(path, load_external_data=sample_input_check)
    except Exception as exc:  # noqa: BLE001 - protobuf errors
        raise RkspeechError(f"{path}: not a readable ONNX model ({type(exc).__name__})") from None
    report = LintReport(model=path, target=target)
    g = model.graph
    initializers = {i.name for i in g.initializer}
    constants = set(initializers)
    for n in g.node:
        if n.op_type == "Constant":
            constants.update(n.output)

    # static shapes
    for kind, items in (("input", [i for i in g.input if i.name not in initializers]), ("output", g.output)):
        for vi in items:
            t = vi.type.tensor_type
            if not t.HasField("shape"):
                _add(report, "dynamic-dim", f"graph {kind} {vi.name} has no shape")
                continue
            for k, d in enumerate(t.shape.dim):
                if not d.HasField("dim_value") or d.dim_value <= 0:
                    label = d.dim_param or "?"
                    _add(report, "dynamic-dim", f"graph {kind} {vi.name} dim {k} is {label!r}")

    shapes = _shape_map(model)
    ranks = {name: len(shape) for name, shape in shapes.items()}
    types = _elem_types(model)
    producers = {o: n for n in g.node for o in n.output}
    placement_rules = [r for r in lint_rules.RULES if "ops" in r and lint_rules.applies(r, target)]
    if lint_rules.applies(lint_rules.rule("unaligned-3d-io"), target):
        _check_unaligned_io(report, g, initializers, producers, shapes)

    for n in g.node:
        op = n.op_type
        if op == "LayerNormalization" and not any(a.name == "epsilon" for a in n.attribute):
            _add(report, "layernorm-no-epsilon", "LayerNormalization has no epsilon attribute", n)
        if op == "SkipLayerNormalization" or (n.domain == "com.microsoft" and "LayerNorm" in op):
            _add(report, "skip-layernorm", f"{op} (domain {n.domain or 'ai.onnx'})", n)
        for r in placement_rules:
            if op in r["ops"]:
                _add(report, r["id"], f"{op} -> CPU", n)
                break
        if op == "Cast":
            to = next((a.i for a in n.attribute if a.name == "to"), None)
            src = types.get(n.input[0]) if n.input else None
            if to in _INT_TYPES and src in _FLOAT_TYPES:
                _add(report, "float-to-int-cast", "Cast float -> int", n)
        if op == "Gather" and len(n.input) > 1 and n.input[1] not in constants:
            _add(report, "runtime-gather", f"Gather with runtime indices {n.input[1]!r}", n)
        if op == "ConvTranspose":
            allowed = lint_rules.rule("convtranspose-stride")["allowed_strides"]
            strides = next((list(a.ints) for a in n.attribute if a.name == "strides"), [1])
            bad = [s for s in strides if s not in allowed]
            if bad:
                _add(report, "convtranspose-stride", f"ConvTranspose strides {strides}", n)
        if op == "Conv":
            dil = next((list(a.ints) for a in n.attribute if a.name == "dilations"), [1])
            if max(dil or [1]) >= lint_rules.rule("dilated-conv-regtask")["min_dilation"]:
                _add(report, "dilated-conv-regtask", f"Conv dilations {dil}", n)
        if op == "Softmax":
            _check_attention(report, n, g, producers, ranks)

    if sample_input_check:
        _fp16_check(report, model)
        report.checked_fp16 = True
    return report


def _check_attention(report: LintReport, softmax, g, producers, ranks) -> None:
    """MatMul -> (Mul/Div/Add)* -> Softmax -> MatMul with rank-3 operands."""
    src = softmax.input[0]
    hops = 0
    node = producers.get(src)
    while node is not None and node.op_type in ("Mul", "Div", "Add", "Where", "Cast") and hops < 4:
        node = producers.get(node.input[0])
        hops += 1
    if node is None or node.op_type != "MatMul":
        return
    consumers = [n for n in g.node if softmax.output[0] in n.input and n.op_type == "MatMul"]
    if not consumers:
        return
    qk_rank = ranks.get(node.output[0])
    if qk_rank == 3:
        _add(report, "single-head-3d-attention",
             f"MatMul {node.name or node.output[0]!r} -> Softmax -> MatMul on rank-3 tensors", softmax)


def sample_feed(inputs) -> dict[str, Any]:
    """Random inputs within the declared dtypes; zeros for inputs named like a cache."""
    import numpy as np

    rng = np.random.default_rng(0)
    feed = {}
    for i in inputs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        name = i.name.lower()
        if "float" in i.type:
            dtype = np.float16 if "float16" in i.type else (np.float64 if "double" in i.type else np.float32)
            arr = np.zeros(shape, dtype) if "cache" in name else rng.standard_normal(shape).astype(dtype)
        elif "int" in i.type:
            dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}.get(i.type, np.int64)
            arr = np.zeros(shape, dtype) if "cache" in name else rng.integers(0, 16, shape).astype(dtype)
        elif "bool" in i.type:
            arr = np.zeros(shape, bool)
        else:
            arr = np.zeros(shape, np.float32)
        feed[i.name] = arr
    return feed


def _fp16_check(report: LintReport, model) -> None:
    """Run onnxruntime with every float intermediate exposed; flag |x| > 65504."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    limit = lint_rules.rule("fp16-overflow")["limit"]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    types = _elem_types(model)
    node_of = {}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in existing and types.get(o, 1) in (1, 10, 11):
                m.graph.output.append(onnx.helper.make_empty_tensor_value_info(o))
                existing.add(o)
            node_of[o] = n
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, sample_feed(sess.get_inputs()))
    except Exception as exc:  # noqa: BLE001
        raise RkspeechError(f"--sample-input-check: onnxruntime could not run the graph: "
                            f"{str(exc).splitlines()[0][:200]}") from None
    for name, val in zip(names, outs):
        a = np.asarray(val)
        if a.dtype.kind != "f" or a.size == 0:
            continue
        peak = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else float("inf")
        if peak > limit:
            n = node_of.get(name)
            _add(report, "fp16-overflow", f"{name}: max |x| = {peak:.4g} > {limit:g}", n)
