"""The accuracy gate's stages as lanes (``runtime.tts.lanes``): its 20 utterances at once.

At the published size a talker or code-predictor step reads the stage's weights from memory
whatever its row count (fp32: ~1.5 GB a talker step, ~270 MB a code-predictor step), and the gate
generates every utterance three times, one at a time: most of a published build's time
(docs/accuracy-gate.md, Cost).  Here each stage's step graph is exported once more for N lanes
(``TalkerStep`` with ``capacity = N * c``, ``B = N``; the CPU export's layout), and the variant
quantized from it with the stage's own options, so one call serves every utterance's step.

The lane graphs must hold the placed graphs' weights (``pipelines.lane_graphs.check_same_weights``,
one line otherwise).  The figures differ from those of the B = 1 graphs only by float rounding
(``runtime.tts.lanes``); the gate records that it ran in lanes (``timing.lanes``).
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError


def lane_positions(tts, texts, requests, frames: int) -> int:
    """Positions a talker lane needs: the longest prompt plus ``frames + 1`` steps (so the loop
    runs as many steps as with the placed graph: ``HostModel._check_length``), a multiple of 8."""
    longest = max(tts.prompt_rows(t, **r)[0].shape[0] for t, r in zip(texts, requests))
    need = longest + frames + 1
    return -(-need // 8) * 8


def export_lane_graphs(model, folder: Path, *, stage: str, lanes: int, positions: int, placed_fp32,
                       placed_variant=None, options=None) -> dict[str, Path]:
    """``{"fp32": path, "variant": path}`` (variant: with ``options``, a ``CpuQuantOptions``) of
    ``stage`` (``talker`` / ``code_predictor``) for ``lanes`` lanes of ``positions`` each, in
    ``folder``; each checked against the placed graph's weights."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.convert.cpu_quant import quantize_step_graph
    from rkspeech.pipelines.lane_graphs import check_same_weights, export_fp32_lanes

    mask_value = read_contract(placed_fp32).mask_value  # the placed graph's (the code predictor's may be int16's)
    out = {"fp32": export_fp32_lanes(model, folder / f"{stage}_lanes{lanes}x{positions}.onnx", stage=stage,
                                     lanes=lanes, positions=positions, mask_value=mask_value)}
    check_same_weights(out["fp32"], placed_fp32, f"accuracy gate: {stage} fp32")
    if placed_variant is not None:
        out["variant"] = folder / f"{stage}_lanes{lanes}x{positions}.{options.variant}.onnx"
        quantize_step_graph(out["fp32"], out["variant"], options)
        check_same_weights(out["variant"], placed_variant, f"accuracy gate: {stage} {options.variant}")
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
