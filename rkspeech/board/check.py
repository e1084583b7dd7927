"""``rkspeech check-board``: replay every graph's golden steps on this machine's runtime, compare
each output with what the simulator computed, time each call, and set the timings beside the
compiler-based estimate (``rkspeech estimate``).

The graphs of a plan (:func:`plan_graphs`): the vocoder's ``first`` / ``main`` step graphs, the
talker's ``prefill`` / ``decode``, the code predictor's ``step`` or ``frame`` (NPU-placed stages),
a Whisper encoder's ``encoder`` or ``part0..N``.  Each runs on ``backend``: ``rknnlite`` (the
.rknn on the board's NPU), ``sim`` (the simulator, from the ONNX the .rknn came from) or ``ort``
(onnxruntime on that ONNX), so the command runs off a board.  Then each CPU-placed stage's graphs
whose goldens its record lists (``pipelines.cpu_goldens``: the talker's, the code predictor's
step / frame, start graph and heads; a generation's real calls and the build host's onnxruntime
outputs; a Base plan's cloning encoders, ``pipelines.clone_encoders``: a call of their build
check), on onnxruntime whatever the backend, as a board runs them: this checks the board's ARM
int8 / int4 kernels.  A plan whose CPU stages list none (built before 2026-12-05; the cloning
encoders before 2026-12-06) is said in one line (``notes``), and the rest is checked.

Per graph: each step's outputs against the golden (SNR and cosine from ``core.compare``, pass marks
``core.thresholds.SIM_MIN_SNR_DB`` and ``GOLDEN_MIN_COSINE``; a CPU stage's ``CPU_GOLDEN_*``, and
its logits' top-1 on every row that is not a near-tie; integer outputs as agreement,
reported, not graded: a near-tie of two logits may flip between fp16 implementations), and call
times: the first call (it pays the runtime's lazy set-up), then the median and p95 of the rest
over ``repeats`` replays.  The first failing step is one line naming the graph and the step.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.errors import MissingPackage, RkspeechError
from rkspeech.core.thresholds import (CPU_GOLDEN_MIN_COSINE, CPU_GOLDEN_MIN_SNR_DB, CPU_GOLDEN_TIE,
                                      GOLDEN_MIN_COSINE, SIM_MIN_SNR_DB)

CHECK_FORMAT = "rkspeech-check-board/1"


@dataclass(frozen=True)
class BoardGraph:
    name: str  # "vocoder main", "talker decode", "whisper_encoder part0", ...
    onnx: Path | None
    rknn: Path | None
    golden: Path
    build: dict = field(default_factory=dict)  # the simulator's build keywords (dtype, dataset, hybrid)
    #: a CPU stage's graph: onnxruntime whatever the backend, the CPU marks (``CPU_GOLDEN_*``)
    cpu: bool = False


@dataclass(frozen=True)
class CheckBoardOptions:
    plan: str | os.PathLike
    backend: str = "rknnlite"
    core_mask: str | None = None  # rknnlite: one of core.targets.CORE_MASKS
    target: str | None = None  # sim: the chip to simulate (default: the plan's)
    threads: int | None = None  # ort
    repeats: int = 5  # replays of the golden steps timed (the first is also compared)
    output: str | os.PathLike | None = None  # the JSON report


def plan_graphs(raw: dict, base: Path) -> list[BoardGraph]:
    """Every NPU graph of the plan ``raw`` (read through ``plan.plan.read_plan``), in run order:
    each role's .rknn (and the ONNX it came from) of the NPU-placed stages, and the vocoder's and
    the Whisper and Qwen3-ASR encoders' whatever their placement (their goldens replay on onnxruntime too)."""
    from rkspeech.plan.integrity import golden_path
    from rkspeech.plan.paths import plan_file
    from rkspeech.plan.record import LANES_ROLE, START_ROLE, head_codebook, is_npu, record_goldens, stage_records

    def path(v):
        return None if not isinstance(v, str) else plan_file(base, v, f"plan in {base}")

    def golden_of(rknn, onnx):
        for p in (rknn, onnx):
            if p is not None and golden_path(p).is_file():
                return golden_path(p)
        return golden_path(rknn or onnx)

    out = []
    records = stage_records(raw)
    for name in ("vocoder", "talker", "code_predictor", "whisper_encoder", "asr_encoder"):
        rec = records.get(name)
        if rec is None or not (is_npu(rec) or name in ("vocoder", "whisper_encoder", "asr_encoder")):
            continue
        q = rec.get("quantization") or {}
        build = ({"dtype": q["dtype"], "dataset": str(path(q["dataset"])), "hybrid": q.get("hybrid")}
                 if isinstance(q, dict) and q.get("dtype") and q.get("dataset") else {})
        arts = rec.get("artifacts") or {}
        roles = ([r for r in ("first", "main") if r in arts] if name == "vocoder" else
                 [r for r in arts if r not in (START_ROLE, LANES_ROLE) and head_codebook(r) is None])  # CPU graphs
        for role in roles:
            files = arts[role] if isinstance(arts[role], dict) else {}
            r, o = path(files.get("rknn")), path(files.get("onnx"))
            if r is None and o is None:
                continue
            label = name.replace("_", " ") + ("" if role == "encoder" else f" {role}")
            out.append(BoardGraph(label, o, r, golden_of(r, o), build))
    for name in CPU_GOLDEN_STAGES:  # CPU stages: the goldens their records list
        rec = records.get(name)
        if rec is None or is_npu(rec):
            continue
        arts = rec.get("artifacts") if isinstance(rec.get("artifacts"), dict) else {}
        for role, g in (record_goldens(rec, f"plan in {base}: {name}") or {}).items():
            onnx = path((arts.get(role) or {}).get("onnx"))
            label = name.replace("_", " ") + ("" if role == "encoder" else f" {role}")
            out.append(BoardGraph(label, onnx, None, path(g), cpu=True))
    return out


