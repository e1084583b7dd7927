"""``rkspeech build qwen3-asr``: flags -> ``ASRBuildOptions``, report table."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.core.thresholds import GATE_MODES

HELP = "Qwen3-ASR: encoder windows on the NPU, decoder on the CPU (int4 / int8 / fp32) -> one plan"


def _chunks(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or a comma-separated list of them: window "
                                         "sizes in chunks of 1 s, e.g. 2,8") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give window sizes in chunks of 1 s, e.g. 2,8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rkspeech.pipelines.asr_build import DEFAULT_CAPACITY, DEFAULT_PREFILL_B

    f = Flags(parser, "build qwen3-asr")
    f.add(INPUT, "--model-dir", required=True, metavar="DIR", help="Qwen3-ASR model root (config.json model_type qwen3_asr)")
    f.add(OUTPUT, "--out-dir", writes="folder", required=True, metavar="DIR", help="plan folder (plan.json, graphs)")
    f.add(OUTPUT, "--json", action="store_true", help="print the report JSON on stdout")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS, help="Rockchip chip (default rk3588)")
    f.add(NPU, "--encoder", choices=("npu", "cpu-fp32"), default="npu", help="where the encoder runs (default npu)")
    f.add(NPU, "--decoder", choices=("cpu-int4", "cpu-int8", "cpu-fp32"), default="cpu-int4",
          help="the decoder's weights on the CPU (default cpu-int4: blocks of --int4-block, symmetric)")
    f.add(NPU, "--window-chunks", type=_chunks, default=(8,), metavar="K,K",
          help="encoder window graphs by size in 1 s chunks (default 8: the model's whole attention window)")
    f.add(NPU, "--skip-sim", action="store_true", help="no simulator check of the encoder graphs")
    f.add(NPU, "--timeout", type=float, default=None, help="conversion timeout in seconds")
    f.add(NPU, "--gate", choices=GATE_MODES, default="refuse",
          help="accuracy gate of the quantized decoder and the NPU encoder against fp32 (greedy transcripts of "
               "held-out clips, teacher forced and free running; the text-to-speech gate's marks): refuse "
               "(default: no plan when a stage fails), warn (write the plan, record the failures as a warning), "
               "off (not measured)")
    f.add(ADVANCED, "--capacity", type=int, default=DEFAULT_CAPACITY,
          help=f"decoder positions (prompt + new tokens; default {DEFAULT_CAPACITY})")
    f.add(ADVANCED, "--prefill-b", type=int, default=DEFAULT_PREFILL_B, help="prefill graph positions a call")
    f.add(ADVANCED, "--int4-block", type=int, default=128, choices=(32, 64, 128), help="int4 block size (default 128)")
    f.add(ADVANCED, "--force", action="store_true", help="re-run every stage")


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.core import progress
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    opts = ASRBuildOptions(model_dir=args.model_dir, out_dir=args.out_dir, target=args.target, encoder=args.encoder,
                           decoder=args.decoder, window_chunks=args.window_chunks, capacity=args.capacity,
                           prefill_B=args.prefill_b, int4_block=args.int4_block, skip_sim=args.skip_sim,
                           timeout=args.timeout, force=args.force, gate=args.gate)
    report = build_qwen3_asr(opts)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    enc = report["encoder"]
    for role in enc["export"]:
        conv = enc.get("sequence", {}).get("convert", {}).get(role, {})
        place = conv.get("placement", {})
        sim = enc.get("simulator", {}).get(role, {})
        ops = f"{place.get('npu_ops')} NPU / {place.get('cpu_ops')} CPU ops, " if place else ""
        regtask = conv.get("build", {}).get("regtask_overflow_lines")
        progress.info(f"encoder window {role}: {ops}REGTASK lines {regtask}, simulator SNR {sim.get('snr_db')} dB"
                      if place else f"encoder window {role}: {enc['placement']} (onnxruntime max abs "
                      f"{enc['export'][role]['ort_max_abs']:.2e})")
    dec = report["decoder"]
    progress.info(f"decoder: {dec['placement']}, capacity {opts.capacity}")
    for key, value in gate_rows(report.get("accuracy_gate")):
        progress.info(f"{key}: {value}")
    print(report["plan"])
    return 0


def gate_rows(gate: dict | None) -> list[tuple]:
    """The accuracy gate's rows (``build qwen3-tts``'s: each judged stage's figures, then the verdict)."""
    from rkspeech.cli.build_tts import _check_rows, _gate_rows

    rows: list[tuple] = []
    for name, figures in ((gate or {}).get("stages") or {}).items():
        rows += _check_rows(f"{name} ({figures.get('placement')})", figures, unit="token")
    return rows + _gate_rows(gate)
