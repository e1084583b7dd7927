"""``rkspeech verify``: a converted step on the x86 simulator, stepwise, against onnxruntime and the full decode."""

from __future__ import annotations

import argparse

from rkspeech.core.targets import TARGETS
from rkspeech.verify.thresholds import SIM_MIN_SNR_DB


def register(subparsers) -> None:
    p = subparsers.add_parser("verify", help="simulator verification of a converted vocoder step (SNR table)")
    p.add_argument("--model-dir", default=None, help="the checkpoint the step was exported from (default $QWEN3_TTS_MODEL)")
    p.add_argument("--onnx", required=True, help="the step ONNX (the simulator builds from it)")
    p.add_argument("--rknn", default=None, help="the converted .rknn (supplies target and contract; checked against the ONNX)")
    p.add_argument("--first-onnx", default=None, help="optional small-B first-step ONNX")
    p.add_argument("--first-rknn", default=None)
    p.add_argument("--target", default=None, choices=TARGETS, help="chip to simulate (default: the .rknn's, else rk3588)")
    p.add_argument("--steps", type=int, default=3, help="main steps to run (the last one partial)")
    p.add_argument("--sim-pieces", type=int, default=1,
                   help="simulate the graph in N consecutive pieces, one child at a time: for graphs whose "
                        "simulator does not fit in memory (npu B=64 on 24 GB: 4); each step costs N builds")
    p.add_argument("--min-snr", type=float, default=SIM_MIN_SNR_DB,
                   help=f"fail below this simulator SNR (default {SIM_MIN_SNR_DB:g} dB)")
    p.add_argument("--report", default=None, help="write the report JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rkspeech.core.atomic import write_json
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.verify.simulator import load_artifact, verify_vocoder

    if args.report:
        from rkspeech.core.atomic import check_writable

        check_writable(args.report, what="report")
    main = load_artifact(args.onnx, args.rknn, args.target)
    first = load_artifact(args.first_onnx, args.first_rknn, args.target) if args.first_onnx else None
    res = verify_vocoder(args.model_dir, main, first, steps=args.steps, target=args.target or main.target,
                         sim_pieces=args.sim_pieces)
    rep = res.to_report()
    rows = [(stage, f"{db:.1f} dB", " ".join(f"{x:.1f}" for x in res.per_step[stage])) for stage, db in res.snr_db.items()]
    rows.append(("simulator vs onnxruntime", f"{res.sim_vs_ort_db:.1f} dB", ""))
    print_table(f"SNR against the full decode, {res.tokens} tokens (simulator: NPU numerics, not speed)",
                rows, headers=("stage", "whole signal", "per main step"))
    if args.report:
        write_json(args.report, rep)
    if res.snr_db["rknn_sim_step"] < args.min_snr:
        raise RkspeechError(f"simulator step is {res.snr_db['rknn_sim_step']:.1f} dB against the full decode, below {args.min_snr:.0f} dB")
    return 0
