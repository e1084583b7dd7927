"""``rkspeech verify``: a converted step on the x86 simulator, stepwise, against onnxruntime and the full decode.

``--plot R.png`` adds the accuracy map's picture (``rkspeech.accuracy``): drawn from
``--accuracy-report`` (a build's accuracy-report.json, or ``rkspeech accuracy --report``) when
given, else mapped here on ``--onnx`` in ``--accuracy-pieces`` blocks (one simulator build each,
fed step 3 of a stepwise decode); the map's headline then goes into ``--report`` too."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ACCURACY_MAP, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.core.thresholds import SIM_MIN_SNR_DB


def register(subparsers) -> None:
    p = subparsers.add_parser("verify", help="simulator verification of a converted vocoder step (SNR table)")
    f = Flags(p, "verify")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR",
          help="the checkpoint the step was exported from (default $QWEN3_TTS_MODEL)")
    f.add(INPUT, "--onnx", required=True, help="the step ONNX (the simulator builds from it)")
    f.add(INPUT, "--rknn", default=None,
          help="the converted .rknn (supplies target and contract; checked against the ONNX)")
    f.add(INPUT, "--first-onnx", default=None, help="optional small-B first-step ONNX")
    f.add(INPUT, "--first-rknn", default=None)
    f.add(OUTPUT, "--report", writes="file", default=None, help="write the report JSON here")
    f.add(NPU, "--target", default=None, choices=TARGETS, help="chip to simulate (default: the .rknn's, else rk3588)")
    f.add(NPU, "--steps", type=int, default=3, help="main steps to run (the last one partial)")
    f.add(NPU, "--pieces", type=int, default=1, metavar="N",
          help="simulate the graph in N consecutive pieces, one child at a time: for graphs whose "
               "simulator does not fit in memory (npu B=64 on 24 GB: 4); each step costs N builds")
    f.add(NPU, "--min-snr", type=float, low=None, default=SIM_MIN_SNR_DB,
          help=f"fail below this simulator SNR (default {SIM_MIN_SNR_DB:g} dB)")
    f.add(ACCURACY_MAP, "--plot", writes="file", default=None, metavar="R.png",
          help="draw the main step's accuracy map (SNR along the graph, blocks labelled) here")
    f.add(ACCURACY_MAP, "--accuracy-report", writes="file", default=None, metavar="A.json",
          help="with --plot: draw this accuracy map (a build's accuracy-report.json) instead of mapping")
    f.add(ACCURACY_MAP, "--accuracy-pieces", type=int, default=4, metavar="N",
          help="with --plot and no --accuracy-report: map in N blocks, one simulator build each (default 4)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rkspeech.core.atomic import write_json
    from rkspeech.core.compare import db_text
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.verify.simulator import load_artifact, verify_vocoder

    if args.report:
        from rkspeech.core.atomic import check_writable

        check_writable(args.report, what="report")
    acc = None
    if args.plot:
        from rkspeech.accuracy.stage import check_pieces, check_plot_path, load_report

        check_plot_path(args.plot)
        check_pieces(args.accuracy_pieces, off_allowed=False)
        if args.accuracy_report:
            from pathlib import Path

            from rkspeech.core import progress

            acc = load_report(args.accuracy_report)
            if Path(acc["model"]).name != Path(args.onnx).name:
                progress.info(f"note: {args.accuracy_report} maps {acc['model']}, not {args.onnx}")
    elif args.accuracy_report:
        raise RkspeechError("--accuracy-report is what --plot draws; give --plot R.png too")
    main = load_artifact(args.onnx, args.rknn, args.target)
    first = load_artifact(args.first_onnx, args.first_rknn, args.target) if args.first_onnx else None
    res = verify_vocoder(args.model_dir, main, first, steps=args.steps, target=args.target or main.target,
                         pieces=args.pieces)
    rep = res.to_report()
    rows = [(stage, f"{db_text(db)} dB", " ".join(db_text(x) for x in res.per_step[stage]))
            for stage, db in res.snr_db.items()]
    rows.append(("simulator vs onnxruntime", f"{db_text(res.sim_vs_ort_db)} dB", ""))
    print_table(f"SNR against the full decode, {res.tokens} tokens (simulator: NPU numerics, not speed)",
                rows, headers=("stage", "whole signal", "per main step"))
    if args.plot:
        rep["accuracy"] = _plot(args, acc, args.target or main.target or DEFAULT_TARGET)
    if args.report:
        write_json(args.report, rep)
    if res.snr_db["rknn_sim_step"] < args.min_snr:
        raise RkspeechError(f"simulator step is {res.snr_db['rknn_sim_step']:.1f} dB against the full decode, below {args.min_snr:.0f} dB")
    return 0


def _plot(args: argparse.Namespace, acc: dict | None, target: str) -> dict:
    """Draw the map (``acc``, or mapped here on ``--onnx``) into ``--plot``; returns its headline."""
    import os
    from pathlib import Path

    from rkspeech.accuracy.plot import write_plot
    from rkspeech.accuracy.report import headline, print_report

    if acc is None:
        from rkspeech.accuracy.analyse import analyse
        from rkspeech.accuracy.options import AccuracyOptions
        from rkspeech.accuracy.stage import STEP

        acc = analyse(AccuracyOptions(model=Path(args.onnx), target=target, stepwise=STEP,
                                      pieces=args.accuracy_pieces, whole_graph=False))
        print_report(acc)
        source = "mapped here"
    else:
        source = os.fspath(args.accuracy_report)
    write_plot(acc, args.plot)
    return {"plot": os.fspath(args.plot), "from": source, **headline(acc)}
