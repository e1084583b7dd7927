"""A Qwen3-TTS model root -> one plan with the talker, the code predictor and the vocoder.

``rkspeech build qwen3-tts``: the vocoder's build (``vocoder_build``, its own resumable stages in
``OUT/vocoder``), then the code predictor's frame graph and the talker's step graphs
(``code_predictor_build``, ``talker_build``, stages in ``OUT``), each exported, checked, converted,
inspected and (unless skipped) verified on the simulator; then ``OUT/plan.json`` naming every
artifact with its contract (``plan.sections``) and ``OUT/build-report.json`` with, per graph
(``talker``, ``code_predictor``, ``vocoder``), the placement, the build log's figures and the
.rknn size.  ``rkspeech speak --plan OUT/plan.json`` runs whichever stages the plan places.

Placement per stage (``talker``, ``code_predictor``; ``core.placement.PLACEMENTS``): ``npu`` (the
default: converted as above) or ``cpu-fp32`` / ``cpu-int8`` / ``cpu-int4``: exported and checked
as above, never converted; the int8 / int4 variants written by a resumable stage
(``pipelines.cpu_stages``), the stage's record in the plan (``plan.record``) pointing at them with their
record under ``quantization``; the report's ``graphs.<stage>.cpu`` holds the record, the file
sizes and the accuracy gate's figures against the fp32 graph (``accuracy.gate``: teacher forced
and free running over 20 utterances, at most ``cpu_check_frames`` frames each).

**The accuracy gate** (issue 27): the report's ``accuracy_gate`` judges every quantized stage,
and (issue 39) every NPU-placed talker / code predictor on the simulator unless ``skip_sim``
(measured only where the checkpoint lets the gate vouch: it stops by itself), against
``core.thresholds``' ``GATE_*`` marks; with ``gate="refuse"`` (the default) a failure
writes the report without a plan (removing an earlier build's) and raises one line; ``"warn"``
writes the plan and records the failures as a warning (report ``warnings``, plan
``accuracy_gate``); ``"off"`` measures nothing and records that.  The plan also records the
checkpoint's ``prompt_form`` (``TTSConfig.default_text_in_prompt``), in which the gate generated.
``skip_talker_rknn`` is ``talker="cpu-fp32"``.

**fp16 headroom** (issue 39): before the NPU-placed talker / code predictor are exported, the
``fp16_headroom`` stage (``pipelines.fp16_headroom``) measures their fp32 activation peaks over
held-out texts, folds an exact power-of-two rescale into a SwiGLU MLP channel that nears fp16's
65504 (recorded as the stage record's ``fp16_rescale`` in the plan, and in the report's
``fp16_headroom``), and refuses the NPU placement in one line where a tensor exceeds 65504 that
no exact rescale moves.  For a quantized CPU stage (``cpu-int8`` / ``cpu-int4``) the same stage
finds the MatMul inputs carrying an outlier channel (``OUTLIER_RATIO``), which the quantizer keeps
in fp32 (the stage's quantization record: ``kept_fp32``, per node with its byte cost).

**Voice cloning** (Base roots): the speaker encoder and the speech tokenizer's encoder as checked
CPU graphs, two more resumable stages and two more stage records (``pipelines.clone_encoders``);
``speak --ref-audio [--ref-text]`` runs them in the numpy loop.  The vocoder runs on the NPU (``vocoder="npu"``,
the only value for now; ``speak --backend ort`` runs its exact host graphs).

Here: the order of the stages, the gate and the plan; the options and their checks are
``pipelines.tts_options``, each stage's placing ``pipelines.tts_stages``.
"""


from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from rkspeech.contracts.read import read_contract
from rkspeech.core.atomic import check_writable, folder_lock, write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.pipelines.fp16_headroom import overflow_failures
from rkspeech.pipelines.tts_options import (QUANTIZED, TTSBuildOptions, code_predictor_placement, int4_options,
                                            talker_placement, validate)
from rkspeech.pipelines.tts_stages import graph_row
from rkspeech.pipelines.vocoder_build import BUILD_REPORT, PLAN_FILE