#: the CPU-placed stages whose records list goldens (``pipelines.cpu_goldens``; the cloning
#: encoders' from their build checks, ``pipelines.clone_encoders``), in run order
CPU_GOLDEN_STAGES = ("speaker_encoder", "speech_encoder", "talker", "code_predictor", "asr_decoder")


def cpu_stages_without_goldens(raw: dict) -> list[str]:
    """The CPU-placed stages of the plan ``raw`` that list no goldens (built before 2026-12-05;
    the cloning encoders before 2026-12-06)."""
    from rkspeech.plan.record import is_npu, stage_records

    return [n for n, rec in stage_records(raw).items()
            if n in CPU_GOLDEN_STAGES and not is_npu(rec) and not rec.get("goldens")]


def _estimate_ms(rknn: Path | None) -> dict:
    """``rkspeech estimate``'s step time for ``rknn`` (its build log beside it); the reason when
    there is none (a board copy without logs)."""
    if rknn is None or not rknn.is_file():
        return {"est_step_ms": None, "why": "no .rknn"}
    try:
        from rkspeech.estimate.steptime import estimate_path

        rep = estimate_path(rknn).to_report()
        return {"est_step_ms": rep.get("est_step_ms"), "est_step_ms_by_cores": rep.get("est_step_ms_by_cores")}
    except RkspeechError as exc:
        return {"est_step_ms": None, "why": str(exc)}


def marks(cpu: bool) -> dict:
    """The pass marks of a graph's outputs: an NPU graph's against the simulator
    (``SIM_MIN_SNR_DB``, ``GOLDEN_MIN_COSINE``), a CPU stage's against the build host's
    onnxruntime (``CPU_GOLDEN_*``, and its logits' top-1 on rows that are not near-ties)."""
    if cpu:
        return {"snr_db": CPU_GOLDEN_MIN_SNR_DB, "cosine": CPU_GOLDEN_MIN_COSINE, "top1_tie": round(CPU_GOLDEN_TIE, 4)}
    return {"snr_db": SIM_MIN_SNR_DB, "cosine": GOLDEN_MIN_COSINE}


