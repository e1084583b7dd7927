"""A CPU stage's step graph for N lanes (``runtime.tts.lanes``): the accuracy gate's and the plan's.

``stepgraph.talker_step.TalkerStep`` exported with ``capacity = N * c`` and ``B = N`` serves N
sequences of up to ``c`` positions each, one weight read per call for all of them.  The accuracy
gate exports one for its utterances (``pipelines.gate_lanes``); ``rkspeech build qwen3-tts``
keeps one per CPU-placed talker and step-form code predictor in the plan (role ``lanes``,
:func:`build_lanes`), so that ``speak --streams`` and ``serve`` generate several streams at once
(``runtime.tts.batch``).  Each is written with the placed stage's own ``CpuQuantOptions``.

A lane graph must hold the placed graph's weights: :func:`check_same_weights` compares every
weight initializer (by content) and refuses in one line otherwise.  The rows of one call are
independent for fp32 and int4 (MatMulNBits quantizes its input per row and block).  int8's dynamic
quantization takes one activation scale over the whole call, so companions would change each
other's rounding (the trained reduced root's int8 talker in 20 lanes: 41.71 dB against 44.83 dB
alone; docs/accuracy-gate.md, Cost): the plan's int8 lanes graph is rewritten to quantize each
row apart (``convert.int8_rows``), the one-row graph's arithmetic row by row.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.core.placement import cpu_variant

#: weight initializers at least this many elements are compared (shape constants, which hold B
#: and the capacity, are smaller)
MIN_WEIGHT_ELEMENTS = 1024
#: streams a plan's lanes graphs serve unless ``--streams`` says otherwise
DEFAULT_STREAMS = 4


def weight_digests(path) -> list[str]:
    """Sorted sha256 of the graph's weight initializers (>= ``MIN_WEIGHT_ELEMENTS`` elements,
    external data included; not the column sums ``convert.int8_rows`` derives from them), by
    content: names differ between exports."""
    import hashlib

    import numpy as np
    import onnx
    from onnx import numpy_helper

    from rkspeech.convert.int8_rows import DERIVED_SUFFIX

    model = onnx.load(str(path), load_external_data=True)
    out = []
    for t in model.graph.initializer:
        if t.name.endswith(DERIVED_SUFFIX):
            continue
        a = numpy_helper.to_array(t)
        if a.size >= MIN_WEIGHT_ELEMENTS:
            out.append(hashlib.sha256(np.ascontiguousarray(a).tobytes() + str(a.shape).encode()).hexdigest())
    return sorted(out)


def check_same_weights(lane_graph, placed, what: str, *, remedy: str = "run the gate without lanes") -> None:
    """One line when ``lane_graph`` does not hold exactly ``placed``'s weights."""
    a, b = weight_digests(lane_graph), weight_digests(placed)
    if a != b:
        raise RkspeechError(f"the {what} lane graph's weights differ from {Path(placed).name}'s "
                            f"({len(set(a) ^ set(b))} of {len(b)} tensors); {remedy}")


def export_fp32_lanes(model, path: Path, *, stage: str, lanes: int, positions: int, mask_value: float) -> Path:
    """The fp32 step graph of ``stage`` (``talker`` / ``code_predictor``) of ``model`` (a
    ``LazyTTSModel``) for ``lanes`` lanes of ``positions`` each, in the CPU export, at ``path``."""
    from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL, MODEL_NAME
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    net = model.get().net.talker
    stack, name = (net.model, MODEL_NAME) if stage == "talker" else (net.code_predictor.model, CODE_PREDICTOR_STEP_MODEL)
    step = TalkerStep(stack, capacity=lanes * positions, B=lanes, name=name, mask_value=mask_value, **CPU_EXPORT)
    path.parent.mkdir(parents=True, exist_ok=True)
    return export_talker_onnx(step, path)


def build_lanes(stages, stage: str, placement: str, files, model, folder: Path, *, streams: int,
                placed_fp32: Path, placed: Path, int4: dict | None = None, keep_fp32=()) -> dict:
    """``{"lanes": path, "record": {...}}``: the lanes graph of a CPU-placed ``stage`` for
    ``streams`` streams, each lane the placed graph's capacity (``placed_fp32``: its fp32 graph,
    whose contract gives the capacity and mask value; ``placed``: the graph the plan runs, whose
    weights the lanes graph must hold), quantized as the stage is (``int4``, ``keep_fp32``: as
    ``cpu_stages.quantize_stage``; int8 with its rows quantized apart, ``convert.int8_rows``); one
    resumable stage.  ``{}`` for one stream."""
    import onnxruntime

    from rkspeech.contracts.read import read_contract
    from rkspeech.convert.cpu_quant import quantize_step_graph
    from rkspeech.core.child import scratch
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, stage_options

    variant = cpu_variant(placement)
    if streams < 2 or variant is None:
        return {}
    contract = read_contract(placed_fp32)
    positions = contract.capacity
    options = stage_options(placement, int4, keep_fp32)
    folder = Path(folder)
    dst = folder / f"{stage}_lanes{streams}x{positions}.{variant}.onnx"

    def work():
        folder.mkdir(parents=True, exist_ok=True)
        if variant == "fp32":  # the export is the graph
            export_fp32_lanes(model, dst, stage=stage, lanes=streams, positions=positions,
                              mask_value=contract.mask_value)
            record = {"variant": "fp32", "bytes_after": dst.stat().st_size}
        else:
            with scratch(folder, prefix=".lanes.") as tmp:  # owner-locked: swept if a SIGKILL leaves it
                src = export_fp32_lanes(model, Path(tmp) / f"{stage}_lanes.onnx", stage=stage, lanes=streams,
                                        positions=positions, mask_value=contract.mask_value)
                record = quantize_step_graph(src, dst, options)
                if variant == "int8":
                    record["rows_apart"] = _rows_apart(dst)
        check_same_weights(dst, placed, f"{stage} {variant}", remedy="rebuild with --force")
        return {**{k: record[k] for k in ("variant", "bytes_after", "seconds", "rows_apart") if k in record},
                "streams": streams, "positions": positions}

    args = {"export": CPU_EXPORT, "options": asdict(options), "ort": onnxruntime.__version__, "streams": streams}
    record = stages.run(f"{stage}_lanes_{variant}", args, [Path(files.config), Path(files.weights), Path(placed)],
                        lambda: [dst], work)
    return {"lanes": dst, "record": record}


def _rows_apart(path: Path) -> int:
    """Rewrite the int8 graph at ``path`` in place with each row quantized apart; the count."""
    import onnx

    from rkspeech.convert.int8_rows import rows_apart
    from rkspeech.core.atomic import atomic_path

    model = onnx.load(str(path))
    n = rows_apart(model)
    with atomic_path(path, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
    return n