def build_tts(options: TTSBuildOptions) -> dict:
    """Run (or resume) the whole build; returns the report also written to ``OUT/build-report.json``.
    The model root and the output folder are checked before any work; the folder is locked."""
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config, resolve_checkpoint
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root

    o = options
    validate(o)
    files = resolve_model_root(o.model_dir)
    read_tts_config(files)
    vfiles = resolve_checkpoint(files.root)
    read_config(vfiles)
    out = check_writable(o.out_dir, what="output", folder=True)
    with folder_lock(out):
        return _build(o, files, vfiles, out)


def _reuse_vocoder(o: TTSBuildOptions, vfiles):
    """A built vocoder plan (``--vocoder-plan``): .rknn graphs for ``o.target``, made for this
    model's speech tokenizer (one line naming the differing fields otherwise), and its build
    report when it sits beside the plan."""
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config
    from rkspeech.plan.plan import check_plan_for_model, load_plan

    vplan = load_plan(o.vocoder_plan, backend="ort")
    if vplan.placement != "npu" or vplan.target != o.target or not vplan.rknn:
        raise RkspeechError(f"--vocoder-plan {o.vocoder_plan}: holds {vplan.placement} graphs for {vplan.target}, "
                            f"not .rknn graphs for {o.target}")
    if vplan.stages:
        raise RkspeechError(f"--vocoder-plan {o.vocoder_plan}: already a qwen3-tts plan; give the vocoder's plan")
    check_plan_for_model(vplan, read_config(vfiles))
    report = Path(vplan.path).parent / BUILD_REPORT
    try:
        vocoder = json.loads(report.read_text())
    except (OSError, ValueError):
        vocoder = {}
    return vplan, {**vocoder, "reused_plan": str(vplan.path)}


def _vocoder_row(vocoder: dict, vplan) -> dict:
    conv, insp = vocoder.get("convert") or {}, vocoder.get("inspect") or {}
    if "main" not in conv:
        return {**graph_row(None, None), "verify": vocoder.get("verify"), "plan": str(vplan.path)}
    return {**graph_row(conv["main"], (insp.get("main") or {}).get("bytes")),
            "roles": {r: graph_row(c, (insp.get(r) or {}).get("bytes")) for r, c in conv.items()},
            "verify": vocoder.get("verify")}


def _npu_figures(graphs: dict) -> dict:
    """Simulator figures of the NPU-placed talker / code predictor, for the gate's record."""
    out = {}
    cp = graphs.get("code_predictor") or {}
    if cp.get("sim"):
        out["code_predictor"] = {"source": "simulator", "dtype": cp.get("dtype"),
                                 **{k: cp["sim"].get(k) for k in ("frames", "code_agreement", "decisions",
                                                                 "decision_agreement", "logit_snr_db")}}
    tv = (graphs.get("talker") or {}).get("verify") or {}
    if "cpu" not in (graphs.get("talker") or {}) and "logit_snr_db" in tv:  # null: identical (core.compare)
        out["talker"] = {"source": "simulator", "logit_snr_db": tv["logit_snr_db"]}
    return out


def _prompt_form(files) -> str:
    """The prompt form generation uses on this checkpoint (``TTSConfig.default_text_in_prompt``)."""
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config

    return "whole-text" if read_tts_config(files).default_text_in_prompt else "streaming"