def _compare(name: str, ref, out, cpu: bool = False) -> dict:
    """One output against its golden: SNR (``core.compare``: null when identical) and cosine;
    ``nonfinite``: how many inf / NaN values the output holds (then it fails).  A CPU stage's
    ``logits`` also top-1 row by row (``core.compare.top1_rows``): a flip of a decided row fails."""
    import numpy as np

    from rkspeech.core.compare import compare_tensors, json_number, top1_rows

    ref, out = np.asarray(ref), np.asarray(out)
    if ref.shape != out.shape and ref.size == out.size:
        out = out.reshape(ref.shape)
    if ref.dtype.kind in "iub":
        agree = float(np.mean(ref.reshape(-1) == out.reshape(-1).astype(ref.dtype))) if ref.size else 1.0
        return {"output": name, "agreement": agree, "values": int(ref.size), "graded": False, "ok": True}
    m = marks(cpu)
    c = compare_tensors(ref.astype(np.float32), out.astype(np.float32))
    bad = int(out.size - np.isfinite(out).sum())
    ok = not bad and c["snr_db"] >= m["snr_db"] and c["cosine"] >= m["cosine"]
    row = {"output": name, "snr_db": json_number(c["snr_db"]), "cosine": round(c["cosine"], 7),
           "max_abs_diff": c["max_abs_diff"], "graded": True}
    if cpu and name == "logits" and not bad:
        row["top1"] = top1_rows(ref, out, m["top1_tie"])
        ok = ok and row["top1"]["decided_flips"] == 0
    return {**row, "ok": ok, **({"nonfinite": bad} if bad else {})}


def snr_text(row: dict, digits: int = 2) -> str:
    """A graded output's SNR for people: the dB figure, ``identical`` (null, or an older report's
    ``Infinity``), or ``inf/NaN xN``."""
    from rkspeech.core.compare import db_text

    return f"inf/NaN x{row['nonfinite']}" if row.get("nonfinite") else db_text(row["snr_db"], digits)


def _open(g: BoardGraph, o: CheckBoardOptions, target: str | None):
    from rkspeech.runtime.runners import open_runner

    if g.cpu:  # a CPU stage runs on onnxruntime whatever runs the NPU graphs (a board: rknnlite)
        if g.onnx is None:
            raise RkspeechError(f"{g.name}: the plan names no ONNX for it")
        return open_runner("ort", g.onnx, threads=o.threads)
    if o.backend == "rknnlite":
        if g.rknn is None:
            raise RkspeechError(f"{g.name}: the plan names no .rknn for it (build it with conversion)")
        # the replay is done with each call's outputs before the next and feeds caches as they come
        try:
            return open_runner("rknnlite", g.rknn, core_mask=o.core_mask, pass_through=True, reuse_outputs=True)
        except MissingPackage as exc:
            raise RkspeechError(f"{exc}; off a board, --backend ort (onnxruntime) or --backend sim (the "
                                "simulator) replays the same golden steps") from None
    if g.onnx is None:
        raise RkspeechError(f"{g.name}: the plan names no ONNX for it; --backend {o.backend} runs the ONNX")
    if o.backend == "sim":
        return open_runner("sim", g.onnx, target=target, log_path=None, **g.build)
    return open_runner("ort", g.onnx, threads=o.threads)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def check_graph(g: BoardGraph, o: CheckBoardOptions, target: str | None) -> dict:
    """Replay ``g``'s golden steps (``repeats`` times), compare the first replay, time every call."""
    from rkspeech.runtime.golden import load_golden, replay
    from rkspeech.core import progress

    if not g.golden.is_file():
        raise RkspeechError(f"{g.name}: no golden replay {g.golden} (plans built before 2026-12-01 have none; "
                            "rebuild)")
    golden = load_golden(g.golden)
    t0 = time.perf_counter()
    with progress.stage(f"check-board: {g.name} on {'ort' if g.cpu else o.backend}"):
        with _open(g, o, target) as runner:
            load_s = time.perf_counter() - t0
            steps, times = [], []
            for rep in range(max(1, o.repeats)):
                for k, call in enumerate(replay(runner, golden, graph=g.name)):
                    times.append(call.seconds)
                    if rep:
                        continue
                    rows = [_compare(n, ref, call.outputs[n], g.cpu) for n, ref in golden.outputs[k].items()]
                    steps.append({"step": k, "outputs": rows, "ok": all(r["ok"] for r in rows)})
            overhead = getattr(runner, "overhead_s", None)
            runtime_log = getattr(runner, "runtime_log", "")  # rknn-lite: librknnrt's version line and the rest
    rest = times[1:] or times
    timing = {"first_ms": round(times[0] * 1e3, 3), "median_ms": round(statistics.median(rest) * 1e3, 3),
              "p95_ms": round(_pct(rest, 0.95) * 1e3, 3), "calls": len(times), "load_s": round(load_s, 3)}
    if overhead is not None:
        timing["runner_overhead_ms"] = round(1e3 * overhead / max(1, len(times)), 4)
    failed = next((s for s in steps if not s["ok"]), None)
    return {"graph": g.name, "file": str(g.rknn if o.backend == "rknnlite" and not g.cpu else g.onnx),
            "golden": str(g.golden), "placement": "cpu" if g.cpu else "npu", "pass_marks": marks(g.cpu),
            "golden_source": golden.meta.get("source"), "steps": steps, "timing": timing,
            "estimate": _estimate_ms(g.rknn), "ok": failed is None,
            **({"runtime_log": runtime_log[-4000:]} if runtime_log else {}),
            **({"failure": _failure_line(g.name, failed, g.cpu)} if failed else {})}


