"""What one call of a text-to-speech stage reads and computes: :class:`CpuCall` (counted from an
ONNX file by :func:`onnx_call`: weights at their stored precision, KV cache inputs, MACs) and
:class:`NpuCall` (the compiler's layer table).  The plan estimate (``estimate.plan_time``) turns
them into time under its assumptions."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.errors import RkspeechError


@dataclass
class CpuCall:
    """What one CPU call reads and computes (from an ONNX file or from recorded figures)."""

    weight_bytes: float
    cache_bytes: float = 0.0  # the KV cache inputs at capacity
    cache_passes: float = 1.0
    macs: float = 0.0  # multiply-accumulates of MatMul / Gemm / Conv
    int8_compute: bool = False
    variant: str = "fp32"
    source: str = ""
    detail: dict = field(default_factory=dict)


@dataclass
class NpuCall:
    """One NPU call: the layer table's estimate (ms, ideal) and its size."""

    est_ms: float
    layers: int
    traffic_bytes: float
    source: str = ""


# ---- from files ---------------------------------------------------------------------------------
_ITEM = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2, 21: 0.5, 22: 0.5}
_WEIGHT_OPS = {"MatMul", "Gemm", "MatMulNBits", "MatMulInteger", "DynamicQuantizeMatMul", "Conv", "ConvTranspose",
               "FusedMatMul"}


def _numel(dims) -> int:
    return math.prod(int(d) for d in dims) if dims else 1


def _shapes(model) -> dict[str, list[int]]:
    """Static tensor shapes from ONNX shape inference (empty where unknown, e.g. after contrib ops)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shapes are an improvement, not a requirement
        return {}
    out = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if dims and all(d > 0 for d in dims):
            out[vi.name] = dims
    return out


def out_macs(out: list[int], w: int, wdims, node) -> float:
    """MACs of a MatMul-like node from its output shape: numel(out) x K, K = w / N."""
    trans_b = any(at.name == "transB" and at.i for at in node.attribute)
    n_out = wdims[0] if trans_b else wdims[-1]
    return _numel(out) * w / n_out if n_out else 0.0


def onnx_call(path: str | os.PathLike, positions: int = 1) -> CpuCall:
    """What one call of an ONNX graph reads and computes, from its initializers and inputs."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency
        raise RkspeechError("the plan estimate needs the onnx package (pip install onnx)") from None
    p = Path(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the file's
        raise RkspeechError(f"{p}: not a readable ONNX file ({type(exc).__name__})") from None
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    # Constant nodes holding tensors count as initializers
    for n in g.node:
        if n.op_type == "Constant" and n.output:
            for at in n.attribute:
                if at.name == "value" and at.HasField("t"):
                    inits[n.output[0]] = at.t

    def nbytes(t) -> float:
        if t.raw_data:
            return float(len(t.raw_data))
        return _numel(t.dims) * _ITEM.get(t.data_type, 4)

    shapes = _shapes(model)
    weight = other = 0.0
    macs = 0.0
    ops: dict[str, int] = {}
    int8 = False
    for n in g.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
        if n.op_type == "Constant":
            continue
        read = [x for i, x in enumerate(n.input) if x in inits and not (n.op_type == "Gather" and i == 0)]
        b = sum(nbytes(inits[x]) for x in read)
        if n.op_type in _WEIGHT_OPS:
            weight += b
        else:
            other += b
        if n.op_type == "MatMulNBits":
            attrs = {at.name: at.i for at in n.attribute}
            macs += attrs.get("N", 0) * attrs.get("K", 0) * positions
            int8 = int8 or attrs.get("accuracy_level", 0) == 4
        elif n.op_type in ("MatMul", "MatMulInteger", "Gemm", "FusedMatMul", "DynamicQuantizeMatMul") \
                and len(n.input) > 1 and n.input[1] in inits:
            w = _numel(inits[n.input[1]].dims)
            out = shapes.get(n.output[0])  # rows x N: MACs = rows x K x N = numel(out) x w / N
            macs += out_macs(out, w, inits[n.input[1]].dims, n) if out else w * positions
            int8 = int8 or n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")
        elif n.op_type in ("Conv", "ConvTranspose") and len(n.input) > 1 and n.input[1] in inits:
            wd = list(inits[n.input[1]].dims)
            w = _numel(wd)
            if n.op_type == "Conv" and shapes.get(n.output[0]):  # numel(out) x Cin/g x k = numel(out) x w / Cout
                macs += _numel(shapes[n.output[0]]) * w / wd[0]
            elif n.op_type == "ConvTranspose" and shapes.get(n.input[0]):  # numel(in) x w / Cin
                macs += _numel(shapes[n.input[0]]) * w / wd[0]
            else:
                macs += w * positions  # shapes unknown: one output position (a lower bound)
    cache = 0.0
    for vi in g.input:
        if vi.name.startswith("cache") and vi.name not in inits:
            t = vi.type.tensor_type
            dims = [d.dim_value for d in t.shape.dim]
            if all(d > 0 for d in dims):
                cache += _numel(dims) * _ITEM.get(t.elem_type, 4)
    if ops.get("MatMulNBits"):
        variant = "int4"
    elif ops.get("MatMulInteger") or ops.get("DynamicQuantizeMatMul"):
        variant = "int8"
    else:
        dt = {inits[n.input[1]].data_type for n in g.node
              if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits}
        variant = "fp16" if dt == {10} else "fp32"
    flat = sum(1 for vi in g.input if vi.name == "cache") == 1
    return CpuCall(weight_bytes=weight + other, cache_bytes=cache, macs=macs, int8_compute=int8, variant=variant,
                   source=str(p), cache_passes=1.0,
                   detail={"weight_op_bytes": int(weight), "other_initializer_bytes": int(other),
                           "cache_input_bytes": int(cache), "flat_cache": flat, "macs_per_call": int(macs),
                           "positions": positions, "quantized_ops": {k: v for k, v in ops.items()
                                                                     if k in ("MatMulNBits", "MatMulInteger",
                                                                              "DynamicQuantizeMatMul")}})
