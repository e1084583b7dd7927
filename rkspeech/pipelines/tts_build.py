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
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rkspeech.contracts.read import read_contract
from rkspeech.core.atomic import check_writable, folder_lock, write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.core.placement import PLACEMENTS

#: placements whose weights a quantizer writes (the fp16 headroom stage finds their outlier inputs)
QUANTIZED = ("cpu-int8", "cpu-int4")
from rkspeech.core.thresholds import GATE_MODES
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.pipelines.code_predictor_forms import DEFAULT_FORM
from rkspeech.pipelines.fp16_headroom import keep_fp32_of, overflow_failures, rescale_of
from rkspeech.pipelines.vocoder_build import BUILD_REPORT, PLAN_FILE
from rkspeech.contracts.formulations import DEFAULT_FORMULATION


@dataclass(frozen=True)
class TTSBuildOptions:
    out_dir: str | os.PathLike
    model_dir: str | os.PathLike | None = None  # a full model root (None: $QWEN3_TTS_MODEL)
    target: str = DEFAULT_TARGET
    # vocoder
    vocoder_plan: str | os.PathLike | None = None  # reuse a built qwen3-tts-vocoder plan (checked) instead
    codes_length: int = 64
    first_length: int | None = 16
    formulation: str = DEFAULT_FORMULATION
    verify_steps: int = 3
    pieces: int = 1  # the vocoder's simulator check in N graph pieces
    # code predictor
    verify_frames: int = 50  # frames replayed through the simulator (greedy agreement, logit SNR)
    skip_code_predictor: bool = False
    # "fp16" or "int16-hybrid" (code_predictor_build.DTYPES: the int16_ready graph, w16a16i_dfp with
    # fp16 layers; 99.56 % greedy agreement against fp16's 98.48 % on the reduced checkpoint)
    code_predictor_dtype: str = "fp16"
    code_predictor_calibration_frames: int = 240
    # "step" (one NPU call per position, host heads and sampling; converts at the published size
    # in 15 s / 2.3 GB) or "frame" (one greedy call per frame; 18.9 GB to convert there)
    code_predictor_form: str = DEFAULT_FORM
    # talker
    talker_capacity: int = 512  # KV positions: prompt + frames of one utterance
    talker_prefill: int = 32  # positions per prefill call
    skip_talker: bool = False  # no talker graph (torch on the host)
    skip_talker_rknn: bool = False  # talker graphs as ONNX only (onnxruntime on the host): talker="cpu-fp32"
    # placement per stage (core.placement.PLACEMENTS); None: npu (talker: cpu-fp32 with skip_talker_rknn)
    talker: str | None = None
    code_predictor: str | None = None
    vocoder: str = "npu"  # only npu for now
    cpu_threads: int | None = None  # onnxruntime threads recorded for the CPU stages (None: the runtime's default)
    int4_block: int = 32  # cpu-int4: MatMulNBits block along K (convert.cpu_quant.CpuQuantOptions)
    int4_symmetric: bool = False  # cpu-int4: no zero points
    cpu_check_frames: int = 48  # frames per utterance at most of the accuracy gate (cpu_stages.DEFAULT_CHECK_FRAMES)
    gate: str = "refuse"  # core.thresholds.GATE_MODES: refuse an unsafe placement, warn, or off (not measured)
    # the gate's utterances all at once over lane graphs (pipelines.gate_lanes) when both stages are
    # CPU-placed fp32 / int4 (cpu_stages.lanes_apply); False: one at a time over the placed graphs
    # (docs/accuracy-gate.md, Cost)
    gate_lanes: bool = True
    # fp32 activation peaks of the NPU-placed talker / code predictor, their exact rescale or a
    # refusal (pipelines.fp16_headroom); skip: not measured, the graphs as they are
    skip_fp16_headroom: bool = False
    # all
    skip_sim: bool = False
    timeout: float | None = None
    fail_on_cpu: bool = False
    force: bool = False


