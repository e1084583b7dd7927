"""Where the accuracy gate's time goes, one utterance at a time and in lanes, on a built plan.

    .venv/bin/python benchmarks/bench_gate_cost.py --build-dir OUT [--texts 20] [--frames 48]
        [--modes one,lanes] [--repeat 1] [--threads N] [--out R.json]

``OUT`` is a ``build qwen3-tts`` folder with CPU-placed talker and code predictor (built with
``--gate off`` or ``warn``: it needs its plan.json, for the code predictor's heads and start graph);
the gate runs as the build runs it (``pipelines.stage_gate.check_cpu_stages``, its resumable stage
in a temporary folder, forced) over the first ``--texts`` gate texts, ``--frames`` frames at most,
once per mode: ``one`` (the placed graphs, one utterance at a time), ``lanes`` (every utterance
at once, ``pipelines.gate_lanes``).  Prints per mode the parts' seconds (the lane graphs'
export, the fp32 reference, each stage's teacher-forced and free-running parts), the seconds per
reference frame, the stages' call seconds of the reference's generations, the load average
before and after, and whether the figures (agreement, SNR, stops, codes) are the same in both
modes.  Medians over ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def figures(report: dict) -> dict:
    """What the gate judges and records per stage, for the comparison between modes."""
    out = {"reference_frames": report["reference_frames"], "stopped_reference": report["stopped_reference"]}
    for name, st in report["stages"].items():
        tf, free = st["teacher_forced"], st["free_running"]
        out[name] = {"agreement": tf["agreement"], "logit_snr_db": tf["logit_snr_db"],
                     "margin_median": (tf.get("margin") or {}).get("median"), "same_stop": free["same_stop"],
                     "identical_utterances": free["identical_utterances"], "codes_equal": free["codes_equal"],
                     "first_diverging_frame": free["first_diverging_frame"], "failures": st["failures"]}
    return out


def parts(report: dict) -> dict:
    t = report["timing"]
    out = {"lane_graphs_s": t.get("lane_graphs_s", 0.0), "reference_s": t["reference_s"]}
    for name, st in report["stages"].items():
        out[f"{name}_teacher_forced_s"] = st["timing"]["teacher_forced_s"]
        out[f"{name}_free_running_s"] = st["timing"]["free_running_s"]
    out["total_s"] = report["seconds"]
    out["reference_talker_calls_s"], out["reference_code_predictor_calls_s"] = t["talker_s"], t["code_predictor_s"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True, type=Path)
    ap.add_argument("--texts", type=int, default=20)
    ap.add_argument("--frames", type=int, default=48)
    ap.add_argument("--modes", default="one,lanes")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    from rkspeech.accuracy.gate import GATE_TEXTS
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.stage_gate import check_cpu_stages, gate_inputs
    from rkspeech.pipelines.resumable import StageRunner

    inputs = gate_inputs(args.build_dir)
    files = resolve_model_root(inputs["model_dir"])
    model = LazyTTSModel(files)
    texts = GATE_TEXTS[:args.texts]
    runs: dict[str, list] = {}
    for rep in range(args.repeat):
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory(prefix="bench-gate-", dir=args.build_dir) as tmp:
                load0 = os.getloadavg()
                t0 = time.perf_counter()
                report = check_cpu_stages(StageRunner(Path(tmp), force=True), model, talker=inputs["talker"],
                                          code_predictor=inputs["code_predictor"],
                                          ckpt=[Path(files.config), Path(files.weights)], frames=args.frames,
                                          texts=texts, threads=args.threads, lanes=mode == "lanes",
                                          int4=inputs["int4"])
                wall = time.perf_counter() - t0
                load1 = os.getloadavg()
            row = {"mode": mode, "repeat": rep, "wall_s": round(wall, 2), **parts(report),
                   "per_reference_frame_s": round(report["timing"]["reference_s"] / max(report["reference_frames"], 1), 4),
                   "lanes": report["timing"].get("lanes"), "load": [round(load0[0], 2), round(load1[0], 2)],
                   "figures": figures(report)}
            runs.setdefault(mode, []).append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "figures"}), file=sys.stderr, flush=True)
    summary = {"texts": args.texts, "frames": args.frames, "build_dir": str(args.build_dir),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs, "medians": {}}
    keys = [k for k, v in next(iter(runs.values()))[0].items() if k.endswith("_s") or k == "per_reference_frame_s"]
    for mode, rows in runs.items():
        summary["medians"][mode] = {k: round(statistics.median(r.get(k, 0.0) for r in rows), 3) for k in keys}
    print(f"{'part':36s}" + "".join(f"{m:>12s}" for m in runs))
    for k in keys:
        print(f"{k:36s}" + "".join(f"{summary['medians'][m].get(k, 0.0):12.2f}" for m in runs))
    if {"one", "lanes"} <= set(runs):
        one, lanes = summary["medians"]["one"], summary["medians"]["lanes"]
        summary["speedup_total"] = round(one["total_s"] / lanes["total_s"], 2)
        same = runs["one"][0]["figures"] == runs["lanes"][0]["figures"]
        summary["figures_identical"] = same
        print(f"one / lanes, total: {summary['speedup_total']}x; figures identical: {same}")
        if not same:
            print(json.dumps({m: runs[m][0]["figures"] for m in ("one", "lanes")}, indent=1))
    print("load average (1 min) before/after: " + "; ".join(f"{m} {[r['load'] for r in rows]}" for m, rows in runs.items()))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
