"""CPU-placed talker / code predictor stages of ``rkspeech build qwen3-tts`` (issue 26, deliver 1).

A stage placed ``cpu-fp32``, ``cpu-int8`` or ``cpu-int4`` (``core.placement``) is exported as an
NPU stage is (its fp32 ONNX step graphs, checked against torch), never converted; then:

* :func:`quantize_stage`: one resumable stage per stage (``<name>_quantize_<variant>``) writing
  each graph's variant with ``convert.cpu_quant.quantize_step_graph`` into ``<name>/cpu/``;
  ``cpu-fp32`` runs the exported ONNX as it is (no stage, no record).  Returns the plan's
  artifacts and the stage's record: the options every graph shares (variant, quantizer, bits,
  block size, symmetric, accuracy level / per channel, onnxruntime version) and per graph the
  source, sizes and quantized op counts.
* the accuracy gate that measures them (and NPU-placed stages on the simulator) is
  ``pipelines.stage_gate``'s.

Every graph is opened through ``runtime.tts.open_stages`` (``open_talker``, ``open_code_predictor``:
``open_runner('ort')`` underneath); torch and onnxruntime are imported inside the functions.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.placement import cpu_variant

#: keys of a ``quantize_step_graph`` record that every graph of one stage shares
SHARED_KEYS = ("variant", "quantizer", "bits", "block_size", "symmetric", "accuracy_level", "per_channel",
               "activations", "onnxruntime")
#: per-graph keys kept from each record
GRAPH_KEYS = ("source", "bytes_before", "bytes_after", "size_ratio", "quantized_ops", "fp32_matmuls",
              "metadata_restored", "kept_fp32", "kept_fp32_bytes", "seconds")
#: frames per utterance at most of the build's accuracy gate (``TTSBuildOptions.cpu_check_frames``):
#: the trained reduced root's 20 gate utterances stop by themselves after 6-27 frames (378 in all)
DEFAULT_CHECK_FRAMES = 48
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


def stage_options(placement: str, int4: dict | None = None, keep_fp32=()):
    """The ``CpuQuantOptions`` of a CPU placement; ``int4``: fields (block size, symmetric) that
    apply to a ``cpu-int4`` one only; ``keep_fp32``: the stack's MatMuls that stay fp32
    (``pipelines.fp16_headroom.keep_fp32_of``; the stack's graphs only, not its heads).  One
    place for the stack, its heads and its start graph."""
    from rkspeech.convert.cpu_quant import CpuQuantOptions

    return CpuQuantOptions.for_placement(placement, **((int4 or {}) if cpu_variant(placement) == "int4" else {}),
                                         keep_fp32=tuple(keep_fp32))


def kept_record(per_graph: dict) -> dict:
    """A stage record's per-node precision: every MatMul kept fp32 (graph, module, node, the bytes
    it costs against the variant) and their total (absent: nothing kept)."""
    kept = [{"graph": role, **k} for role, r in per_graph.items() for k in r.get("kept_fp32") or []]
    return {"kept_fp32": kept, "kept_fp32_bytes": sum(k["bytes"] for k in kept)} if kept else {}


def quantize_stage(stages, name: str, placement: str, sources: dict[str, Path], folder: Path, *,
                   int4: dict | None = None, keep_fp32=()) -> dict:
    """``{"placement", "artifacts": {role: variant path}, "record": {...} | None}`` for stage
    ``name`` (``talker``, ``code_predictor``); ``sources``: role -> exported fp32 ONNX; ``int4``:
    ``CpuQuantOptions`` fields for a ``cpu-int4`` placement (block size, symmetric);
    ``keep_fp32``: ``CpuQuantOptions.keep_fp32`` entries, MatMuls that stay fp32 (the record's
    ``kept_fp32``, each node with the bytes it costs, and ``kept_fp32_bytes``)."""
    from dataclasses import asdict

    from rkspeech.convert.cpu_quant import quantize_step_graph

    variant = cpu_variant(placement)
    if variant is None:
        raise ValueError(f"quantize_stage: {placement!r} is not a CPU placement")
    sources = {role: Path(p) for role, p in sources.items()}
    if variant == "fp32":
        return {"placement": placement, "artifacts": dict(sources), "record": None}
    options = stage_options(placement, int4, keep_fp32)
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
    record.update(kept_record(per_graph))
    return {"placement": placement, "artifacts": dst, "record": record}


def _files(sources: dict[str, Path], quantized: dict[str, Path]) -> dict:
    """Per graph: fp32 and variant bytes (external weights included)."""
    from rkspeech.export.weights import graph_bytes

    return {role: {"fp32": str(src), "fp32_bytes": graph_bytes(src), "variant": str(quantized[role]),
                   "variant_bytes": graph_bytes(quantized[role])}
            for role, src in sources.items()}


def cpu_row(q: dict, sources: dict[str, Path]) -> dict:
    """The build report's ``cpu`` entry of a CPU stage: placement, record, file sizes."""
    return {"placement": q["placement"], "quantization": q["record"],
            "files": _files(sources, q["artifacts"]), "check": None}
