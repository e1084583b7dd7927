"""``rkspeech export qwen3-tts-vocoder``: checkpoint -> checked step graph -> checked ONNX."""

from __future__ import annotations

import argparse

from rkspeech.contracts.formulations import CHOICES, DEFAULT_FORMULATION
from rkspeech.cli.vocabulary import INPUT, NPU, OUTPUT, Flags


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a model's NPU graph to ONNX, checked at every stage")
    models = p.add_subparsers(dest="model_kind", metavar="MODEL")
    v = models.add_parser("qwen3-tts-vocoder", help="the 12 Hz speech-tokenizer decoder as a stateful step graph")
    f = Flags(v, "export qwen3-tts-vocoder")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR",
          help="model root, its speech_tokenizer/ folder, or a HF cache snapshot (default: $QWEN3_TTS_MODEL)")
    f.add(INPUT, "--seed", type=int, default=0, help="seed of the random check codes")
    f.add(OUTPUT, "--output", "-o", writes="file", default=None, help="ONNX path (default qwen3_tts_vocoder_step_B<B>.onnx)")
    f.add(OUTPUT, "--report", writes="file", default=None, help="write the report JSON here")
    f.add(OUTPUT, "--check-only", action="store_true", help="run the torch stepwise check, export nothing")
    f.add(NPU, "--codes-length", "-B", type=int, required=True, help="tokens per step (B); one graph per value")
    f.add(NPU, "--first-length", type=int, default=None,
          help="also export a small-B first-step graph (its cache feeds the main graph)")
    f.add(NPU, "--formulation", choices=CHOICES, default=DEFAULT_FORMULATION,
          help="reference: the model's own ops (alias: seed); npu: every op on the NPU (default; see docs)")
    v.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    from rkspeech.core.atomic import check_writable, write_json
    from rkspeech.core.compare import db_text
    from rkspeech.core.reporting import print_table
    from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

    if args.report:
        check_writable(args.report, what="report")
    result = export_vocoder(ExportOptions(
        model_dir=args.model_dir, codes_length=args.codes_length, output=args.output,
        first_length=args.first_length, check_only=args.check_only, seed=args.seed,
        formulation=args.formulation))
    r = result.report
    rows = [("B", r["B"]), ("cache_numel", f"{r['cache_numel']:,}"),
            ("SNR torch step vs full decode", f"{db_text(r['snr_db']['torch_step'])} dB")]
    if "onnxruntime_step" in r["snr_db"]:
        rows.append(("SNR onnxruntime step vs full decode", f"{db_text(r['snr_db']['onnxruntime_step'])} dB"))
    if "onnx" in r:
        o = r["onnx"]
        rows += [("ONNX", o["path"]), ("nodes", o["nodes"]),
                 ("risky ops for rknn-toolkit2", ", ".join(f"{k} x{v['count']}" for k, v in o["risky_ops"].items()) or "none")]
        if o.get("first_path"):
            rows.append(("ONNX first step", o["first_path"]))
    print_table("qwen3-tts-vocoder export", rows)
    if args.report:
        write_json(args.report, r)
    return 0
