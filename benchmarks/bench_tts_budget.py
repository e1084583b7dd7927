"""The real-time budget of text to speech on the NPU, from the compiler's own figures (issue #13, part 4).

    .venv/bin/python benchmarks/bench_tts_budget.py --plan OUT/plan.json \\
        ["--graph=code_predictor step=OTHER.rknn"] [--graph vocoder=PUBLISHED_B16.rknn] \\
        [--board-factor 6.7] [--out budget.json]

Per second of audio the talker decodes one position per frame, the code predictor runs its step
graph once per position (16 a frame; the frame form: one unrolled graph per frame), and the
vocoder runs one step per B frames: at 12.5 frames/s that is 12.5 + 200 (or 12.5) + 12.5/B NPU calls.  Each graph's time per call is
``rkspeech estimate``'s (the layer table of the graph's build log, default assumptions of
docs/estimate.md: 1 GHz, 17 GB/s, compute and traffic overlapped, one core); ``--board-factor K``
adds the estimate with every NPU layer K times slower (the Whisper base calibration in
docs/estimate.md found a loaded board 6.7x slower than the ideal model).  The budget:

* serial on one core, real time needs the sum over graphs of calls x ms to stay under 1000 ms per
  audio second; "budget per call" scales each graph's estimate by 1000 / that sum (keeping
  their proportions): what each call must cost on a board;
* one graph per core (RK3588 has three): each graph alone must stay under 1000 ms per audio second,
  i.e. 1000 / calls per call.

Graphs of a plan that have no .rknn (a talker built with ``--skip-talker-rknn``, meant for RKLLM
on a board) are listed without an estimate.  No board was used: these are the compiler's figures.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def plan_graphs(plan_path: Path) -> tuple[float, dict[str, dict]]:
    """``(frames per audio second, {graph: {"rknn": path|None, "calls_per_frame": x}})``."""
    from rkspeech.plan.plan import load_plan

    plan = load_plan(plan_path, backend="ort")
    c = plan.contract
    fps = c.sample_rate / c.samples_per_token
    graphs: dict[str, dict] = {}
    talker = plan.stages.get("talker")
    if talker is not None:
        graphs["talker decode"] = {"rknn": talker.artifacts["decode"].get("rknn"), "calls_per_frame": 1.0}
    cp = plan.stages.get("code_predictor")
    if cp is not None:  # the step form runs once per position (capacity = G positions), the frame form once
        (role, files), = cp.artifacts.items()
        calls = float(cp.contract["capacity"]) if role == "step" else 1.0
        graphs[f"code_predictor {role}"] = {"rknn": files.get("rknn"), "calls_per_frame": calls}
    graphs["vocoder"] = {"rknn": plan.rknn.get("main"), "calls_per_frame": 1.0 / c.codes_length}
    return fps, graphs


def graph_row(name: str, rknn, calls_per_s: float, factor: float | None) -> dict:
    from rkspeech.core.errors import RkspeechError
    from rkspeech.estimate.steptime import estimate_path, with_assumptions

    row = {"graph": name, "rknn": str(rknn) if rknn else None, "calls_per_audio_s": round(calls_per_s, 3)}
    if not rknn:
        row["note"] = "no .rknn (host / RKLLM on a board)"
        return row
    try:
        est = estimate_path(rknn)
    except RkspeechError as exc:
        row["note"] = str(exc)
        return row
    rep = est.to_report()
    row.update({"model": rep["model"], "cpu_ops": rep["cpu_ops"], "regtask_lines": rep["regtask_lines"],
                "traffic_mb": rep["traffic_mb"], "ms_per_call": rep["est_step_ms"],
                "ms_per_audio_s": round(rep["est_step_ms"] * calls_per_s, 2),
                "traffic_mb_per_audio_s": round(rep["traffic_mb"] * calls_per_s, 1)})
    if factor:
        a = est.assumptions
        slow = with_assumptions(est, npu_mhz=a.npu_mhz / factor, ddr_gbps=a.ddr_gbps / factor)
        row["ms_per_call_board"] = round(slow.est_step_ms, 3)
        row["ms_per_audio_s_board"] = round(slow.est_step_ms * calls_per_s, 2)
    return row


def budget(rows: list[dict], key: str) -> None:
    total = sum(r.get(key, 0.0) for r in rows)
    for r in rows:
        if key not in r:
            continue
        scale = 1000.0 / total if total else 0.0
        r[f"share_{key}"] = round(r[key] / total, 4) if total else None
        r[f"budget_ms_per_call_serial_{key}"] = round(r[key.replace("audio_s", "call")] * scale, 3) if total else None
    for r in rows:
        r["budget_ms_per_call_own_core"] = round(1000.0 / r["calls_per_audio_s"], 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", type=Path, help="plan.json from rkspeech build qwen3-tts")
    ap.add_argument("--graph", action="append", default=[],
                    help="NAME=FILE.rknn: use this .rknn for a graph (talker decode, code_predictor frame, "
                         "code_predictor step, vocoder)")
    ap.add_argument("--code-groups", type=int, default=16, help="code predictor step calls per frame when no plan")
    ap.add_argument("--frames-per-s", type=float, default=12.5, help="frames per audio second when no plan")
    ap.add_argument("--vocoder-B", type=int, default=None, help="vocoder tokens per step when no plan")
    ap.add_argument("--board-factor", type=float, default=6.7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    fps, graphs = plan_graphs(args.plan) if args.plan else (args.frames_per_s, {})
    for item in args.graph:
        name, _, path = item.partition("=")
        if not path:
            ap.error(f"--graph wants NAME=FILE.rknn, got {item!r}")
        if name not in graphs:
            per_frame = 1.0 / args.vocoder_B if name == "vocoder" and args.vocoder_B else 1.0
            if name == "code_predictor step":
                per_frame = float(args.code_groups)
            graphs[name] = {"calls_per_frame": per_frame}
        graphs[name]["rknn"] = Path(path)
    rows = [graph_row(n, g.get("rknn"), fps * g["calls_per_frame"], args.board_factor) for n, g in graphs.items()]
    budget(rows, "ms_per_audio_s")
    if args.board_factor:
        budget(rows, "ms_per_audio_s_board")
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "uptime": uptime, "frames_per_audio_s": fps, "board_factor": args.board_factor, "graphs": rows,
              "total_ms_per_audio_s": round(sum(r.get("ms_per_audio_s", 0) for r in rows), 2),
              "total_ms_per_audio_s_board": round(sum(r.get("ms_per_audio_s_board", 0) for r in rows), 2)}
    print(f"{'graph':<20} {'calls/s':>7} {'ms/call':>9} {'ms/audio s':>10} {'x board':>10} "
          f"{'MB/audio s':>10} {'budget/call':>11} {'own core':>9}")
    for r in rows:
        if "ms_per_call" not in r:
            print(f"{r['graph']:<20} {r['calls_per_audio_s']:>7.2f}  {r.get('note', '')}")
            continue
        print(f"{r['graph']:<20} {r['calls_per_audio_s']:>7.2f} {r['ms_per_call']:>9.2f} {r['ms_per_audio_s']:>10.1f} "
              f"{r.get('ms_per_audio_s_board', float('nan')):>10.1f} {r['traffic_mb_per_audio_s']:>10.1f} "
              f"{r.get('budget_ms_per_call_serial_ms_per_audio_s', float('nan')):>11.2f} "
              f"{r['budget_ms_per_call_own_core']:>9.1f}")
    print(f"sum: {result['total_ms_per_audio_s']:.1f} ms per audio second (ideal), "
          f"{result['total_ms_per_audio_s_board']:.1f} ms x{args.board_factor:g}; real time needs < 1000 on one core")
    print(f"({uptime})")
    if args.out:
        from rkspeech.core.atomic import write_json

        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
