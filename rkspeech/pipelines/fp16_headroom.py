"""The fp16 headroom stage of ``build qwen3-tts``: measure, rescale exactly, or refuse the NPU.

Before any NPU-placed talker / code predictor graph is exported, greedy runs of the accuracy
gate's held-out texts (``accuracy.gate.GATE_TEXTS``, the first ``texts``, speakers and languages
cycled as the gate does) record the fp32 peak of every tensor of those graphs' torch stacks
(``models.qwen3_tts.fp16_headroom``).  Then, per graph:

* a SwiGLU MLP channel over ``FP16_MAX / MARGIN`` gets the exact power-of-two rescale, folded
  into the shared model's weights before the export (the ONNX and .rknn carry it; the fp32 model
  stays bit-identical, so every later check compares the same function), its record in the
  plan's stage record (``fp16_rescale``) and in the export stage's key (a changed rescale
  re-exports);
* any other tensor over ``FP16_MAX`` (65504) refuses the NPU placement in one line naming the
  graph, the tensor (its layer), the peak and the placement that works.

The stage is resumable (``pipelines.resumable``; keyed on the checkpoint files and its
settings); its report goes to ``build-report.json`` under ``fp16_headroom``.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError

STAGE = "fp16_headroom"
#: held-out texts (the first of ``GATE_TEXTS``) and greedy frames per text
TEXTS = 5
FRAMES = 24
#: bump when what the stage records changes (2: each graph's outlier inputs, their weights' digests)
VERSION = 2
#: the placement a refusal points to, per graph
CPU_FLAG = {"code_predictor": "--code-predictor cpu-int8", "talker": "--talker cpu-int8"}


def headroom_runs(tts, n: int) -> list[tuple[str, dict]]:
    """``(text, generate_frames keywords)`` of the first ``n`` gate texts: the gate's requests
    (custom voice / voice design), a base model cloning the code predictor checks' two-tone clip."""
    from rkspeech.accuracy.gate import GATE_TEXTS
    from rkspeech.core.capture import CALM_VOICE, cycled_requests, sample_request, tone_clip

    texts = list(GATE_TEXTS[:n])
    if tts.cfg.tts_model_type in ("custom_voice", "voice_design"):
        requests = cycled_requests(tts, len(texts), instruct=CALM_VOICE)
    else:
        clip = tone_clip((220, 0.3), (1330, 0.1))
        requests = [sample_request(tts, i, ref_audio=clip) for i in range(len(texts))]
    return list(zip(texts, requests))


def measure(tts, graphs, *, texts: int = TEXTS, frames: int = FRAMES, margin: float | None = None,
            cpu_graphs=()) -> dict:
    """The stage's report (JSON-able): per NPU graph (``graphs``) the top tensors, the rescale, the
    top tensors after it and ``over`` (``[tensor, peak]`` still over ``FP16_MAX``); per graph, NPU
    or quantized CPU (``cpu_graphs``: no rescale, nothing refused), ``outliers``: the Linear
    inputs whose largest channel peak exceeds ``OUTLIER_RATIO`` x their median channel's (a CPU
    quantizer keeps those MatMuls in fp32) and ``largest_outlier_ratio``."""
    from rkspeech.models.qwen3_tts.fp16_headroom import (
        FP16_MAX,
        MARGIN,
        OUTLIER_RATIO,
        largest_outlier_ratio,
        measure_peaks,
        outlier_inputs,
        plan_rescale,
        top_tensors,
    )

    margin = MARGIN if margin is None else margin
    runs = headroom_runs(tts, texts)
    peaks = measure_peaks(tts, list(graphs) + [g for g in cpu_graphs if g not in graphs], runs, frames)
    out = {"texts": len(runs), "frames": peaks.frames, "margin": margin, "fp16_max": FP16_MAX,
           "outlier_ratio": OUTLIER_RATIO, "graphs": {}}
    for g in graphs:
        p = plan_rescale(peaks, g, margin=margin)
        out["graphs"][g] = {"placement": "npu", "top": top_tensors(peaks.tensors.get(g, {})), "rescale": p["rescale"],
                            "top_after": top_tensors(p["after"], 3),
                            "over": [[n, round(v, 3)] for n, v in p["over"]]}
    for g in cpu_graphs:
        if g not in graphs:
            out["graphs"][g] = {"placement": "cpu", "top": top_tensors(peaks.tensors.get(g, {})), "rescale": None,
                                "top_after": [], "over": []}
    for g, row in out["graphs"].items():
        row["outliers"] = [{**o, **_weight_of(tts, g, o["module"])} for o in outlier_inputs(peaks, g)]
        row["largest_outlier_ratio"] = largest_outlier_ratio(peaks, g)
    return out


