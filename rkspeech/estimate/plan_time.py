"""Board time of a whole text-to-speech plan (``rkspeech estimate --plan``): every stage, overlapped.

No board here: every figure below is an estimate under the assumptions of :class:`PlanAssumptions`,
each with its source, all printed and written to the report.

Per stage, one call:

* **NPU stage** (impl ``rknn``: the .rknn and its build log beside it): the per-graph estimate of
  ``steptime`` (the compiler's layer table: compute and traffic per layer, summed; one core) plus
  a dispatch term, ``layers x layer_dispatch_us`` (the compute layers of the log's table).
* **CPU stage** (impl ``onnx``, onnxruntime on the A76 cores): the bytes the call reads over the
  memory bandwidth of the threads it runs with (``PlanAssumptions.cpu_bandwidth``: public RK3588
  STREAM, ~12 GB/s for one A76 core, ~20 GB/s for four, 2-3 interpolated; the threads are the
  caller's ``--threads``, else the plan stage's ``threads``, else the runtime's 2), or its MACs
  over those threads' share of the 4 cores' arithmetic peak, whichever is longer:
  bytes = every initializer a node reads (MatMul / Gemm / Conv weights at their stored precision:
  fp32, int8 + scales and zero points, 4-bit blocks + scales; embedding tables read by ``Gather``
  are not counted: a call reads one row) + the KV cache inputs (``cache*``) x ``cache_passes``
  (a flat cache is split into layers inside the graph: read, written, read again).  The weight
  precision is read from the file (``MatMulNBits`` -> int4, ``MatMulInteger`` -> int8), the plan's
  ``quantization`` / ``placement`` record is reported beside it.

Per audio second: frames per second from the vocoder's contract (``sample_rate /
samples_per_token``: 12.5 for the 12 Hz codec); the talker's decode one call a frame, its prefill
``ceil(prompt_tokens / B)`` calls once per utterance; the code predictor ``capacity`` calls a frame
(its step contract: one per codebook) or 1 (the frame graph); the vocoder's main step one call per
B frames, its first step once per utterance.

The pipeline: the CPU stages share the cores and add up; the NPU stages share the NPU and add up;
the two units run at once (the NPU vocodes while the CPU generates), so the steady-state time per
audio second is ``max(CPU sum, NPU sum, DDR floor)``, where the DDR floor is every unit's bytes
per audio second over the shared DDR bandwidth (the NPU's traffic is its layer table's reads +
writes).  Time to first audio: the prefill, then the frames of the first vocoder step (its B),
one talker decode, one code predictor frame and the host heads each, then that vocoder step.
The host loop's heads (the plan's ``build.host_heads``: fp32 numpy matrices read once a frame)
are a CPU stage of their own.  Not modelled: the rest of the host's work (sampling, embeddings),
CPU/NPU synchronisation, caches (the weights of these stages do not fit any).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, replace
from typing import Any

from rkspeech.core.errors import RkspeechError
from rkspeech.estimate.assumptions import NPU_BOARD_FACTOR, SOURCES, PlanAssumptions
from rkspeech.estimate.calls import CpuCall, NpuCall
from rkspeech.estimate.plan_inputs import StageInput, plan_inputs


# ---- per call ---------------------------------------------------------------------------------
#: the cores the CPU peaks (cpu_fp32_gflops, cpu_int8_gops) are for: RK3588's 4 A76
PEAK_CORES = 4


def cpu_call_ms(c: CpuCall, a: PlanAssumptions, cache_fraction: float = 1.0,
                threads: int | None = None) -> tuple[float, float, float, float]:
    """(ms, memory ms, compute ms, bytes) of one CPU call run with ``threads`` (None: the
    runtime's default, ``PlanAssumptions.stage_threads``)."""
    threads = threads or a.stage_threads(None)
    nbytes = c.weight_bytes + c.cache_bytes * c.cache_passes * cache_fraction
    mem = nbytes / (a.cpu_bandwidth(threads)[0] * 1e9) * 1e3
    rate = (a.cpu_int8_gops if c.int8_compute else a.cpu_fp32_gflops) * 1e9 * min(threads, PEAK_CORES) / PEAK_CORES
    comp = 2 * c.macs / rate * 1e3
    return max(mem, comp), mem, comp, nbytes


def npu_call_ms(c: NpuCall, a: PlanAssumptions) -> float:
    return c.est_ms + c.layers * a.layer_dispatch_us / 1e3


def _vocoder_rates(stages: list[StageInput], fps: float, a: PlanAssumptions) -> None:
    first = next((s for s in stages if s.name == "vocoder first"), None)
    main = next((s for s in stages if s.name == "vocoder main"), None)
    frames = fps * a.utterance_s
    if main is not None:
        done_first = first.B if first is not None else 0
        main.per_utterance = 0.0
        main.per_frame = max(frames - done_first, 0.0) / frames / main.B
        main.note = f"one call per B={main.B} frames" + (f" after the first {done_first}" if first else "")
    if first is not None:
        first.per_utterance = 1.0
        first.note = f"once per utterance (its B={first.B} frames)"
    small = next((s for s in stages if s.name == "vocoder small steps"), None)
    if small is not None:
        small.per_utterance = 0.0
        small.per_frame = max(frames - small.B, 0.0) / frames / small.B
        small.note = f"speak: the first graph again, one call per B={small.B} frames after the first"


def estimate_stages(stages: list[StageInput], fps: float, a: PlanAssumptions,
                    frames_source: str = "") -> dict[str, Any]:
    """Per stage ms a call, calls and ms per audio second; the pipeline's steady state, real-time
    factor, limiting stage and time to first audio."""
    a = a.check()
    _vocoder_rates(stages, fps, a)
    frames_utt = fps * a.utterance_s
    rows = []
    by_name = {}
    for s in stages:
        calls = (s.per_frame * fps + s.per_utterance / a.utterance_s) * s.copies
        r: dict[str, Any] = {"stage": s.name, "unit": s.unit, "impl": s.impl, "calls_per_audio_s": calls,
                             "calls_note": s.note}
        if isinstance(s.call, NpuCall):
            ms = npu_call_ms(s.call, a)
            r.update(ms_per_call=ms, layer_table_ms=s.call.est_ms, layers=s.call.layers,
                     dispatch_ms=s.call.layers * a.layer_dispatch_us / 1e3, bytes_per_call=s.call.traffic_bytes,
                     variant="fp16 (or as built)", source=s.call.source)
        else:
            frac = 1.0
            cap = s.cache_capacity
            if a.kv_read == "position" and cap:
                mean_pos = min(a.prompt_tokens + frames_utt / 2, cap)
                frac = mean_pos / cap
            threads = a.stage_threads(s.threads, at_least=s.min_threads, fixed=s.fixed_threads)
            gbps, how = a.cpu_bandwidth(threads)
            ms, mem, comp, nbytes = cpu_call_ms(s.call, a, frac, threads)
            r.update(ms_per_call=ms, memory_ms=mem, compute_ms=comp, bytes_per_call=nbytes,
                     threads=threads, cpu_gbps=gbps, cpu_gbps_how=how,
                     weight_bytes=s.call.weight_bytes, cache_bytes=s.call.cache_bytes * s.call.cache_passes * frac,
                     bound="memory" if mem >= comp else "compute", variant=s.call.variant, source=s.call.source,
                     detail=s.call.detail)
        r["ms_per_audio_s"] = r["ms_per_call"] * calls
        r["bytes_per_audio_s"] = r["bytes_per_call"] * calls
        rows.append(r)
        by_name[s.name] = r
    units = {}
    for u in ("cpu", "npu"):
        us = [r for r in rows if r["unit"] == u]
        if us:
            units[u] = {"ms_per_audio_s": sum(r["ms_per_audio_s"] for r in us),
                        "stages": [r["stage"] for r in us]}
    total_bytes = sum(r["bytes_per_audio_s"] for r in rows)
    ddr_ms = total_bytes / (a.ddr_shared_gbps * 1e9) * 1e3
    candidates = {f"{u} ({', '.join(v['stages'])})": v["ms_per_audio_s"] for u, v in units.items()}
    candidates["shared DDR bandwidth"] = ddr_ms
    limit_unit = max(candidates, key=candidates.get) if rows else None
    steady = max(candidates.values()) if rows else 0.0
    if limit_unit and not limit_unit.startswith("shared"):
        u = limit_unit.split(" ", 1)[0]
        limit_stage = max((r for r in rows if r["unit"] == u), key=lambda r: r["ms_per_audio_s"])["stage"]
    else:
        limit_stage = "shared DDR bandwidth" if rows else None
    # time to first audio
    ttfa: dict[str, Any] = {}
    pre = by_name.get("talker prefill")
    dec = by_name.get("talker decode")
    cp = by_name.get("code predictor")
    voc = by_name.get("vocoder first") or by_name.get("vocoder main")
    first_B = next((s.B for s in stages if s.name == (voc["stage"] if voc else "")), None)
    if voc is not None:
        heads = by_name.get("host heads")
        per_frame_gen = (dec["ms_per_call"] if dec else 0.0) + (heads["ms_per_call"] if heads else 0.0) + sum(
            by_name[s.name]["ms_per_call"] * s.per_frame for s in stages
            if s.name.startswith("code predictor") and s.name in by_name)
        prefill_ms = pre["ms_per_call"] * math.ceil(a.prompt_tokens / next(
            s.positions for s in stages if s.name == "talker prefill")) if pre else 0.0
        ttfa = {"prefill_ms": prefill_ms, "frames": first_B, "per_frame_ms": per_frame_gen,
                "frames_ms": per_frame_gen * first_B, "vocoder_step_ms": voc["ms_per_call"],
                "vocoder_stage": voc["stage"]}
        ttfa["ms"] = ttfa["prefill_ms"] + ttfa["frames_ms"] + ttfa["vocoder_step_ms"]
        if not (pre and dec and cp):
            ttfa["note"] = "stages absent from the plan count 0"
    cpu_rows = [r for r in rows if r["unit"] == "cpu"]
    notes = [f"frames per audio second: {fps:g} ({frames_source or 'given'})"]
    if cpu_rows:
        per_stage = "; ".join(f"{r['stage']} {r['threads']} thread(s) -> {r['cpu_gbps']:.1f} GB/s "
                              f"({r['cpu_gbps_how']})" for r in cpu_rows)
        notes.append(f"CPU bandwidth per stage: {per_stage} [{SOURCES['cpu_gbps'].split(';')[0]}]")
    notes += [
             "CPU stages add up (same cores); NPU stages add up (one NPU); the two overlap: steady state = "
             "max(CPU, NPU, DDR floor)",
             f"DDR floor: every stage's bytes per audio second ({total_bytes / 1e9:.2f} GB) over the shared "
             f"{a.ddr_shared_gbps:g} GB/s"]
    return {
        "assumptions": asdict(a),
        "assumption_table": [{"name": n, "value": v, "source": s} for n, v, s in a.table()],
        "frames_per_audio_s": fps,
        "stages": rows,
        "units": units,
        "ddr_floor_ms_per_audio_s": ddr_ms,
        "bytes_per_audio_s": total_bytes,
        "steady_ms_per_audio_s": steady,
        "rtf": steady / 1000.0,
        "limiting_unit": limit_unit,
        "limiting_stage": limit_stage,
        "time_to_first_audio": ttfa,
        "notes": notes,
    }


def sensitivity(stages: list[StageInput], fps: float, a: PlanAssumptions, factor: float = 1.2) -> list[dict]:
    """The real-time factor with each assumption made ``factor`` x worse (rates / factor, costs x
    factor), most sensitive first.  The NPU clock, efficiency and DDR figure are inside the layer
    table's ms: they are one entry, those ms x factor (an upper bound for any one of them)."""
    base = estimate_stages(stages, fps, a)["rtf"]
    worse = {"cpu_gbps": 1 / factor, "ddr_shared_gbps": 1 / factor, "cpu_int8_gops": 1 / factor,
             "cpu_fp32_gflops": 1 / factor, "layer_dispatch_us": factor}
    def worse_a(name: str, f: float) -> PlanAssumptions:
        if name == "cpu_gbps" and a.cpu_gbps is None:  # the per-thread figures, each worse
            return replace(a, cpu_gbps_by_threads=tuple((n, g * f) for n, g in a.cpu_gbps_by_threads))
        return replace(a, **{name: getattr(a, name) * f})

    cases = [(name, [replace(s) for s in stages], worse_a(name, f)) for name, f in worse.items()]
    cases.append(("cache_passes_flat",
                  [replace(s, call=replace(s.call, cache_passes=s.call.cache_passes * factor))
                   if isinstance(s.call, CpuCall) and s.call.cache_passes > 1 else s for s in stages], a))
    cases.append(("npu layer-table ms (npu_mhz, npu_efficiency, npu_ddr_gbps)",
                  [replace(s, call=replace(s.call, est_ms=s.call.est_ms * factor))
                   if isinstance(s.call, NpuCall) else s for s in stages], a))
    out = []
    for name, st, b in cases:
        rtf = estimate_stages(st, fps, b)["rtf"]
        out.append({"assumption": name, "factor": factor, "rtf": rtf, "change": rtf / base - 1 if base else 0.0})
    return sorted(out, key=lambda r: -abs(r["change"]))


def npu_factor_check(stages: list[StageInput], fps: float, a: PlanAssumptions,
                     factor: float = NPU_BOARD_FACTOR) -> dict[str, Any]:
    """The same plan with every NPU layer-table ms x ``factor`` (the Whisper calibration of
    docs/estimate.md; dispatch unchanged): what the estimate says if the board misses the
    compiler's ideal as the one calibration point did."""
    st = [replace(s, call=replace(s.call, est_ms=s.call.est_ms * factor)) if isinstance(s.call, NpuCall) else s
          for s in stages]
    rep = estimate_stages(st, fps, a)
    return {"factor": factor, "rtf": rep["rtf"], "limiting_stage": rep["limiting_stage"],
            "units": {u: v["ms_per_audio_s"] for u, v in rep["units"].items()},
            "source": "docs/estimate.md calibration: Whisper base encoder 104.9 ms estimated vs 703 ms public (6.7x)"}


def speak_schedule(stages: list[StageInput], fps: float, a: PlanAssumptions) -> dict[str, Any] | None:
    """The plan as ``speak`` runs its vocoder when it has a first (small) graph: small steps after
    the first one too (``StreamingVocoder`` eager, fed frame by frame), the main graph unused; None
    without a first graph.  The main rows above are what ``decode`` (whole codes) runs."""
    first = next((s for s in stages if s.name == "vocoder first"), None)
    if first is None or not any(s.name == "vocoder main" for s in stages):
        return None
    small = replace(first, name="vocoder small steps")
    st = [s for s in stages if s.name not in ("vocoder first", "vocoder main")] + [first, small]
    rep = estimate_stages(st, fps, a)
    row = next(r for r in rep["stages"] if r["stage"] == "vocoder small steps")
    return {"rtf": rep["rtf"], "limiting_stage": rep["limiting_stage"],
            "units": {u: v["ms_per_audio_s"] for u, v in rep["units"].items()},
            "vocoder_ms_per_audio_s": row["ms_per_audio_s"] + next(
                r["ms_per_audio_s"] for r in rep["stages"] if r["stage"] == "vocoder first"),
            "ddr_floor_ms_per_audio_s": rep["ddr_floor_ms_per_audio_s"]}


def estimate_plan(plan_path: str | os.PathLike, a: PlanAssumptions | None = None,
                  streams=None) -> dict[str, Any]:
    """The whole report for ``plan.json``; ``streams``: stream counts to price at once as well
    (``estimate.streams``, the report's ``streams``)."""
    a = (a or PlanAssumptions()).check()
    stages, info = plan_inputs(plan_path, a)
    if not stages:
        raise RkspeechError(f"plan {plan_path}: no stage to estimate (no vocoder graphs and no talker / "
                            "code predictor sections)")
    rep = estimate_stages(stages, info["frames_per_s"], a, info["frames_source"])
    rep["plan"] = info["plan"]
    rep["target"] = info["target"]
    rep["tts_stages"] = info["tts_stages"]
    if a.chip != "rk3588":
        info["notes"].append(f"{a.chip}: the CPU, DDR and dispatch defaults are RK3588 figures (no {a.chip} figure "
                             "is sourced here); pass --a76-gbps, --shared-ddr-gbps and --dispatch-us for it")
    rep["notes"] = info["notes"] + rep["notes"]
    rep["sensitivity"] = sensitivity(stages, info["frames_per_s"], a)
    rep["npu_board_factor_check"] = npu_factor_check(stages, info["frames_per_s"], a)
    rep["speak_schedule"] = speak_schedule(stages, info["frames_per_s"], a)
    rep["peers"] = PEERS
    if streams:
        from rkspeech.estimate.streams import estimate_streams

        rep["streams"] = estimate_streams(stages, info["frames_per_s"], a, sorted(set(streams)), info["lanes"])
    return rep


#: Public measured figures the estimate is read beside (theirs, not ours).
PEERS = {
    "rtf_best_public_rk3588": {"value": 2.0, "source": "MasterVVK/qwen3-tts-axera-russian docs/BENCHMARKS.md: "
                                                       "all CPU, 4-bit talker + 4-bit code predictor, fp32 vocoder"},
    "talker_4bit_ms_per_step": {"value": 30.0, "source": "same: llama.cpp Q4_K_M talker on the A76 cores"},
    "code_predictor_4bit_ms_per_frame": {"value": 55.0, "source": "same: GGML Q4_0 code predictor on the A76 cores"},
}


def _g(v: float) -> str:
    return f"{v:.1f}" if v >= 1 else f"{v:.3g}"


def peer_check(rep: dict[str, Any]) -> list[tuple[str, str]]:
    """Our CPU int4 stages beside the public per-step figures (only for CPU stages)."""
    rows = []
    by = {r["stage"]: r for r in rep["stages"]}
    d = by.get("talker decode")
    if d and d["unit"] == "cpu":
        rows.append(("talker decode, ms a step", f"ours {_g(d['ms_per_call'])} ({d['variant']}) vs public "
                     f"~{PEERS['talker_4bit_ms_per_step']['value']:g} (4-bit, A76)"))
    cp = by.get("code predictor")
    if cp and cp["unit"] == "cpu":  # with its start graph's call, when it has one
        per_frame = sum(r["ms_per_call"] * r["calls_per_audio_s"] for r in rep["stages"]
                        if r["stage"].startswith("code predictor")) / rep["frames_per_audio_s"]
        rows.append(("code predictor, ms a frame", f"ours {_g(per_frame)} ({cp['variant']}) vs public "
                     f"~{PEERS['code_predictor_4bit_ms_per_frame']['value']:g} (4-bit, A76)"))
    rows.append(("real-time factor", f"ours {rep['rtf']:.2f} (estimate) vs public best on RK3588 "
                 f"{PEERS['rtf_best_public_rk3588']['value']:g} (measured; MasterVVK/qwen3-tts-axera-russian)"))
    return rows
