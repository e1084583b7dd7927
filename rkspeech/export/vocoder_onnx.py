"""Export the vocoder step graph to ONNX and describe what came out.

Static shapes, opset 17, the legacy TorchScript exporter (``dynamo=False``: with torch 2.13
it writes graphs that onnxruntime and rknn-toolkit2 2.5.0 load; field notes), output shapes
declared, and the step contract in the metadata (``rkspeech.contract``).  ``graph_summary``
gives the node count, the op histogram and the op types known to be risky for rknn-toolkit2.
"""

from __future__ import annotations

import collections
import os
import warnings
from pathlib import Path

from rkspeech.core.atomic import atomic_path
from rkspeech.core.errors import RkspeechError
from rkspeech.export.opset import OPSET
from rkspeech.contracts.base import CONTRACT_KEY
from rkspeech.contracts.vocoder import INPUT_NAMES, OUTPUT_NAMES

#: Op types that made rknn-toolkit2 abort or fall back in our measurements (field notes):
#: Exp/Pad/Shape/ConstantOfShape/Split came from unfolded weight math and traced zero pads,
#: Sin/Cos land on the CPU on rk3588, Gather with runtime indices too.
RISKY_OPS = {
    "Exp": "unfolded weight-only math (SnakeBeta exp(alpha)); fold it at load",
    "Pad": "traced zero pad; rknn fold_constant aborted on these chains",
    "Shape": "dynamic shape arithmetic; the converter wants static graphs",
    "ConstantOfShape": "dynamic shape arithmetic",
    "Split": "seen in graphs that aborted in fold_constant",
    "Sin": "runs on the CPU on rk3588 (single-op graph, measured)",
    "Cos": "runs on the CPU on rk3588 (single-op graph, measured)",
    "Gather": "runtime-index Gather runs on the CPU on rk3588",
}


def export_step_onnx(step, output: str | os.PathLike) -> Path:
    """Trace ``step`` (a VocoderStep) to ``output`` (:func:`export_traced`)."""
    import torch

    from rkspeech.stepgraph.host import inverse_frequencies, rope_angles

    contract = step.contract
    out = Path(output)
    B = contract.codes_length
    inv = inverse_frequencies(contract.head_dim, contract.rope_theta)
    dummy = (
        torch.zeros(1, contract.num_quantizers, B, dtype=getattr(torch, contract.codes_dtype)),
        torch.from_numpy(rope_angles(0, B, inv)),
        # traced mid-range so no branch of the slot-bias clamp degenerates into a constant
        torch.full((1,), float(min(B, contract.kv_slots // 2)), dtype=torch.float32),
        torch.zeros(contract.cache_numel, dtype=torch.float32),
    )
    return export_traced(step, dummy, out, input_names=INPUT_NAMES, output_names=OUTPUT_NAMES, contract=contract)


def export_traced(module, dummy: tuple, output: str | os.PathLike, *, input_names, output_names, contract,
                  dynamic_axes: dict | None = None) -> Path:
    """The one way a graph leaves torch: traced with static shapes (the module reads shapes as
    python ints on purpose: no Shape ops), ``OPSET``, the TorchScript exporter, output shapes
    declared from ``contract.output_shapes()`` (a name there is a symbolic dim), ``contract.to_json()``
    in the metadata under ``rkspeech.contract``, checked, and renamed into place only when complete.
    ``dynamic_axes`` (torch's): the dims that stay symbolic, for graphs that run once per request
    on the CPU at any length (voice cloning's encoders, ``export.clone_onnx``)."""
    import onnx
    import torch

    from rkspeech.export.weights import fold_constants, module_weights, write_weights

    out = Path(output)
    with atomic_path(out, suffix=".onnx") as tmp:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # the weights stay out of torch's exporter (export.weights: it held ~4x their size)
            torch.onnx.export(module, dummy, str(tmp), input_names=list(input_names),
                              output_names=list(output_names), opset_version=OPSET, do_constant_folding=False,
                              export_params=False, dynamic_axes=dynamic_axes, dynamo=False)
        model = onnx.load(str(tmp))
        weights = fold_constants(model, module_weights(module, input_names))
        shapes = contract.output_shapes()
        for o in model.graph.output:
            dims = o.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[o.name]:
                if isinstance(d, str):
                    dims.add().dim_param = d
                else:
                    dims.add().dim_value = d
        meta = model.metadata_props.add()
        meta.key, meta.value = CONTRACT_KEY, contract.to_json()
        model.producer_name = "rkspeech"
        data_tmp = tmp.with_name(tmp.name + ".data")
        try:
            external = write_weights(model, weights, out, data_tmp)
            del weights
            if external is None:
                onnx.checker.check_model(model)
                onnx.save(model, str(tmp))
                out.with_name(out.name + ".data").unlink(missing_ok=True)  # an earlier export's
            else:  # in place before the graph that reads it; the checker reads the data beside it
                os.replace(data_tmp, external)
                onnx.save(model, str(tmp))
                try:
                    onnx.checker.check_model(str(tmp))
                except Exception:
                    external.unlink()
                    raise
        finally:
            data_tmp.unlink(missing_ok=True)
    return out


def graph_summary(path) -> dict:
    """Node count, op histogram, risky ops, and the cleanliness checks the export promises."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    risky = {op: {"count": ops[op], "why": why} for op, why in RISKY_OPS.items() if ops.get(op)}
    dynamic = []
    for vi in list(model.graph.input) + list(model.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                dynamic.append(vi.name)
                break
    return {
        "nodes": len(model.graph.node),
        "op_histogram": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "risky_ops": risky,
        "dynamic_io": dynamic,
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "bytes": sum(p.stat().st_size for p in (Path(path), Path(f"{path}.data")) if p.is_file()),
    }


def require_clean(summary: dict) -> None:
    """The export's promises: static I/O, no Exp of Snake params, no traced zero pads."""
    problems = []
    if summary["dynamic_io"]:
        problems.append(f"dynamic I/O dims on {summary['dynamic_io']}")
    for op in ("Exp", "Pad", "Shape", "ConstantOfShape"):
        if summary["op_histogram"].get(op):
            problems.append(f"{summary['op_histogram'][op]} {op} node(s)")
    if problems:
        raise RkspeechError("exported graph is not clean: " + "; ".join(problems))
