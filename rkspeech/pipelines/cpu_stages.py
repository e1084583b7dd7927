"""CPU-placed talker / code predictor stages of ``rkspeech build qwen3-tts`` (issue 26, deliver 1).

A stage placed ``cpu-fp32``, ``cpu-int8`` or ``cpu-int4`` (``core.placement``) is exported as an
NPU stage is (its fp32 ONNX step graphs, checked against torch), never converted; then:

* :func:`quantize_stage`: one resumable stage per stage (``<name>_quantize_<variant>``) writing
  each graph's variant with ``convert.cpu_quant.quantize_step_graph`` into ``<name>/cpu/``;
  ``cpu-fp32`` runs the exported ONNX as it is (no stage, no record).  Returns the plan's
  artifacts and the stage's record: the options every graph shares (variant, quantizer, bits,
  block size, symmetric, accuracy level / per channel, onnxruntime version) and per graph the
  source, sizes and quantized op counts.
* :func:`check_cpu_stages`: one resumable stage (``cpu_check``) measuring each quantized stage
  against its fp32 graph with ``accuracy.quantized_stage``: greedy generation of a few frames
  per text with the fp32 graphs on onnxruntime (torch for a stage that has no graph), then each
  quantized stage fed the same inputs (teacher forced): top-1 agreement, first diverging frame,
  logit SNR, stop frame (talker) and the fp32 top-1 margin.  Report only: no pass mark yet.

Every graph is opened through ``runtime.tts.open_stages`` (``open_talker``, ``open_code_predictor``:
``open_runner('ort')`` underneath); torch and onnxruntime are imported inside the functions.
"""

from __future__ import annotations

import time
from pathlib import Path

from rkspeech.core.placement import cpu_variant

#: keys of a ``quantize_step_graph`` record that every graph of one stage shares
SHARED_KEYS = ("variant", "quantizer", "bits", "block_size", "symmetric", "accuracy_level", "per_channel",
               "activations", "onnxruntime")
#: per-graph keys kept from each record
GRAPH_KEYS = ("source", "bytes_before", "bytes_after", "size_ratio", "quantized_ops", "fp32_matmuls",
              "metadata_restored", "seconds")
#: frames per text of the build's agreement check (``TTSBuildOptions.cpu_check_frames``)
DEFAULT_CHECK_FRAMES = 8
#: How a CPU-placed talker or code predictor step is exported (``stepgraph.talker_step.TalkerStep``
#: options; an NPU stage keeps the defaults, ``heads`` / ``flat``).  Per-layer cache inputs: the flat
#: ``[2L, Hc, cap, hd]`` input made onnxruntime split it into layers every call (``Split`` +
#: ``Concat`` were 25 % of an int4 talker decode step); grouped k/v: the cache and the k/v
#: projections are not repeated per query head (half the cache bytes).  Measured on the published
#: int4 talker decode (cap 256, x86, docs/cpu-stages.md): 0.70x the time of ``heads`` / ``flat``.
CPU_EXPORT = {"kv_layout": "grouped", "cache_io": "layers"}


def export_cpu_talker(stack, out_dir: Path, *, capacity: int, prefill_B: int) -> dict[str, Path]:
    """The talker pair (``export.talker_onnx.export_talker_pair``) in the CPU export."""
    from rkspeech.export.talker_onnx import export_talker_pair

    return export_talker_pair(stack, out_dir, capacity=capacity, prefill_B=prefill_B, **CPU_EXPORT)


def export_cpu_code_predictor(cp, path: Path) -> Path:
    """The code predictor step graph (``stepgraph.code_predictor_codebook``) in the CPU export."""
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step

    return export_talker_onnx(code_predictor_step(cp, **CPU_EXPORT), path)


def quantize_stage(stages, name: str, placement: str, sources: dict[str, Path], folder: Path) -> dict:
    """``{"placement", "artifacts": {role: variant path}, "record": {...} | None}`` for stage
    ``name`` (``talker``, ``code_predictor``); ``sources``: role -> exported fp32 ONNX."""
    from dataclasses import asdict

    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph

    variant = cpu_variant(placement)
    if variant is None:
        raise ValueError(f"quantize_stage: {placement!r} is not a CPU placement")
    sources = {role: Path(p) for role, p in sources.items()}
    if variant == "fp32":
        return {"placement": placement, "artifacts": dict(sources), "record": None}
    options = CpuQuantOptions.for_placement(placement)
    folder = Path(folder)
    dst = {role: folder / f"{src.stem}.{variant}.onnx" for role, src in sources.items()}

    def work():
        folder.mkdir(parents=True, exist_ok=True)
        return {role: quantize_step_graph(src, dst[role], options) for role, src in sources.items()}

    import onnxruntime

    per_graph = stages.run(f"{name}_quantize_{variant}", {"options": asdict(options), "ort": onnxruntime.__version__},
                           list(sources.values()), lambda: list(dst.values()), work)
    first = next(iter(per_graph.values()))
    record = {k: first[k] for k in SHARED_KEYS if k in first}
    record["graphs"] = {role: {k: r[k] for k in GRAPH_KEYS if k in r} for role, r in per_graph.items()}
    return {"placement": placement, "artifacts": dst, "record": record}