def _refuse(o, out: Path, graphs, gate, vocoder, cp, talker, stages, started, headroom=None, *,
            overridable: bool = True) -> None:
    """The gate failed: the report is written (no plan; a plan left by an earlier build of this
    folder is removed, it no longer matches the stages), then one line (naming ``--gate warn``
    when ``overridable``)."""
    summary = {"model": "qwen3-tts", "target": o.target, "plan": None, "graphs": graphs, "vocoder": vocoder,
               "code_predictor": cp, "talker": talker, "accuracy_gate": gate, "fp16_headroom": headroom,
               "stages": stages.timings,
               "seconds": round(time.perf_counter() - started, 1),
               "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(o).items()}}
    write_json(out / BUILD_REPORT, summary)
    (out / PLAN_FILE).unlink(missing_ok=True)
    from rkspeech.pipelines.stage_gate import gate_refusal

    raise gate_refusal(gate, out / BUILD_REPORT, overridable=overridable)


def _cpu_goldens(stages, files, checks: dict, cp, talker, o: TTSBuildOptions) -> dict:
    """The CPU stages' golden replays (``pipelines.cpu_goldens``), driven through the numpy loop
    by the plan's graphs: each CPU stage's variant (with a code predictor's heads and start
    graph), an NPU stage's exported ONNX (not recorded)."""
    from rkspeech.pipelines.cpu_goldens import record_cpu_goldens

    t = c = None
    if talker is not None:
        ck = checks["talker"]
        t = {"placement": ck["placement"], "graphs": ck.get("variant") or ck["fp32"]}
    if cp is not None:
        ck = checks["code_predictor"]
        c = {"placement": ck["placement"], "role": ck["role"], "graph": ck.get("variant") or ck["fp32"],
             "heads": ck.get("heads"), "start": ck.get("start")}
    return record_cpu_goldens(stages, files, talker=t, code_predictor=c, threads=o.cpu_threads)


def _build(o: TTSBuildOptions, files, vfiles, out: Path) -> dict:
    from rkspeech.pipelines.stage_gate import check_cpu_stages, gate_section, plan_gate
    from rkspeech.pipelines.resumable import StageRunner
    from rkspeech.pipelines.tts_stages import place_clone_encoders, place_code_predictor, place_talker
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions, _build as build_vocoder_in
    from rkspeech.pipelines.cpu_heads import host_heads_record
    from rkspeech.plan.plan import load_plan, write_plan

    started = time.perf_counter()
    if o.vocoder_plan is not None:
        vplan, vocoder = _reuse_vocoder(o, vfiles)
        # into this folder (hard links): the plan must name files inside its folder only, so the
        # folder alone runs where it is copied (it pointed at ../../tts/vocoder/...; issue 37)
        from rkspeech.core import progress
        from rkspeech.plan.bundle import import_plan

        with progress.stage(f"link the vocoder plan's files into {out / 'vocoder'}"):
            vplan = load_plan(import_plan(vplan.path, out / "vocoder"), backend="ort")
    else:
        (out / "vocoder").mkdir(parents=True, exist_ok=True)
        vo = VocoderBuildOptions(out_dir=out / "vocoder", model_dir=files.root, target=o.target,
                                 codes_length=o.codes_length, first_length=o.first_length,
                                 verify_steps=o.verify_steps, skip_sim=o.skip_sim, pieces=o.pieces,
                                 timeout=o.timeout, formulation=o.formulation, force=o.force)
        vocoder = build_vocoder_in(vo, vfiles, out / "vocoder")
        vplan = load_plan(out / "vocoder" / PLAN_FILE, backend="ort")

    stages = StageRunner(out, o.force)
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel

    model = LazyTTSModel(files)  # loaded at most once, by the first stage that needs torch
    cp_place, talker_place = code_predictor_placement(o), talker_placement(o)
    headroom = None
    npu_graphs = ([] if o.skip_code_predictor or cp_place != "npu" else ["code_predictor"]) + \
        ([] if o.skip_talker or talker_place != "npu" else ["talker"])
    # quantized CPU stages: the same measurement finds MatMul inputs that carry an outlier channel,
    # which their quantizer keeps in fp32 (per-node precision in the stage's quantization record)
    quantized_graphs = ([] if o.skip_code_predictor or cp_place not in QUANTIZED else ["code_predictor"]) + \
        ([] if o.skip_talker or talker_place not in QUANTIZED else ["talker"])
    if (npu_graphs or quantized_graphs) and not o.skip_fp16_headroom:
        from rkspeech.pipelines.fp16_headroom import check_headroom

        headroom = check_headroom(stages, model, [Path(files.config), Path(files.weights)], npu_graphs,
                                  cpu_graphs=quantized_graphs)
    placed = {}
    if not o.skip_code_predictor:
        placed["code_predictor"] = place_code_predictor(o, stages, files, out, model, headroom)
    if not o.skip_talker:
        placed["talker"] = place_talker(o, stages, files, out, model, headroom)
    placed.update(place_clone_encoders(o, stages, files, vfiles, out, model))
    sections = {name: p.section for name, p in placed.items()}
    graphs = {name: p.row for name, p in placed.items()}
    cpu_checks = {name: placed[name].check for name in ("code_predictor", "talker") if name in placed}
    cp = placed["code_predictor"].report if "code_predictor" in placed else None
    talker = placed["talker"].report if "talker" in placed else None
    check = None
    if o.gate != "off" and any("variant" in c or "sim" in c for c in cpu_checks.values()):
        check = check_cpu_stages(stages, model, talker=cpu_checks.get("talker"),
                                 code_predictor=cpu_checks.get("code_predictor"),
                                 ckpt=[Path(files.config), Path(files.weights)], frames=o.cpu_check_frames,
                                 threads=o.cpu_threads, lanes=o.gate_lanes, int4=int4_options(o))
    gate = gate_section(check, o.gate, npu=_npu_figures(graphs))
    if o.skip_sim and o.gate != "off":  # recorded, not warned: --skip-sim says it
        skipped = [n for n, c in cpu_checks.items() if c["placement"] == "npu"]
        if skipped:
            gate["npu_not_measured"] = {"stages": sorted(skipped), "why": "--skip-sim (NPU stages are judged on "
                                                                           "the simulator)"}
    for name, figures in (gate.get("stages") or {}).items():
        if "cpu" in graphs[name]:
            graphs[name]["cpu"]["check"] = figures
        else:  # NPU-placed: judged on the simulator
            graphs[name]["gate"] = figures
    graphs["vocoder"] = _vocoder_row(vocoder, vplan)
    overflow = overflow_failures(gate.get("npu"), skipped=o.skip_fp16_headroom)
    if overflow:  # refused in every --gate mode: after the gate's own failures, which name their stage first
        gate.update(failures=gate["failures"] + overflow, passed=False)
    if overflow or (gate["failures"] and o.gate == "refuse"):
        _refuse(o, out, graphs, gate, vocoder, cp, talker, stages, started, headroom, overridable=not overflow)
    goldens = _cpu_goldens(stages, files, cpu_checks, cp, talker, o)
    from rkspeech.plan.sections import add_goldens

    for name, listed in (goldens.get("goldens") or {}).items():
        add_goldens(sections[name], listed, out)
    # the vocoder's record as its plan has it (NPU graphs, exact host graphs, which backend runs
    # which); vplan.contracts are those of the graphs ort runs, so each set's are read from its ONNX
    from rkspeech.contracts.vocoder import VocoderContract

    npu_contracts = {role: read_contract(p, VocoderContract) for role, p in vplan.onnx.items()}
    plan_path = write_plan(out / PLAN_FILE, placement="npu", target=o.target, contracts=npu_contracts,
                           rknn=vplan.rknn, onnx=vplan.onnx, host_onnx=vplan.host_onnx,
                           host_contracts={role: read_contract(p, VocoderContract) for role, p in vplan.host_onnx.items()},
                           backends=vplan.backends, stages=sections,
                           extra={"checkpoint": str(files.root.resolve()), "formulation": npu_contracts["main"].formulation,
                                  "dtype": "fp16", "prompt_form": _prompt_form(files),
                                  "host_heads": host_heads_record(files),
                                  "accuracy_gate": plan_gate(gate)})
    load_plan(plan_path, backend="ort")  # the plan just written must load
    summary = {
        "model": "qwen3-tts", "target": o.target, "plan": str(plan_path),
        "graphs": graphs,
        "vocoder": vocoder, "code_predictor": cp, "talker": talker, "accuracy_gate": gate,
        "fp16_headroom": headroom, "cpu_goldens": goldens,
        **({"warnings": [gate["warning"]]} if gate.get("warning") else {}),
        "placements": {"talker": None if o.skip_talker else talker_place,
                       "code_predictor": None if o.skip_code_predictor else cp_place, "vocoder": o.vocoder},
        "stages": stages.timings,
        "seconds": round(time.perf_counter() - started, 1),
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(o).items()},
    }
    write_json(out / BUILD_REPORT, summary)
    if o.fail_on_cpu:
        bad = {g: r["placement"]["cpu_ops"] for g, r in graphs.items()
               if r.get("placement") and r["placement"].get("cpu_ops")}
        if bad:
            raise RkspeechError(f"compute ops on the CPU: {bad} (see {out / BUILD_REPORT})")
    return summary
