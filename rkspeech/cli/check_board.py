"""``rkspeech check-board --plan plan.json [--backend rknnlite|sim|ort] [--core-mask M] [-o report.json]``:
replay every graph's golden steps, compare with the simulator's outputs, time each call next to
the board estimate (``rkspeech.board.check``).  Exit 0 when every graph passes, 1 when one
differs (its line names the graph and the step), 2 on a user mistake (a damaged file included).
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import CORE_MASKS
from rkspeech.runtime.runners import BACKENDS


def register(subparsers) -> None:
    p = subparsers.add_parser("check-board", help="replay each graph's golden steps on this machine's runtime: "
                                                  "outputs vs the simulator's, call times vs the estimate")
    f = Flags(p, "check-board")
    f.add(INPUT, "--plan", required=True, help="plan.json of a build (qwen3-tts, qwen3-tts-vocoder, whisper-encoder)")
    f.add(OUTPUT, "-o", "--output", writes="file", default=None, help="write the JSON report here (attach it to an issue)")
    f.add(NPU, "--backend", choices=BACKENDS, default="rknnlite",
          help="rknnlite = the .rknn on this board's NPU (default); sim = rknn-toolkit2 simulator (builds "
               "from the ONNX: one conversion per graph); ort = onnxruntime on the ONNX")
    f.add(NPU, "--core-mask", default="auto", choices=CORE_MASKS, help="rknnlite NPU core(s): " + ", ".join(CORE_MASKS))
    f.add(NPU, "--target", default=None, help="chip the simulator builds for (default: the plan's)")
    f.add(ADVANCED, "--repeats", type=int, default=5,
          help="replays of the golden steps that are timed (the first is also compared; default 5)")
    f.threads(ADVANCED, "onnxruntime (intra-op)")
    p.set_defaults(func=run)


def _fmt(v, nd=2) -> str:
    return "-" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def run(args: argparse.Namespace) -> int:
    import math
    import sys

    from rkspeech.board.check import CheckBoardOptions, check_board, snr_text
    from rkspeech.core.compare import db_value
    from rkspeech.core.reporting import print_table

    rep = check_board(CheckBoardOptions(plan=args.plan, backend=args.backend, core_mask=args.core_mask,
                                        target=args.target, threads=args.threads, repeats=args.repeats,
                                        output=args.output))
    rows = []
    for g in rep["graphs"]:
        graded = [r for s in g["steps"] for r in s["outputs"] if r["graded"]]
        worst = (min(graded, key=lambda r: -math.inf if r.get("nonfinite") else db_value(r["snr_db"]))
                 if graded else None)
        t, e = g["timing"], g["estimate"]
        top1 = [r["top1"] for r in graded if r.get("top1")]
        ints = [r for s in g["steps"] for r in s["outputs"] if not r["graded"] and "values" in r]
        agree = (f"{sum(round(t['agreement'] * t['rows']) for t in top1)}/{sum(t['rows'] for t in top1)}" if top1 else
                 # integer outputs (the speech encoder's codes): values equal to the golden's, not graded
                 f"{sum(round(r['agreement'] * r['values']) for r in ints)}/{sum(r['values'] for r in ints)}" if ints
                 else "-")
        rows.append((g["graph"], "ok" if g["ok"] else "FAIL", len(g["steps"]),
                     snr_text(worst, 1) if worst else "-", _fmt(worst["cosine"], 6) if worst else "-", agree,
                     _fmt(t["first_ms"], 1), _fmt(t["median_ms"], 2), _fmt(t["p95_ms"], 2),
                     _fmt(e.get("est_step_ms"), 2)))
    print_table(f"check-board, {rep['backend']} on {rep['machine']}: worst output vs the golden (the "
                "simulator's; a CPU stage's: the build host's onnxruntime), call times in ms, the board "
                "estimate (`rkspeech estimate`, one core)", rows,
                headers=("graph", "result", "steps", "SNR dB", "cosine", "top-1", "first", "median", "p95", "estimate"))
    if args.output:
        print(f"report: {args.output}")
    for note in rep.get("notes") or ():
        print(f"rkspeech: check-board: {note}", file=sys.stderr)
    failed = [g for g in rep["graphs"] if not g["ok"]]
    for g in failed:
        print(f"rkspeech: check-board: {g['failure']}", file=sys.stderr)
    return 1 if failed else 0