def _failure_line(graph: str, step: dict, cpu: bool = False) -> str:
    bad = next(r for r in step["outputs"] if not r["ok"])
    m = marks(cpu)
    t = bad.get("top1") or {}
    flips = (f"; top-1 flipped on {t['decided_flips']} of {t['rows']} decided rows (margin up to "
             f"{t['worst_margin']} x the row's rms, ties below {m['top1_tie']:g})" if t.get("decided_flips") else "")
    return (f"{graph}, step {step['step']}: output {bad['output']} differs from the golden replay "
            f"(SNR {snr_text(bad)}{'' if bad.get('nonfinite') else ' dB'}, "
            f"cosine {bad['cosine']}{flips}; pass marks {m['snr_db']:g} dB, {m['cosine']:g})")


def check_board(options: CheckBoardOptions) -> dict:
    """Load the plan (integrity first), replay every graph, return (and write) the report."""
    from rkspeech.plan.plan import read_plan
    from rkspeech.runtime.runners import BACKENDS

    o = options
    if o.backend not in BACKENDS:
        raise RkspeechError(f"unknown backend {o.backend!r}; choose one of {', '.join(BACKENDS)}")
    if o.repeats < 1:
        raise RkspeechError(f"--repeats must be >= 1, got {o.repeats}")
    if o.output is not None:
        from rkspeech.core.atomic import check_writable

        check_writable(o.output)
    plan = Path(o.plan)
    raw = read_plan(plan)
    graphs = plan_graphs(raw, plan.parent)
    notes = []
    older = cpu_stages_without_goldens(raw)
    if older:
        when = ("2026-12-06" if all(n in ("speaker_encoder", "speech_encoder") for n in older) else "2026-12-05")
        notes.append(f"the plan's CPU stage(s) {', '.join(n.replace('_', ' ') for n in older)} have no golden replays "
                     f"(built before {when}): not checked; rebuild the plan to check them")
    if not graphs:
        raise RkspeechError(f"plan {plan}: no graphs with golden replays to check" + (f" ({notes[0]})" if notes else ""))
    target = o.target or next((s.get("target") for s in raw.values() if isinstance(s, dict) and s.get("target")), None)
    started = time.perf_counter()
    rows = [check_graph(g, o, target) for g in graphs]
    report = {"format": CHECK_FORMAT, "plan": str(plan), "backend": o.backend, "core_mask": o.core_mask,
              "target": target, "machine": f"{platform.system()} {platform.machine()}",
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
              "pass_marks": marks(False), "cpu_pass_marks": marks(True), "notes": notes,
              "graphs": rows, "ok": all(r["ok"] for r in rows), "seconds": round(time.perf_counter() - started, 1)}
    if o.output is not None:
        from rkspeech.core.atomic import write_json

        write_json(o.output, report)
    return report