def _weight_of(tts, graph: str, module: str) -> dict:
    """``K``, ``N`` and ``weight_sha256`` (``convert.cpu_quant.weight_digest``) of the MatMul
    weight ``[K, N]`` a graph's Linear ``module`` exports to: how a quantizer finds it in a graph
    whose node names lost the layer (measured before any rescale folds into the weights)."""
    from rkspeech.convert.cpu_quant import weight_digest
    from rkspeech.models.qwen3_tts.fp16_headroom import stack_module

    w = stack_module(tts, graph).get_submodule(module).weight.detach().float().numpy().T
    return {"K": int(w.shape[0]), "N": int(w.shape[1]), "weight_sha256": weight_digest(w)}


#: module names of a graph's torch stack that its step graphs hold (the code predictor's heads and
#: input projection are other graphs, quantized apart: ``pipelines.cpu_heads``)
STEP_MODULES = {"code_predictor": "model.", "talker": ""}


def keep_fp32_of(report: dict | None, graph: str) -> list[tuple]:
    """``CpuQuantOptions.keep_fp32`` entries of ``graph``'s outlier inputs (``outliers_of``) that
    its step graphs hold."""
    return [(o["module"], o["K"], o["N"], o["weight_sha256"]) for o in outliers_of(report, graph)
            if o["module"].startswith(STEP_MODULES.get(graph, ""))]


def refusal(report: dict) -> str | None:
    """The one line refusing an NPU placement (None: every graph fits fp16 after its rescale)."""
    from rkspeech.models.qwen3_tts.fp16_headroom import FP16_MAX

    for g, row in report["graphs"].items():
        if row["over"]:
            name, peak = row["over"][0]
            more = f" (+{len(row['over']) - 1} more tensors)" if len(row["over"]) > 1 else ""
            return (f"fp16 headroom: the NPU {g.replace('_', ' ')}'s {name} peaks at {peak:.6g} "
                    f"({peak / FP16_MAX:.2f}x fp16's {FP16_MAX:.0f}) over {report['texts']} held-out texts{more}, "
                    f"and no exact rescale moves it; place it on the CPU: {CPU_FLAG.get(g, 'cpu-int8')}")
    return None


def overflow_failures(npu: dict | None, *, skipped: bool) -> list[str]:
    """One failure per NPU-placed stage whose simulator check (``tts_build._npu_figures``) has a NaN
    logit SNR: its fp16 logits hold NaN or inf.  Refused whatever ``--gate`` says: such a plan
    speaks noise (the published massive root without the rescale: 68.8 % agreement, SNR NaN), and on
    a checkpoint that does not stop the gate cannot judge the stage at all.  ``skipped``: the
    build ran with ``--skip-fp16-headroom`` (the line then names it)."""
    fix = "build without --skip-fp16-headroom (its exact rescale), or " if skipped else ""
    return [f"{name} on the simulator: its fp16 logits hold NaN or inf (an fp16 overflow); {fix}place it on the "
            f"CPU: {CPU_FLAG.get(name, 'cpu-int8')}"
            for name, fig in (npu or {}).items() if fig.get("logit_snr_db") == "NaN"]


def check_headroom(stages, model, ckpt: list[Path], graphs, *, texts: int = TEXTS, frames: int = FRAMES,
                   cpu_graphs=()) -> dict:
    """Run (or resume) the stage for ``graphs`` (NPU-placed graph names) and ``cpu_graphs``
    (quantized CPU-placed ones: their outlier inputs only), refuse in one line where
    no exact rescale fits, else fold the rescales into ``model`` (a ``LazyTTSModel``: now, or when
    it loads) and return the report (``seconds``: what the stage took, or took when it ran)."""
    from rkspeech.models.qwen3_tts.fp16_headroom import MARGIN, OUTLIER_RATIO, apply_rescale

    graphs, cpu_graphs = sorted(graphs), sorted(cpu_graphs)
    args = {"graphs": graphs, "texts": texts, "frames": frames, "margin": MARGIN, "cpu_graphs": cpu_graphs,
            "outlier_ratio": OUTLIER_RATIO, "version": VERSION}
    report = stages.run(STAGE, args, ckpt, lambda: [],
                        lambda: measure(model.get(), graphs, texts=texts, frames=frames, cpu_graphs=cpu_graphs))
    timing = stages.timings.get(STAGE, {})
    report = {**report, "seconds": timing.get("seconds", timing.get("built_seconds"))}
    line = refusal(report)
    if line:
        raise RkspeechError(line)
    for g, row in report["graphs"].items():
        if row["rescale"] and row.get("placement", "npu") == "npu":
            model.transform(lambda tts, g=g, r=row["rescale"]: apply_rescale(tts, g, r))
    return report


def rescale_of(report: dict | None, graph: str) -> list[dict] | None:
    """``graph``'s rescale in the stage's report (None: not measured; []: measured, none needed)."""
    row = ((report or {}).get("graphs") or {}).get(graph)
    return None if row is None or row.get("placement", "npu") != "npu" else row["rescale"]


def outliers_of(report: dict | None, graph: str) -> list[dict]:
    """``graph``'s Linear inputs carrying an outlier channel (``measure``'s ``outliers``; [] when
    not measured): what a CPU quantizer keeps in fp32."""
    row = ((report or {}).get("graphs") or {}).get(graph)
    return list((row or {}).get("outliers") or [])