def _files(sources: dict[str, Path], quantized: dict[str, Path]) -> dict:
    """Per graph: fp32 and variant bytes."""
    return {role: {"fp32": str(src), "fp32_bytes": Path(src).stat().st_size, "variant": str(quantized[role]),
                   "variant_bytes": Path(quantized[role]).stat().st_size}
            for role, src in sources.items()}


def check_cpu_stages(stages, model, *, talker: dict | None, code_predictor: dict | None,
                     ckpt: list[Path], frames: int = DEFAULT_CHECK_FRAMES, texts=None,
                     threads: int | None = None) -> dict:
    """Each quantized stage against its fp32 graph, teacher forced.

    ``talker``: None (not quantized) or ``{"placement", "fp32": {role: onnx}, "variant": {role:
    onnx}}`` (roles prefill, decode); ``code_predictor``: None or ``{"placement", "role": step|frame,
    "fp32": onnx, "variant": onnx}``; ``fp32`` may also be given for a stage that is not quantized
    (its fp32 graph then serves as the reference), else the reference is torch.  ``model``: a
    ``LazyTTSModel``.  Returns ``{"frames", "texts", "seconds", "talker": {...}, "code_predictor":
    {...}}`` (a stage's entry only when it was quantized)."""
    from rkspeech.accuracy.quantized_stage import DEFAULT_TEXTS

    texts = tuple(texts or DEFAULT_TEXTS)
    quantized = {k: v for k, v in (("talker", talker), ("code_predictor", code_predictor))
                 if v is not None and v.get("variant") is not None}
    if not quantized:
        return {}
    inputs = list(ckpt)
    for v in (talker, code_predictor):
        if v is None:
            continue
        for key in ("fp32", "variant"):
            x = v.get(key)
            inputs += list(x.values()) if isinstance(x, dict) else ([x] if x else [])
    args = {"frames": frames, "texts": list(texts), "stages": {k: v["placement"] for k, v in quantized.items()}}

    def work():
        return _check(model.get(), talker, code_predictor, frames=frames, texts=texts, threads=threads)

    return stages.run("cpu_check", args, [Path(p) for p in inputs], lambda: [], work)


def _check(tts, talker, code_predictor, *, frames, texts, threads) -> dict:
    from rkspeech.accuracy.quantized_stage import (code_predictor_agreement, record_greedy_reference,
                                                   talker_agreement)
    from rkspeech.runtime.tts.open_stages import open_code_predictor, open_talker

    t0 = time.perf_counter()
    opened = []

    def keep(backend):
        opened.append(backend)
        return backend

    def talker_graph(paths):
        return keep(open_talker({r: {"onnx": p} for r, p in paths.items()}, "ort", model=tts.net.talker.model,
                                threads=threads))

    def cp_graph(role, path):
        return keep(open_code_predictor(role, path, "ort", model=tts, threads=threads))

    out: dict = {"frames": frames, "texts": list(texts)}
    try:
        ref_talker = talker_graph(talker["fp32"]) if talker and talker.get("fp32") else tts.talker_backend
        ref_cp = (cp_graph(code_predictor["role"], code_predictor["fp32"])
                  if code_predictor and code_predictor.get("fp32") else tts.code_predictor_backend)
        out["reference"] = {"talker": ref_talker.name, "code_predictor": ref_cp.name}
        runs = record_greedy_reference(tts, talker=ref_talker, code_predictor=ref_cp, texts=texts, frames=frames)
        out["reference_frames"] = [int(r.frames.shape[0]) for r in runs]
        if talker and talker.get("variant"):
            t1 = time.perf_counter()
            q = talker_graph(talker["variant"])
            out["talker"] = {"placement": talker["placement"], **talker_agreement(tts, runs, q),
                             "seconds": round(time.perf_counter() - t1, 2)}
        if code_predictor and code_predictor.get("variant"):
            t1 = time.perf_counter()
            q = cp_graph(code_predictor["role"], code_predictor["variant"])
            out["code_predictor"] = {"placement": code_predictor["placement"],
                                     **code_predictor_agreement(runs, q),
                                     "seconds": round(time.perf_counter() - t1, 2)}
    finally:
        for b in opened:
            b.close()
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def cpu_row(q: dict, sources: dict[str, Path]) -> dict:
    """The build report's ``cpu`` entry of a CPU stage: placement, record, file sizes."""
    return {"placement": q["placement"], "quantization": q["record"],
            "files": _files(sources, q["artifacts"]), "check": None}
