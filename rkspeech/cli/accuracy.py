"""``rkspeech accuracy``: where fp16 loses accuracy, block by block and layer by layer."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags, resolve_threads
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "accuracy", help="per-block / per-layer accuracy map of an ONNX graph on the simulator (fp16 vs fp32)")
    f = Flags(p, "accuracy")
    f.add(INPUT, "model", help="the ONNX graph (static shapes)")
    f.add(INPUT, "--inputs", default=None,
          help="an .npz of the graph inputs (names and shapes as the graph's); default: seeded "
               "random normal floats and zero integers (real inputs give the real map)")
    f.add(INPUT, "--stepwise", type=int, default=None, metavar="K",
          help="vocoder step graphs: feed step K of a stepwise onnxruntime decode of random codes "
               "(cache threaded), a state the model reaches")
    f.add(INPUT, "--seed", type=int, default=0, help="seed of the default random inputs")
    f.add(INPUT, "--plan", default=None, metavar="plan.json",
          help="the build of this graph: its fp16 headroom over the accuracy gate's held-out inputs is shown "
               "(NPU talker / code predictor graphs; default: the plan.json beside the graph or above it)")
    f.add(OUTPUT, "--report", writes="file", default=None, help="write the JSON report here")
    f.add(OUTPUT, "--plot", writes="file", default=None, help="write the PNG plot here")
    f.add(OUTPUT, "--sim-log", writes="file", default=None, help="append the toolkit's console output here")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS, help="chip to simulate")
    f.add(NPU, "--pieces", type=int, default=4,
          help="cut the graph into N consecutive blocks, one simulator build each (default 4)")
    f.add(NPU, "--skip-sim", action="store_true",
          help="fp32 and the fp16 storage model only (no simulator)")
    f.add(NPU, "--skip-whole", action="store_true",
          help="skip the whole-graph simulator check (one build fewer)")
    f.add(NPU, "--min-snr", type=float, low=None, default=None,
          help="fail when a graph output's whole-graph simulator SNR is below this (dB)")
    f.threads(ADVANCED, "onnxruntime")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rkspeech.accuracy.analyse import analyse
    from rkspeech.accuracy.options import AccuracyOptions
    from rkspeech.accuracy.report import print_report, to_json
    from rkspeech.core.atomic import check_writable, write_json
    from rkspeech.core.errors import RkspeechError

    for path, what in ((args.report, "report"), (args.plot, "plot")):
        if path:
            check_writable(path, what=what)
    if args.plot:
        from rkspeech.accuracy.plot import require_matplotlib

        if not args.plot.lower().endswith(".png"):
            raise RkspeechError(f"--plot writes a PNG: give a .png path, got {args.plot}")
        require_matplotlib()
    opts = AccuracyOptions(model=Path(args.model), target=args.target,
                           inputs=Path(args.inputs) if args.inputs else None, stepwise=args.stepwise,
                           pieces=args.pieces,
                           seed=args.seed, threads=resolve_threads(args.threads), simulate=not args.skip_sim,
                           whole_graph=not args.skip_whole, sim_log=args.sim_log,
                           plan=Path(args.plan) if args.plan else None)
    rep = analyse(opts)
    print_report(rep)
    if args.report:
        write_json(args.report, to_json(rep))
    if args.plot:
        from rkspeech.accuracy.plot import write_plot

        write_plot(rep, args.plot)
    if args.min_snr is not None:
        for name, d in rep["graph_outputs"].items():
            s = (d.get("sim_whole") or d.get("sim_pieces") or {})
            if s.get("nonfinite") or (s.get("snr_db") is not None and s["snr_db"] < args.min_snr):
                got = "inf/NaN values" if s.get("nonfinite") else f"{s['snr_db']:.1f} dB"
                raise RkspeechError(f"{name}: simulator output is {got} against fp32, below {args.min_snr:g} dB")
    return 0
