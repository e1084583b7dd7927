"""The whole-plan board estimate (``rkspeech.estimate.plan_time``) at the published size, from the
figures recorded in docs/ (no published conversion here; no board).

    .venv/bin/python benchmarks/bench_estimate_plan.py [--out docs/bench_estimate_plan.json]

Plans priced (Qwen3-TTS 0.6B custom-voice at the published config, synthetic weights):

* ``all-npu fp16``: talker prefill B=32 + decode B=1 (capacity 512), code predictor step (16 calls a
  frame), vocoder npu step B=16 (phase Snake) on the NPU; with dispatch 0 it must reproduce the
  budget of docs/tts-build.md (~3,700 ms per audio second);
* ``cpu-int4 + npu vocoder`` (the issue's best placement), and cpu-int8 / cpu-fp32 beside it, plus
  the talker exported with per-layer cache inputs or the grouped k/v layout (docs/cpu-stages.md).

Every input below names the doc and table it comes from.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rkspeech.estimate.calls import CpuCall, NpuCall  # noqa: E402
from rkspeech.estimate.plan_inputs import StageInput  # noqa: E402
from rkspeech.estimate.plan_time import (  # noqa: E402
    PEERS,
    PlanAssumptions,
    estimate_stages,
    npu_factor_check,
    sensitivity,
)

FPS = 24000 / 1920  # the vocoder contract: 12.5 frames a second
MB = 2**20

# ---- recorded NPU figures (ideal layer-table estimate, 1 GHz, 17 GB/s, one core) ----------------
#: docs/tts-build.md "Published size" budget table: talker decode B=1, 28 layers, cap 512: 906 / 0
#: ops, 108.0 ms a call, 21.8 GB moved per audio second at 12.5 calls.
NPU_TALKER_DECODE = NpuCall(est_ms=108.0, layers=906, traffic_bytes=21.8e9 / 12.5,
                            source="docs/tts-build.md budget table (talker decode B=1, cap 512)")
#: docs/talker-step.md "Published prefill B=32, 28 layers": 911 / 0 ops, 1,537 MB RW a call vs the
#: decode's 1,406.2 MB: both weight-traffic bound, so its ms = the decode's x 1537 / 1406.2 (derived).
NPU_TALKER_PREFILL = NpuCall(est_ms=108.0 * 1537 / 1406.2, layers=911, traffic_bytes=21.8e9 / 12.5 * 1537 / 1406.2,
                             source="docs/talker-step.md (prefill B=32: 911 ops, RW 1,537 MB; ms scaled from decode)")
#: docs/tts-build.md: code predictor step, 170 / 0 ops, 10.92 ms a call x 200 calls, 35.2 GB / audio s.
NPU_CODE_PREDICTOR = NpuCall(est_ms=10.92, layers=170, traffic_bytes=35.2e9 / 200,
                             source="docs/tts-build.md budget table (code predictor step, fp16)")
#: docs/estimate.md part 3: phase Snake npu step B=16: 944 / 0 ops, 306.3 ms, 3,850 MB r+w a step.
NPU_VOCODER_B16 = NpuCall(est_ms=306.3, layers=944, traffic_bytes=3850 * MB,
                          source="docs/estimate.md part 3 (npu step B=16, phase Snake)")

# ---- recorded CPU figures (docs/cpu-stages.md, published step graphs) ----------------------------
#: ONNX bytes per variant: talker decode (28 layers, capacity 256), code predictor step (5 layers, 16).
TALKER_BYTES = {"fp32": 1_997_110_047, "int8": 502_076_681, "int4": 320_420_069}
CP_BYTES = {"fp32": 356_630_113, "int8": 89_659_292, "int4": 57_221_095}
#: docs/cpu-stages.md: the talker exported with the grouped k/v layout (8 cache heads), int4 b32: 283 MB
TALKER_INT4_GROUPED_BYTES = 283e6
#: MACs a position: the fp32 graphs' bytes / 4 (every weight is a MatMul weight used once)
TALKER_MACS, CP_MACS = TALKER_BYTES["fp32"] / 4, CP_BYTES["fp32"] / 4
#: KV cache inputs, fp32: talker [2 x 28, 16 heads, 256, 128]; code predictor [2 x 5, 16, 16, 128]
TALKER_CACHE = 2 * 28 * 16 * 256 * 128 * 4
TALKER_CACHE_GROUPED = 2 * 28 * 8 * 256 * 128 * 4
CP_CACHE = 2 * 5 * 16 * 16 * 128 * 4


def cpu(bytes_, cache, macs, variant, passes, source):
    return CpuCall(weight_bytes=bytes_, cache_bytes=cache, cache_passes=passes, macs=macs,
                   int8_compute=variant in ("int8", "int4"), variant=variant, source=source)


def cpu_plan(variant: str, a: PlanAssumptions, talker_export: str = "flat") -> list[StageInput]:
    """talker + code predictor on the CPU in ``variant``, the vocoder npu B=16 (no first step:
    the published build had --first-length 0)."""
    tb, cache, passes = TALKER_BYTES[variant], TALKER_CACHE, a.cache_passes_flat
    if talker_export == "layers":
        passes = 1.0
    elif talker_export == "grouped":
        tb, cache, passes = TALKER_INT4_GROUPED_BYTES, TALKER_CACHE_GROUPED, 1.0
    src = f"docs/cpu-stages.md published {variant}"
    return [
        StageInput("talker prefill", cpu(tb, cache, TALKER_MACS * 32, variant, passes, src), positions=32,
                   per_utterance=-(-a.prompt_tokens // 32), impl="onnx", note="prefill B=32"),
        StageInput("talker decode", cpu(tb, cache, TALKER_MACS, variant, passes, src), per_frame=1.0, impl="onnx",
                   cache_capacity=256, note="one call a frame"),
        StageInput("code predictor", cpu(CP_BYTES[variant], CP_CACHE, CP_MACS, variant, a.cache_passes_flat, src),
                   per_frame=16.0, impl="onnx", note="step form: 16 calls a frame"),
        StageInput("vocoder main", NPU_VOCODER_B16, impl="rknn", B=16),
    ]


def npu_plan(a: PlanAssumptions) -> list[StageInput]:
    return [
        StageInput("talker prefill", NPU_TALKER_PREFILL, positions=32, per_utterance=-(-a.prompt_tokens // 32),
                   impl="rknn", note="prefill B=32"),
        StageInput("talker decode", NPU_TALKER_DECODE, per_frame=1.0, impl="rknn"),
        StageInput("code predictor", NPU_CODE_PREDICTOR, per_frame=16.0, impl="rknn"),
        StageInput("vocoder main", NPU_VOCODER_B16, impl="rknn", B=16),
    ]


def summarize(name: str, stages, a: PlanAssumptions) -> dict:
    rep = estimate_stages(stages, FPS, a, "vocoder contract 24000 / 1920")
    rep["name"] = name
    rep["sensitivity"] = sensitivity(stages, FPS, a)
    rep["npu_board_factor_check"] = npu_factor_check(stages, FPS, a)
    return rep


def run(a: PlanAssumptions) -> list[dict]:
    out = [summarize("all-npu fp16, no dispatch (the docs/tts-build.md budget check)", npu_plan(a),
                     replace(a, layer_dispatch_us=0.0)),
           summarize("all-npu fp16", npu_plan(a), a)]
    for v in ("int4", "int8", "fp32"):
        out.append(summarize(f"cpu-{v} talker + code predictor, npu vocoder", cpu_plan(v, a), a))
    out.append(summarize("cpu-int4, talker with per-layer cache inputs", cpu_plan("int4", a, "layers"), a))
    out.append(summarize("cpu-int4, talker grouped k/v + per-layer cache", cpu_plan("int4", a, "grouped"), a))
    out.append(summarize("cpu-int4, kv_read=position", cpu_plan("int4", a), replace(a, kv_read="position")))
    return out


#: the stream counts the batched estimate prices (issue 55)
STREAM_COUNTS = (1, 2, 4, 8)


def streams_tables(a: PlanAssumptions) -> dict:
    """``estimate.streams`` for the grouped-k/v CPU export in int4 and int8 (int8's bytes: the
    recorded int8 graph, whose cache is priced grouped as the CPU export has it): N streams at once
    over lanes graphs for 8, the vocoder on the NPU per stream."""
    from rkspeech.estimate.streams import estimate_streams

    out = {}
    for v in ("int4", "int8"):
        st = cpu_plan("int4", a, "grouped") if v == "int4" else [
            replace(x, call=replace(x.call, cache_bytes=TALKER_CACHE_GROUPED, cache_passes=1.0))
            if x.name.startswith("talker") else x for x in cpu_plan("int8", a)]
        out[f"cpu-{v}"] = estimate_streams(st, FPS, a, STREAM_COUNTS, plan_lanes=max(STREAM_COUNTS))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the JSON here")
    args = ap.parse_args(argv)
    a = PlanAssumptions().check()
    reps = run(a)
    streams = streams_tables(a)
    print(f"{'plan':58} {'CPU':>8} {'NPU':>8} {'DDR':>8} {'RTF':>6} {'TTFA ms':>8}  limited by"
          "   | NPU x6.7: RTF, limited by")
    for r in reps:
        u = r["units"]
        print(f"{r['name'][:58]:58} {u.get('cpu', {}).get('ms_per_audio_s', 0):8.0f} "
              f"{u.get('npu', {}).get('ms_per_audio_s', 0):8.0f} {r['ddr_floor_ms_per_audio_s']:8.0f} "
              f"{r['rtf']:6.3f} {r['time_to_first_audio']['ms']:8.0f}  {r['limiting_stage']}"
              f"   | {r['npu_board_factor_check']['rtf']:.3f}, {r['npu_board_factor_check']['limiting_stage']}")
    for r in reps[:3]:
        print(f"\n{r['name']}")
        for s in r["stages"]:
            print(f"  {s['stage']:16} {s['unit']} {s['ms_per_call']:9.2f} ms x {s['calls_per_audio_s']:7.3f} "
                  f"= {s['ms_per_audio_s']:8.1f} ms / audio s  ({s['bytes_per_call'] / 1e6:,.0f} MB a call)")
        print("  most sensitive: " + ", ".join(f"{x['assumption']} {100 * x['change']:+.0f} %"
                                               for x in r["sensitivity"][:3]))
    for name, st in streams.items():
        print(f"\n{name} talker + code predictor, npu vocoder: N streams at once (lanes graphs)")
        for r in st["rows"]:
            print(f"  N={r['streams']}: RTF per stream {r['rtf_per_stream']:.3f}, {r['audio_s_per_s']:.2f} audio s per s "
                  f"({r['gain_vs_one']:.2f}x one), first audio {r['first_audio_ms']:.0f} ms, limited by "
                  f"{r['limiting_stage']}")
        print(f"  more streams stop adding audio from: {st['saturates_at']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"plans": reps, "peers": PEERS, "streams": streams}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
