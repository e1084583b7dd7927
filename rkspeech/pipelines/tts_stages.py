"""The stages of a Qwen3-TTS plan besides the vocoder, each placed as its options say: the code
predictor, the talker and (Base roots) the cloning encoders.

Each ``place_*`` runs (or resumes) its stage's build, and returns what the plan, the report and
the accuracy gate need of it: the stage's section of ``plan.json`` (``plan.sections``), its row of
the report's ``graphs``, and what ``stage_gate.check_cpu_stages`` compares (``fp32`` graphs, a
quantized ``variant``, or ``sim`` for an NPU-placed stage judged on the simulator).  NPU-placed
stages carry the fp16 headroom stage's exact rescale (``fp16_rescale``); quantized ones keep the
MatMuls it found carrying an outlier channel in fp32 (their quantization record's ``kept_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.contracts.read import read_contract
from rkspeech.pipelines.fp16_headroom import keep_fp32_of, rescale_of
from rkspeech.pipelines.tts_options import TTSBuildOptions, code_predictor_placement, int4_options, talker_placement


@dataclass
class PlacedStage:
    """One built stage: its build's report, plan section, report row and gate check."""

    report: dict
    section: dict
    row: dict
    check: dict = field(default_factory=dict)


def graph_row(convert: dict | None, rknn_bytes: int | None) -> dict:
    """The figures the report keeps per graph, from a conversion report."""
    if not convert:
        return {"placement": None, "build": None, "rknn": None}
    pl, b = convert.get("placement") or {}, convert.get("build") or {}
    return {"placement": {k: pl.get(k) for k in ("npu_ops", "cpu_ops", "cpu_op_types", "estimate") if k in pl},
            "build": {k: b.get(k) for k in ("regtask_overflow_lines", "seconds", "peak_rss_mb")},
            "rknn": {"bytes": rknn_bytes if rknn_bytes is not None else (convert.get("rknn") or {}).get("bytes")}}


def place_code_predictor(o: TTSBuildOptions, stages, files, out: Path, model, headroom) -> PlacedStage:
    """The code predictor: converted for the NPU, or exported for the CPU (quantized with its
    heads and start graph in the step form)."""
    from rkspeech.convert.hybrid_int16 import HybridInt16Options
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.cpu_heads import quantize_heads
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, cpu_row, quantize_stage
    from rkspeech.pipelines.cpu_start import build_start
    from rkspeech.pipelines.lane_graphs import build_lanes
    from rkspeech.plan.sections import stage_section

    place = code_predictor_placement(o)
    cp = build_code_predictor(stages, files, out, target=o.target, verify_frames=o.verify_frames,
                              skip_sim=o.skip_sim, timeout=o.timeout, model=model,
                              dtype=o.code_predictor_dtype,
                              calibration_frames=o.code_predictor_calibration_frames,
                              form=o.code_predictor_form, convert=place == "npu",
                              layout=CPU_EXPORT if place != "npu" else None,
                              fp16_rescale=rescale_of(headroom, "code_predictor"))
    a = cp["artifacts"]
    contract = read_contract(a["onnx"]).to_dict()
    check = {"placement": place, "role": cp["role"], "fp32": Path(a["onnx"])}
    if place != "npu":
        src = {cp["role"]: Path(a["onnx"])}
        keep = keep_fp32_of(headroom, "code_predictor")
        cpu_dir = out / "code_predictor" / "cpu"
        q = quantize_stage(stages, "code_predictor", place, src, cpu_dir, int4=int4_options(o), keep_fp32=keep)
        step_form = cp["role"] == "step"
        heads = quantize_heads(stages, place, files, cpu_dir / "heads", int4=int4_options(o)) if step_form else {}
        start = (build_start(stages, place, files, model, cpu_dir, int4=int4_options(o), keep_fp32=keep)
                 if step_form else {})
        lanes = (build_lanes(stages, "code_predictor", place, files, model, cpu_dir, streams=o.streams,
                             placed_fp32=Path(a["onnx"]), placed=q["artifacts"][cp["role"]], int4=int4_options(o),
                             keep_fp32=keep) if step_form else {})
        start_kept = (start.get("record") or {}).get("kept_fp32") or []
        if q["record"] and start_kept:  # the start graph is the same stack: its kept MatMuls too
            kept = q["record"].get("kept_fp32", []) + [{"graph": "start", **k} for k in start_kept]
            q["record"] = {**q["record"], "kept_fp32": kept, "kept_fp32_bytes": sum(k["bytes"] for k in kept)}
        section = stage_section(placement=place, target=None,
                                artifacts={r: {"onnx": p} for r, p in q["artifacts"].items()},
                                contract=contract, base=out, quantization=q["record"], threads=o.cpu_threads,
                                heads=heads.get("heads"), start=start.get("start"), lanes=lanes.get("lanes"))
        row = {**graph_row(None, None), "form": cp.get("form"), "dtype": "fp32", "sim": None,
               "cpu": {**cpu_row(q, src), "heads": heads.get("record"), "start": start.get("record"),
                       "lanes": lanes.get("record")}}
        check.update(heads=heads.get("heads"), start=start.get("start"))
        if q["record"]:
            check["variant"] = q["artifacts"][cp["role"]]
        return PlacedStage(cp, section, row, check)
    dtype = cp.get("dtype", "fp16")
    quant = None
    if dtype != "fp16":
        quant = {"dtype": dtype, "dataset": cp["calibration"]["dataset"],
                 "hybrid": HybridInt16Options.from_dict(cp.get("hybrid")).to_dict()}
    section = stage_section(placement="npu", target=o.target,
                            artifacts={cp["role"]: {"onnx": a["onnx"], "rknn": a["rknn"]}},
                            contract=contract, base=out, quantization=quant)
    if rescale_of(headroom, "code_predictor") is not None:  # measured ([]: nothing to rescale)
        section["fp16_rescale"] = rescale_of(headroom, "code_predictor")
    if not o.skip_sim:  # the gate judges it on the simulator, built as it was converted
        check["sim"] = {"target": o.target, "dtype": dtype,
                        **({"dataset": cp["calibration"]["dataset"], "hybrid": cp.get("hybrid")}
                           if dtype != "fp16" else {})}
    row = {**graph_row(cp.get("convert") or cp, (cp.get("rknn") or {}).get("bytes")),
           "form": cp.get("form"), "dtype": cp.get("dtype"), "sim": cp.get("sim")}
    return PlacedStage(cp, section, row, check)


