"""``rkspeech build whisper-encoder``: flags -> ``WhisperEncoderBuildOptions``, report table."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags, resolve_threads
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS

HELP = "Whisper encoder: fixed 30 s window (and shorter window buckets) -> .rknn"


def window_list(text: str) -> tuple[int, ...]:
    """``--windows 10,30``: whole seconds from 1 to 30, comma-separated."""
    from rkspeech.models.whisper.window import WINDOW_SECONDS, bucket_frames

    try:
        seconds = tuple(int(x) for x in text.split(",") if x.strip())
        for s in seconds:
            bucket_frames(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or a comma-separated list of them: whole "
                                         f"seconds from 1 to {WINDOW_SECONDS}, e.g. 10,30") from None
    if not seconds:
        raise argparse.ArgumentTypeError("give at least one window, e.g. 10,30")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    f = Flags(parser, "build whisper-encoder")
    f.add(INPUT, "--model-dir", required=True, metavar="DIR",
          help="CTranslate2/faster-whisper folder, transformers folder, or an openai-whisper .pt file")
    f.add(INPUT, "--verify-audio", default=None, help="audio file for the checks (default: synthetic)")
    f.add(OUTPUT, "--out-dir", writes="folder", required=True, metavar="DIR",
          help="output folder (encoder.onnx, encoder.rknn, build-report.json)")
    f.add(OUTPUT, "--json", action="store_true", help="print the report JSON on stdout")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS, help="Rockchip chip (default rk3588)")
    f.add(NPU, "--frames", type=int, default=None,
          help="mel frames per window (default: 2 * n_audio_ctx = 3000, 30 s)")
    f.add(NPU, "--windows", type=window_list, default=(30,), metavar="S,S",
          help="window lengths in seconds, e.g. 10,30: one encoder graph each (encoder.10s.rknn ...), listed in "
               "plan.json; transcribe/serve given that plan run the smallest window that holds the audio. The 30 s "
               "window is always built; shorter ones change some transcripts (docs/whisper-buckets.md). "
               "Default: 30 only")
    f.add(NPU, "--pieces", type=int, default=1, metavar="N",
          help="cut the encoder at block boundaries into N graphs, each converted and simulated "
               "in turn (large: 4 pieces of ~4.2 GB to convert; docs/whisper-sizes.md)")
    f.add(NPU, "--skip-convert", action="store_true", help="stop after the ONNX export and checks")
    f.add(NPU, "--skip-sim", action="store_true", help="do not run the simulator check")
    f.add(NPU, "--timeout", type=float, default=None, help="conversion timeout in seconds")
    f.threads(ADVANCED, "torch, CTranslate2 and onnxruntime")
    f.add(ADVANCED, "--force", action="store_true", help="re-run every stage, even those whose inputs are unchanged")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(report: dict) -> str:
    from rkspeech.core.compare import db_text

    d = report["dims"]
    lines = [f"Whisper encoder  {report['source']['format']} ({report['source']['stored_dtype']})  "
             f"n_mels={d['n_mels']} d={d['n_audio_state']} layers={d['n_audio_layer']} heads={d['n_audio_head']}"]
    onnx = report["onnx"]
    lines.append(f"ONNX             {onnx['path']}  {onnx['input']['shape']} -> {onnx['output']['shape']}  "
                 f"opset {onnx['opset']}, {onnx['nodes']} nodes")
    rows = []
    if "parity_ctranslate2" in report:
        rows.append(("torch vs CTranslate2", report["parity_ctranslate2"]))
    rows.append(("onnxruntime vs torch", report["onnxruntime"]))
    if "simulator" in report:
        rows.append(("simulator vs torch", report["simulator"]))
    lines.append(f"{'check':<22} {'cosine':>10} {'min frame':>10} {'SNR dB':>8}")
    for name, r in rows:
        lines.append(f"{name:<22} {r['cosine']:>10.7f} {r['cosine_min_frame']:>10.7f} {db_text(r['snr_db']):>8}")
    lint = report.get("lint") or {}
    lint = {"": lint} if "errors" in lint else lint
    if lint:
        lines.append("lint             " + ", ".join(f"{r + ': ' if r else ''}{v['errors']} errors, {v['warnings']} "
                                                     "warnings" for r, v in lint.items()))
    conv = report.get("conversion")
    if conv:
        pl = conv.get("placement", {})
        build = conv.get("build", {})
        lines.append(f"placement        NPU {pl.get('npu_ops')}  CPU {pl.get('cpu_ops')}  "
                     f"CPU types {pl.get('cpu_op_types') or {}}")
        lines.append(f"conversion       {_fmt(build.get('seconds'), '.1f')} s, peak RSS "
                     f"{_fmt(build.get('peak_rss_mb'), '.0f')} MB, .rknn {conv.get('rknn', {}).get('bytes')} bytes")
    for seconds, w in (report.get("windows") or {}).items():
        checks = ([("torch vs CTranslate2", w["parity_ctranslate2"])] if "parity_ctranslate2" in w else []) + [
            ("onnxruntime", w["onnxruntime"])] + ([("simulator", w["simulator"])] if "simulator" in w else [])
        conv_w = w.get("conversion") or {}
        lines.append(f"window {seconds:>3} s     {w['onnx']['input']['shape']} -> {w['onnx']['output']['shape']}  "
                     + "  ".join(f"{n} SNR {r['snr_db']:.1f} dB" for n, r in checks)
                     + (f"  .rknn {conv_w.get('rknn', {}).get('bytes')} bytes" if conv_w else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.core.atomic import check_writable, folder_lock
    from rkspeech.pipelines.whisper_encoder import (
        WhisperEncoderBuildOptions,
        build_whisper_encoder,
    )

    check_writable(args.out_dir, what="output", folder=True)
    with folder_lock(args.out_dir):
        report = build_whisper_encoder(WhisperEncoderBuildOptions(
            model_dir=args.model_dir, out_dir=args.out_dir, target=args.target, frames=args.frames,
            verify_audio=args.verify_audio, skip_convert=args.skip_convert, skip_sim=args.skip_sim,
            timeout=args.timeout, threads=resolve_threads(args.threads), pieces=args.pieces, force=args.force,
            windows=args.windows))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_table(report))
    return 0
