"""A Qwen3-TTS model root -> one plan with the talker, the code predictor and the vocoder.

``rkspeech build qwen3-tts``: the vocoder's build (``vocoder_build``, its own resumable stages in
``OUT/vocoder``), then the code predictor's frame graph and the talker's step graphs
(``code_predictor_build``, ``talker_build``, stages in ``OUT``), each exported, checked, converted,
inspected and (unless skipped) verified on the simulator; then ``OUT/plan.json`` naming every
artifact with its contract (``plan.sections``) and ``OUT/build-report.json`` with, per graph
(``talker``, ``code_predictor``, ``vocoder``), the placement, the build log's figures and the
.rknn size.  ``rkspeech speak --plan OUT/plan.json`` runs whichever stages the plan places.
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
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.pipelines.code_predictor_forms import DEFAULT_FORM
from rkspeech.pipelines.vocoder_build import BUILD_REPORT, PLAN_FILE
from rkspeech.contracts.formulations import DEFAULT_FORMULATION


@dataclass(frozen=True)
class TTSBuildOptions:
    out: str | os.PathLike
    model_dir: str | os.PathLike | None = None  # a full model root (None: $QWEN3_TTS_MODEL)
    target: str = DEFAULT_TARGET
    # vocoder
    vocoder_plan: str | os.PathLike | None = None  # reuse a built qwen3-tts-vocoder plan (checked) instead
    codes_length: int = 64
    first_length: int | None = 16
    formulation: str = DEFAULT_FORMULATION
    verify_steps: int = 3
    sim_pieces: int = 1
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
    skip_talker_rknn: bool = False  # talker graphs as ONNX only (onnxruntime on the host)
    # all
    skip_verify: bool = False
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
    for name in ("codes_length", "verify_steps", "sim_pieces", "verify_frames", "talker_capacity", "talker_prefill",
                 "code_predictor_calibration_frames"):
        if getattr(o, name) < 1:
            raise RkspeechError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(o, name)}")
    if o.talker_prefill > o.talker_capacity:
        raise RkspeechError(f"--talker-prefill {o.talker_prefill} exceeds --talker-capacity {o.talker_capacity}")


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
    out = check_writable(o.out, what="output", folder=True)
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
    if vplan.impl != "rknn" or vplan.target != o.target or not vplan.artifacts:
        raise RkspeechError(f"--vocoder-plan {o.vocoder_plan}: holds {vplan.impl} graphs for {vplan.target}, "
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


def _build(o: TTSBuildOptions, files, vfiles, out: Path) -> dict:
    from rkspeech.pipelines.resumable import StageRunner
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions, _build as build_vocoder_in
    from rkspeech.plan.plan import load_plan, write_plan
    from rkspeech.convert.hybrid_int16 import HybridInt16Options
    from rkspeech.plan.sections import stage_section

    started = time.perf_counter()
    if o.vocoder_plan is not None:
        vplan, vocoder = _reuse_vocoder(o, vfiles)
    else:
        (out / "vocoder").mkdir(parents=True, exist_ok=True)
        vo = VocoderBuildOptions(out=out / "vocoder", model_dir=files.root, target=o.target,
                                 codes_length=o.codes_length, first_length=o.first_length,
                                 verify_steps=o.verify_steps, skip_verify=o.skip_verify, sim_pieces=o.sim_pieces,
                                 timeout=o.timeout, formulation=o.formulation, force=o.force)
        vocoder = build_vocoder_in(vo, vfiles, out / "vocoder")
        vplan = load_plan(out / "vocoder" / PLAN_FILE, backend="ort")

    stages = StageRunner(out, o.force)
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel

    model = LazyTTSModel(files)  # loaded at most once, by the first stage that needs torch
    sections: dict[str, dict] = {}
    graphs: dict[str, dict] = {}
    cp = talker = None
    if not o.skip_code_predictor:
        from rkspeech.pipelines.code_predictor_build import build_code_predictor

        cp = build_code_predictor(stages, files, out, target=o.target, verify_frames=o.verify_frames,
                                  skip_verify=o.skip_verify, timeout=o.timeout, model=model,
                                  dtype=o.code_predictor_dtype,
                                  calibration_frames=o.code_predictor_calibration_frames,
                                  form=o.code_predictor_form)
        a = cp["artifacts"]
        quant = None
        if cp.get("dtype", "fp16") != "fp16":
            quant = {"dtype": cp["dtype"], "dataset": cp["calibration"]["dataset"],
                     "hybrid": HybridInt16Options.from_dict(cp.get("hybrid")).to_dict()}
        sections["code_predictor"] = stage_section(
            impl="rknn", target=o.target, artifacts={cp["role"]: {"onnx": a["onnx"], "rknn": a["rknn"]}},
            contract=read_contract(a["onnx"]).to_dict(), base=out, quantization=quant)
        graphs["code_predictor"] = {**_graph_row(cp.get("convert") or cp, (cp.get("rknn") or {}).get("bytes")),
                                    "form": cp.get("form"), "dtype": cp.get("dtype"), "sim": cp.get("sim")}
    if not o.skip_talker:
        from rkspeech.pipelines.talker_build import build_talker

        talker = build_talker(stages, files, out, target=o.target, capacity=o.talker_capacity,
                              prefill_B=o.talker_prefill, skip_rknn=o.skip_talker_rknn,
                              skip_verify=o.skip_verify, timeout=o.timeout, model=model)
        a = talker["artifacts"]
        has_rknn = all(a[r].get("rknn") for r in ("prefill", "decode"))
        sections["talker"] = stage_section(
            impl="rknn" if has_rknn else "onnx", target=o.target if has_rknn else None,
            artifacts={r: {"onnx": a[r]["onnx"], "rknn": a[r].get("rknn")} for r in ("prefill", "decode")},
            contract=read_contract(a["decode"]["onnx"]).to_dict(), base=out)
        graphs["talker"] = {**_graph_row(talker if talker.get("placement") else None, None),
                            "per_graph": {r: _graph_row(talker["graphs"][r] if "placement" in talker["graphs"][r]
                                                        else None, None) for r in ("prefill", "decode")},
                            "verify": talker.get("verify")}
    graphs["vocoder"] = _vocoder_row(vocoder, vplan)
    # the vocoder's sections as its plan has them (NPU graphs, exact host graphs, which backend runs
    # which); vplan.contracts are those of the graphs ort runs, so each set's are read from its ONNX
    from rkspeech.contracts.vocoder import VocoderContract

    npu_contracts = {role: read_contract(p, VocoderContract) for role, p in vplan.onnx.items()}
    plan_path = write_plan(out / PLAN_FILE, impl="rknn", target=o.target, contracts=npu_contracts,
                           rknn=vplan.artifacts, onnx=vplan.onnx, host_onnx=vplan.host_onnx,
                           host_contracts={role: read_contract(p, VocoderContract) for role, p in vplan.host_onnx.items()},
                           backends=vplan.backends, stages=sections,
                           extra={"checkpoint": str(files.root.resolve()), "formulation": npu_contracts["main"].formulation,
                                  "dtype": "fp16"})
    load_plan(plan_path, backend="ort")  # the plan just written must load
    summary = {
        "model": "qwen3-tts", "target": o.target, "plan": str(plan_path),
        "graphs": graphs,
        "vocoder": vocoder, "code_predictor": cp, "talker": talker,
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