def place_talker(o: TTSBuildOptions, stages, files, out: Path, model, headroom) -> PlacedStage:
    """The talker's prefill and decode graphs: converted for the NPU, or exported for the CPU
    (quantized unless ``cpu-fp32``)."""
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, cpu_row, quantize_stage
    from rkspeech.pipelines.lane_graphs import build_lanes
    from rkspeech.pipelines.talker_build import build_talker
    from rkspeech.plan.sections import stage_section

    place = talker_placement(o)
    talker = build_talker(stages, files, out, target=o.target, capacity=o.talker_capacity,
                          prefill_B=o.talker_prefill, skip_rknn=place != "npu",
                          skip_sim=o.skip_sim, timeout=o.timeout, model=model,
                          fp16_rescale=rescale_of(headroom, "talker"),
                          **(CPU_EXPORT if place != "npu" else {}))
    a = talker["artifacts"]
    contract = read_contract(a["decode"]["onnx"]).to_dict()
    src = {r: Path(a[r]["onnx"]) for r in ("prefill", "decode")}
    check = {"placement": place, "fp32": src}
    q = (quantize_stage(stages, "talker", place, src, out / "talker" / "cpu", int4=int4_options(o),
                        keep_fp32=keep_fp32_of(headroom, "talker"))
         if place != "npu" else None)
    lanes = {}
    if q is not None:
        lanes = build_lanes(stages, "talker", place, files, model, out / "talker" / "cpu", streams=o.streams,
                            placed_fp32=src["decode"], placed=q["artifacts"]["decode"], int4=int4_options(o),
                            keep_fp32=keep_fp32_of(headroom, "talker"))
        section = stage_section(placement=place, target=None,
                                artifacts={r: {"onnx": p} for r, p in q["artifacts"].items()},
                                contract=contract, base=out, quantization=q["record"], threads=o.cpu_threads,
                                lanes=lanes.get("lanes"))
        if q["record"]:
            check["variant"] = q["artifacts"]
    else:
        section = stage_section(placement="npu", target=o.target,
                                artifacts={r: {"onnx": a[r]["onnx"], "rknn": a[r].get("rknn")}
                                           for r in ("prefill", "decode")},
                                contract=contract, base=out)
        if rescale_of(headroom, "talker") is not None:
            section["fp16_rescale"] = rescale_of(headroom, "talker")
        if not o.skip_sim:
            check["sim"] = {"target": o.target, "dtype": "fp16"}
    row = {**graph_row(talker if talker.get("placement") else None, None),
           "per_graph": {r: graph_row(talker["graphs"][r] if "placement" in talker["graphs"][r] else None, None)
                         for r in ("prefill", "decode")},
           "verify": talker.get("verify"),
           **({"cpu": {**cpu_row(q, src), "lanes": lanes.get("record")}} if q is not None else {})}
    return PlacedStage(talker, section, row, check)


def place_clone_encoders(o: TTSBuildOptions, stages, files, vfiles, out: Path, model) -> dict[str, PlacedStage]:
    """A Base root's cloning graphs (``pipelines.clone_encoders``), CPU fp32 with their goldens;
    ``{}`` on other roots."""
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config
    from rkspeech.pipelines.clone_encoders import build_speaker_encoder, build_speech_encoder
    from rkspeech.plan.sections import stage_section

    config = read_tts_config(files)
    if config.tts_model_type != "base":
        return {}
    built = {"speaker_encoder": build_speaker_encoder(stages, files, model, out / "clone"),
             "speech_encoder": build_speech_encoder(stages, vfiles, config.talker.num_code_groups, out / "clone")}
    placed = {}
    for name, b in built.items():
        section = stage_section(placement="cpu-fp32", target=None, artifacts={"encoder": {"onnx": b["path"]}},
                                contract=b["contract"], base=out, threads=o.cpu_threads,
                                goldens={"encoder": b["golden"]})  # replayed by check-board
        row = {**graph_row(None, None), "cpu": {"placement": "cpu-fp32"},
               "clone": {k: b["record"][k] for k in ("bytes", "check", "golden") if k in b["record"]}}
        placed[name] = PlacedStage(b, section, row)
    return placed
