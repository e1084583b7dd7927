"""The accuracy gate's stages as lanes (``runtime.tts.lanes``): its 20 utterances at once.

At the published size a talker or code-predictor step reads the stage's weights from memory
whatever its row count (fp32: ~1.5 GB a talker step, ~270 MB a code-predictor step), and the gate
generates every utterance three times, one at a time: most of a published build's time
(docs/accuracy-gate.md, Cost).  Here each stage's step graph is exported once more for N lanes
(``TalkerStep`` with ``capacity = N * c``, ``B = N``; the CPU export's layout), and the variant
quantized from it with the stage's own options, so one call serves every utterance's step.

The lane graphs must hold the placed graphs' weights: :func:`check_same_weights` compares every
weight initializer (by content) of the lane graph with the placed graph's and refuses in one line
otherwise.  The figures differ from those of the B = 1 graphs only by float rounding
(``runtime.tts.lanes``); the gate records that it ran in lanes (``timing.lanes``).
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: weight initializers at least this many elements are compared (shape constants, which hold B
#: and the capacity, are smaller)
MIN_WEIGHT_ELEMENTS = 1024


def lane_positions(tts, texts, requests, frames: int) -> int:
    """Positions a talker lane needs: the longest prompt plus ``frames + 1`` steps (so the loop
    runs as many steps as with the placed graph: ``HostModel._check_length``), a multiple of 8."""
    longest = max(tts.prompt_rows(t, **r)[0].shape[0] for t, r in zip(texts, requests))
    need = longest + frames + 1
    return -(-need // 8) * 8


def weight_digests(path) -> list[str]:
    """Sorted sha256 of the graph's weight initializers (>= ``MIN_WEIGHT_ELEMENTS`` elements,
    external data included), by content: names differ between exports."""
    import hashlib

    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=True)
    out = []
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.size >= MIN_WEIGHT_ELEMENTS:
            out.append(hashlib.sha256(np.ascontiguousarray(a).tobytes() + str(a.shape).encode()).hexdigest())
    return sorted(out)


def check_same_weights(lane_graph, placed, what: str) -> None:
    """One line when ``lane_graph`` does not hold exactly ``placed``'s weights."""
    a, b = weight_digests(lane_graph), weight_digests(placed)
    if a != b:
        raise RkspeechError(f"accuracy gate: the {what} lane graph's weights differ from {Path(placed).name}'s "
                            f"({len(set(a) ^ set(b))} of {len(b)} tensors); run the gate without lanes")


def export_lane_graphs(model, folder: Path, *, stage: str, lanes: int, positions: int, placed_fp32,
                       placed_variant=None, options=None) -> dict[str, Path]:
    """``{"fp32": path, "variant": path}`` (variant: with ``options``, a ``CpuQuantOptions``) of
    ``stage`` (``talker`` / ``code_predictor``) for ``lanes`` lanes of ``positions`` each, in
    ``folder``; each checked against the placed graph's weights."""
    from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL, MODEL_NAME
    from rkspeech.convert.cpu_quant import quantize_step_graph
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    net = model.get().net.talker
    stack, name = (net.model, MODEL_NAME) if stage == "talker" else (net.code_predictor.model, CODE_PREDICTOR_STEP_MODEL)
    from rkspeech.contracts.read import read_contract

    mask_value = read_contract(placed_fp32).mask_value  # the placed graph's (the code predictor's may be int16's)
    step = TalkerStep(stack, capacity=lanes * positions, B=lanes, name=name, mask_value=mask_value, **CPU_EXPORT)
    folder.mkdir(parents=True, exist_ok=True)
    out = {"fp32": export_talker_onnx(step, folder / f"{stage}_lanes{lanes}x{positions}.onnx")}
    check_same_weights(out["fp32"], placed_fp32, f"{stage} fp32")
    if placed_variant is not None:
        out["variant"] = folder / f"{stage}_lanes{lanes}x{positions}.{options.variant}.onnx"
        quantize_step_graph(out["fp32"], out["variant"], options)
        check_same_weights(out["variant"], placed_variant, f"{stage} {options.variant}")
    return out


def open_gate_lanes(model, tts, folder: Path, *, talker: dict, code_predictor: dict, texts, requests, frames: int,
                    threads: int | None, int4: dict | None, opened: list) -> tuple[dict, dict]:
    """``(reference, variants)``: lane factories of the fp32 graphs and of each quantized stage,
    exported into ``folder`` (``talker`` / ``code_predictor``: ``check_cpu_stages``' dicts, both
    with an fp32 graph; the code predictor in the step form).  Each factory opened is appended to
    ``opened`` (the caller closes them)."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.pipelines.cpu_stages import stage_options
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.heads import open_heads
    from rkspeech.runtime.tts.lanes import CodePredictorLanes, LaneGroup, Rounds

    if code_predictor.get("role") != "step":
        raise RkspeechError("accuracy gate lanes need the code predictor's step form")
    n = len(texts)
    rounds = Rounds()
    sizes = {"talker": lane_positions(tts, texts, requests, frames), "code_predictor": tts.cfg.code_predictor.num_code_groups}
    placed = {"talker": (talker["fp32"]["decode"], (talker.get("variant") or {}).get("decode")),
              "code_predictor": (code_predictor["fp32"], code_predictor.get("variant"))}
    placements = {"talker": talker.get("placement"), "code_predictor": code_predictor.get("placement")}
    reference, variants = {}, {}
    for stage, (fp32, variant) in placed.items():
        options = stage_options(placements[stage], int4) if variant is not None else None
        paths = export_lane_graphs(model, folder, stage=stage, lanes=n, positions=sizes[stage], placed_fp32=fp32,
                                   placed_variant=variant, options=options)
        for kind, path in paths.items():
            runner = open_runner("ort", path, threads=threads)
            group = LaneGroup(runner, read_contract(path), lanes=n, lane_capacity=sizes[stage], rounds=rounds,
                              rope=tts.ops.rope, name=f"{stage} {kind} lanes ({path.name})")
            if stage == "code_predictor":
                heads = None
                if kind == "variant" and code_predictor.get("heads"):
                    heads = open_heads(code_predictor["heads"], tts.cfg.code_predictor, tts.weights.cp_fingerprint,
                                       threads=threads)
                group = CodePredictorLanes(group, tts.ops, tts.cfg.code_predictor.num_code_groups, heads)
            opened.append(group)
            (reference if kind == "fp32" else variants)[stage] = group
    return reference, variants
