"""An int8 step graph whose rows are quantized apart: a lanes graph that computes each row as the
one-row graph computes it alone.

onnxruntime's dynamic int8 quantization (``convert.cpu_quant``, ``quantize_dynamic``) gives every
MatMul's input one scale and zero point over the whole tensor (``DynamicQuantizeLinear``): in a
step graph of N lanes the rows of other streams change a stream's rounding (the trained reduced
root's int8 talker in 20 lanes: 41.71 dB against 44.83 dB alone, docs/accuracy-gate.md), so its
codes would depend on its companions.  :func:`rows_apart` rewrites each ``DynamicQuantizeLinear``
into the same arithmetic per row (``ReduceMin`` / ``ReduceMax`` over the row, onnxruntime's
``GetQuantizationParameter`` step by step, a per-axis ``QuantizeLinear``: the kernel
``DynamicQuantizeLinear`` quantizes with), which for a one-row input is the original.

``MatMulInteger`` takes one input zero point in onnxruntime (a per-row vector is refused), so the
rewritten product takes none and subtracts ``zero_point[row] * sum_k(W[k, n] - W_zero_point[n])``
(a constant per output column, ``*_rows_colsum``) in int32: the same integer the original
computes.  Every scale product that multiplied the tensor's scale multiplies the row's.  The
weights are untouched; the checks of ``pipelines.lane_graphs`` ignore the column sums
(:data:`DERIVED_SUFFIX`).  Bit-identity with the one-row graph is tested, not assumed
(``tests/convert/test_int8_rows.py``).
"""

from __future__ import annotations

#: initializers this rewrite adds (derived from the weights): not weights of their own
DERIVED_SUFFIX = "_rows_colsum"


def rows_apart(model):
    """``model`` (an ``onnx.ModelProto`` of opset 13-17 from ``quantize_dynamic``) with every
    ``DynamicQuantizeLinear`` over the last axis of each row; returns the count rewritten."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def const(name, value, dtype):
        g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    zero, one, c255 = (const("rows_f_zero", 0.0, np.float32), const("rows_f_one", 1.0, np.float32),
                       const("rows_f_255", 255.0, np.float32))
    flat = const("rows_flat_shape", [-1], np.int64)
    new_nodes, after, count = [], {}, 0
    for n in list(g.node):
        if n.op_type != "DynamicQuantizeLinear":
            new_nodes.append(n)
            continue
        count += 1
        x, (xq, xs, xz) = n.input[0], n.output
        p = f"{xq}_rows"

        def node(op, ins, outs, **attrs):
            new_nodes.append(helper.make_node(op, ins, outs, name=f"{p}/{op}_{len(new_nodes)}", **attrs))
            return outs[0]

        mx = node("Max", [node("ReduceMax", [x], [f"{p}_max"], axes=[-1], keepdims=1), zero], [f"{p}_max0"])
        mn = node("Min", [node("ReduceMin", [x], [f"{p}_min"], axes=[-1], keepdims=1), zero], [f"{p}_min0"])
        scale = node("Div", [node("Sub", [mx, mn], [f"{p}_range"]), c255], [f"{p}_scale_raw"])
        scale = node("Where", [node("Equal", [mx, mn], [f"{p}_flat"]), one, scale], [xs])  # [rows, 1]
        izp = node("Sub", [zero, node("Div", [mn, scale], [f"{p}_min_over_scale"])], [f"{p}_izp"])
        zpf = node("Round", [node("Clip", [izp, zero, c255], [f"{p}_izp_clip"])], [f"{p}_zp_f"])
        zp = node("Cast", [zpf], [xz], to=TensorProto.UINT8)  # [rows, 1]
        rows = node("Flatten", [x], [f"{p}_rows"], axis=-1)  # [rows, K] whatever the rank
        q = node("QuantizeLinear", [rows, node("Reshape", [scale, flat], [f"{p}_scale_1d"]),
                                    node("Reshape", [zp, flat], [f"{p}_zp_1d"])], [f"{p}_q2d"], axis=0)
        node("Reshape", [q, node("Shape", [x], [f"{p}_shape"])], [xq])
        zp32 = node("Cast", [zp], [f"{p}_zp_i32"], to=TensorProto.INT32)
        for mm in consumers.get(xq, []):
            if mm.op_type != "MatMulInteger" or len(mm.input) < 3 or mm.input[2] != xz:
                raise ValueError(f"rows_apart: {mm.name} reads {xq} but is not a MatMulInteger with its zero point")
            w = numpy_helper.to_array(inits[mm.input[1]]).astype(np.int32)
            wz = (numpy_helper.to_array(inits[mm.input[3]]).astype(np.int32) if len(mm.input) > 3 and mm.input[3]
                  else np.zeros((), np.int32))
            colsum = const(f"{mm.input[1]}{DERIVED_SUFFIX}", (w - wz).sum(axis=0), np.int32)
            raw = mm.output[0]
            mm.input[2] = ""  # no input zero point: corrected below
            mm.output[0] = f"{raw}_no_zp"
            corr = f"{raw}_zp_term"
            later = helper.make_node("Mul", [zp32, colsum], [corr], name=f"{raw}/rows_zp_term")
            fix = helper.make_node("Sub", [mm.output[0], corr], [raw], name=f"{raw}/rows_zp_fix")
            after[id(mm)] = (later, fix)
    ordered = []
    for n in new_nodes:
        ordered.append(n)
        if id(n) in after:
            ordered.extend(after.pop(id(n)))
    del g.node[:]
    g.node.extend(ordered)
    return count