def _validate(o: TTSBuildOptions) -> None:
    if o.target not in TARGETS:
        raise RkspeechError(f"unknown target {o.target!r}; choose one of {', '.join(TARGETS)}")
    from rkspeech.pipelines.code_predictor_build import DTYPES
    from rkspeech.pipelines.code_predictor_forms import FORMS

    if o.code_predictor_form not in FORMS:
        raise RkspeechError(f"unknown --code-predictor-form {o.code_predictor_form!r}; choose one of "
                            f"{', '.join(FORMS)}")

    if o.code_predictor_dtype not in DTYPES:
        raise RkspeechError(f"unknown --code-predictor-dtype {o.code_predictor_dtype!r}; choose one of "
                            f"{', '.join(DTYPES)}")
    for name in ("codes_length", "verify_steps", "pieces", "verify_frames", "talker_capacity", "talker_prefill",
                 "code_predictor_calibration_frames"):
        if getattr(o, name) < 1:
            raise RkspeechError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(o, name)}")
    if o.talker_prefill > o.talker_capacity:
        raise RkspeechError(f"--talker-prefill {o.talker_prefill} exceeds --talker-capacity {o.talker_capacity}")
    for flag, value in (("--talker", o.talker), ("--code-predictor", o.code_predictor), ("--vocoder", o.vocoder)):
        if value is not None and value not in PLACEMENTS:
            raise RkspeechError(f"unknown {flag} {value!r}; choose one of {', '.join(PLACEMENTS)}")
    if o.vocoder != "npu":
        raise RkspeechError(f"--vocoder {o.vocoder}: not available yet, the vocoder is built for the NPU "
                            "(speak --backend ort runs its exact host graphs on the CPU)")
    if o.skip_talker_rknn and o.talker == "npu":
        raise RkspeechError("--skip-talker-rknn places the talker on the CPU (cpu-fp32); drop it or --talker npu")
    if o.skip_talker and o.talker not in (None, "npu"):
        raise RkspeechError(f"--skip-talker keeps the talker in torch; drop it or --talker {o.talker}")
    if o.skip_code_predictor and o.code_predictor not in (None, "npu"):
        raise RkspeechError(f"--skip-code-predictor keeps the code predictor in torch; drop it or "
                            f"--code-predictor {o.code_predictor}")
    if o.code_predictor not in (None, "npu") and o.code_predictor_dtype != "fp16":
        raise RkspeechError(f"--code-predictor-dtype {o.code_predictor_dtype} is an NPU conversion; "
                            f"--code-predictor {o.code_predictor} runs the exported graph on the CPU")
    if o.int4_block < 16 or o.int4_block & (o.int4_block - 1):
        raise RkspeechError(f"--int4-block must be a power of two >= 16, got {o.int4_block}")
    if o.cpu_threads is not None and o.cpu_threads < 1:
        raise RkspeechError(f"--cpu-threads must be >= 1, got {o.cpu_threads}")
    if o.cpu_check_frames < 1:
        raise RkspeechError(f"--cpu-check-frames must be >= 1, got {o.cpu_check_frames} (--gate off builds "
                            "without measuring)")
    if o.gate not in GATE_MODES:
        raise RkspeechError(f"unknown --gate {o.gate!r}; choose one of {', '.join(GATE_MODES)}")


def int4_options(o: TTSBuildOptions) -> dict:
    """The ``CpuQuantOptions`` fields a ``cpu-int4`` placement takes from the build's options."""
    return {"block_size": o.int4_block, "symmetric": o.int4_symmetric}


def talker_placement(o: TTSBuildOptions) -> str:
    """The talker's placement: ``talker``, else ``cpu-fp32`` with ``skip_talker_rknn``, else npu."""
    return o.talker or ("cpu-fp32" if o.skip_talker_rknn else "npu")


def code_predictor_placement(o: TTSBuildOptions) -> str:
    return o.code_predictor or "npu"


def build_tts(options: TTSBuildOptions) -> dict:
    """Run (or resume) the whole build; returns the report also written to ``OUT/build-report.json``.
    The model root and the output folder are checked before any work; the folder is locked."""
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config, resolve_checkpoint
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root

    o = options
    _validate(o)
    files = resolve_model_root(o.model_dir)
    read_tts_config(files)
    vfiles = resolve_checkpoint(files.root)
    read_config(vfiles)
    out = check_writable(o.out_dir, what="output", folder=True)
    with folder_lock(out):
        return _build(o, files, vfiles, out)


def _graph_row(convert: dict | None, rknn_bytes: int | None) -> dict:
    """The figures the issue asks for per graph, from a conversion report."""
    if not convert:
        return {"placement": None, "build": None, "rknn": None}
    pl, b = convert.get("placement") or {}, convert.get("build") or {}
    return {"placement": {k: pl.get(k) for k in ("npu_ops", "cpu_ops", "cpu_op_types", "estimate") if k in pl},
            "build": {k: b.get(k) for k in ("regtask_overflow_lines", "seconds", "peak_rss_mb")},
            "rknn": {"bytes": rknn_bytes if rknn_bytes is not None else (convert.get("rknn") or {}).get("bytes")}}


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
        return {**_graph_row(None, None), "verify": vocoder.get("verify"), "plan": str(vplan.path)}
    return {**_graph_row(conv["main"], (insp.get("main") or {}).get("bytes")),
            "roles": {r: _graph_row(c, (insp.get(r) or {}).get("bytes")) for r, c in conv.items()},
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


def _plan_gate(gate: dict) -> dict:
    """What the plan keeps of the gate: mode, verdict, failures (the figures are in the report)."""
    return {k: gate[k] for k in ("mode", "passed", "failures", "warning", "reference_frames", "prompt_form")
            if k in gate}


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
    more = f" (+{len(gate['failures']) - 1} more)" if len(gate["failures"]) > 1 else ""
    raise RkspeechError(f"accuracy gate: {gate['failures'][0]}{more}; no plan written (figures in "
                        f"{out / BUILD_REPORT}{'; --gate warn writes it anyway' if overridable else ''})")


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
    from rkspeech.pipelines.resumable import StageRunner
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions, _build as build_vocoder_in
    from rkspeech.plan.plan import load_plan, write_plan
    from rkspeech.convert.hybrid_int16 import HybridInt16Options
    from rkspeech.plan.sections import stage_section
    from rkspeech.pipelines.cpu_heads import host_heads_record, quantize_heads
    from rkspeech.pipelines.cpu_start import build_start
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, check_cpu_stages, cpu_row, gate_section, quantize_stage

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
    sections: dict[str, dict] = {}
    graphs: dict[str, dict] = {}
    cp = talker = None
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
    cpu_checks: dict[str, dict] = {}  # stage -> what check_cpu_stages compares
    if not o.skip_code_predictor:
        from rkspeech.pipelines.code_predictor_build import build_code_predictor

        cp = build_code_predictor(stages, files, out, target=o.target, verify_frames=o.verify_frames,
                                  skip_sim=o.skip_sim, timeout=o.timeout, model=model,
                                  dtype=o.code_predictor_dtype,
                                  calibration_frames=o.code_predictor_calibration_frames,
                                  form=o.code_predictor_form, convert=cp_place == "npu",
                                  layout=CPU_EXPORT if cp_place != "npu" else None,
                                  fp16_rescale=rescale_of(headroom, "code_predictor"))
        a = cp["artifacts"]
        cpu_checks["code_predictor"] = {"placement": cp_place, "role": cp["role"], "fp32": Path(a["onnx"])}
        if cp_place != "npu":
            src = {cp["role"]: Path(a["onnx"])}
            keep = keep_fp32_of(headroom, "code_predictor")
            q = quantize_stage(stages, "code_predictor", cp_place, src, out / "code_predictor" / "cpu",
                               int4=int4_options(o), keep_fp32=keep)
            step_form = cp["role"] == "step"
            heads = (quantize_heads(stages, cp_place, files, out / "code_predictor" / "cpu" / "heads",
                                    int4=int4_options(o)) if step_form else {})
            start = (build_start(stages, cp_place, files, model, out / "code_predictor" / "cpu", int4=int4_options(o),
                                 keep_fp32=keep)
                     if step_form else {})
            start_kept = (start.get("record") or {}).get("kept_fp32") or []
            if q["record"] and start_kept:  # the start graph is the same stack: its kept MatMuls too
                kept = q["record"].get("kept_fp32", []) + [{"graph": "start", **k} for k in start_kept]
                q["record"] = {**q["record"], "kept_fp32": kept, "kept_fp32_bytes": sum(k["bytes"] for k in kept)}
            sections["code_predictor"] = stage_section(
                placement=cp_place, target=None, artifacts={r: {"onnx": p} for r, p in q["artifacts"].items()},
                contract=read_contract(a["onnx"]).to_dict(), base=out, quantization=q["record"], threads=o.cpu_threads, heads=heads.get("heads"), start=start.get("start"))
            graphs["code_predictor"] = {**_graph_row(None, None), "form": cp.get("form"), "dtype": "fp32",
                                        "sim": None, "cpu": {**cpu_row(q, src), "heads": heads.get("record"),
                                                             "start": start.get("record")}}
            cpu_checks["code_predictor"]["heads"] = heads.get("heads")
            cpu_checks["code_predictor"]["start"] = start.get("start")
            if q["record"]:
                cpu_checks["code_predictor"]["variant"] = q["artifacts"][cp["role"]]
        else:
            quant = None
            if cp.get("dtype", "fp16") != "fp16":
                quant = {"dtype": cp["dtype"], "dataset": cp["calibration"]["dataset"],
                         "hybrid": HybridInt16Options.from_dict(cp.get("hybrid")).to_dict()}
            sections["code_predictor"] = stage_section(
                placement="npu", target=o.target, artifacts={cp["role"]: {"onnx": a["onnx"], "rknn": a["rknn"]}},
                contract=read_contract(a["onnx"]).to_dict(), base=out, quantization=quant)
            if rescale_of(headroom, "code_predictor") is not None:  # measured ([]: nothing to rescale)
                sections["code_predictor"]["fp16_rescale"] = rescale_of(headroom, "code_predictor")
            if not o.skip_sim:  # the gate judges it on the simulator, built as it was converted
                cpu_checks["code_predictor"]["sim"] = {
                    "target": o.target, "dtype": cp.get("dtype", "fp16"),
                    **({"dataset": cp["calibration"]["dataset"], "hybrid": cp.get("hybrid")}
                       if cp.get("dtype", "fp16") != "fp16" else {})}
            graphs["code_predictor"] = {**_graph_row(cp.get("convert") or cp, (cp.get("rknn") or {}).get("bytes")),
                                        "form": cp.get("form"), "dtype": cp.get("dtype"), "sim": cp.get("sim")}
    if not o.skip_talker:
        from rkspeech.pipelines.talker_build import build_talker

        talker = build_talker(stages, files, out, target=o.target, capacity=o.talker_capacity,
                              prefill_B=o.talker_prefill, skip_rknn=talker_place != "npu",
                              skip_sim=o.skip_sim, timeout=o.timeout, model=model,
                              fp16_rescale=rescale_of(headroom, "talker"),
                              **(CPU_EXPORT if talker_place != "npu" else {}))
        a = talker["artifacts"]
        src = {r: Path(a[r]["onnx"]) for r in ("prefill", "decode")}
        cpu_checks["talker"] = {"placement": talker_place, "fp32": src}
        q = (quantize_stage(stages, "talker", talker_place, src, out / "talker" / "cpu", int4=int4_options(o),
                            keep_fp32=keep_fp32_of(headroom, "talker"))
             if talker_place != "npu" else None)
        if q is not None:
            sections["talker"] = stage_section(
                placement=talker_place, target=None, artifacts={r: {"onnx": p} for r, p in q["artifacts"].items()},
                contract=read_contract(a["decode"]["onnx"]).to_dict(), base=out, quantization=q["record"],
                threads=o.cpu_threads)
            if q["record"]:
                cpu_checks["talker"]["variant"] = q["artifacts"]
        else:
            sections["talker"] = stage_section(
                placement="npu", target=o.target,
                artifacts={r: {"onnx": a[r]["onnx"], "rknn": a[r].get("rknn")} for r in ("prefill", "decode")},
                contract=read_contract(a["decode"]["onnx"]).to_dict(), base=out)
            if rescale_of(headroom, "talker") is not None:
                sections["talker"]["fp16_rescale"] = rescale_of(headroom, "talker")
            if not o.skip_sim:
                cpu_checks["talker"]["sim"] = {"target": o.target, "dtype": "fp16"}
        graphs["talker"] = {**_graph_row(talker if talker.get("placement") else None, None),
                            "per_graph": {r: _graph_row(talker["graphs"][r] if "placement" in talker["graphs"][r]
                                                        else None, None) for r in ("prefill", "decode")},
                            "verify": talker.get("verify"),
                            **({"cpu": cpu_row(q, src)} if q is not None else {})}
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config

    if read_tts_config(files).tts_model_type == "base":  # voice cloning's graphs (pipelines.clone_encoders)
        from rkspeech.pipelines.clone_encoders import build_speaker_encoder, build_speech_encoder

        built = {"speaker_encoder": build_speaker_encoder(stages, files, model, out / "clone"),
                 "speech_encoder": build_speech_encoder(stages, vfiles, read_tts_config(files).talker.num_code_groups,
                                                        out / "clone")}
        for name, b in built.items():
            sections[name] = stage_section(placement="cpu-fp32", target=None, artifacts={"encoder": {"onnx": b["path"]}},
                                           contract=b["contract"], base=out, threads=o.cpu_threads,
                                           goldens={"encoder": b["golden"]})  # replayed by check-board
            graphs[name] = {**_graph_row(None, None), "cpu": {"placement": "cpu-fp32"},
                            "clone": {k: b["record"][k] for k in ("bytes", "check", "golden") if k in b["record"]}}
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
                                  "accuracy_gate": _plan_gate(gate)})
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
