"""``rkspeech transcribe AUDIO --model DIR --encoder enc.onnx|enc.rknn``: Whisper with the encoder offloaded.

faster-whisper's features, the offloaded encoder (onnxruntime, the rknn-toolkit2 simulator, or
rknn-toolkit-lite2 on the board), CTranslate2's decoder; 30 s windows; greedy decoding.
``--compare`` also runs the all-CPU pipeline (faster-whisper's own transcribe with the same
deterministic settings) and reports ``identical`` or the difference (exit 1 when they differ).
"""

from __future__ import annotations

import argparse

from rkspeech.core.targets import CORE_MASKS, DEFAULT_TARGET
from rkspeech.runtime.runners import BACKENDS


def register(subparsers) -> None:
    p = subparsers.add_parser("transcribe", help="Whisper transcript with the encoder offloaded (ort/sim/board)")
    p.add_argument("audio", metavar="AUDIO", help="audio file (any format PyAV decodes)")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="CTranslate2/faster-whisper Whisper folder (decoder, tokenizer, config)")
    p.add_argument("--encoder", metavar="FILE", help="offloaded encoder: enc.onnx (ort, sim) or enc.rknn (rknnlite); "
                   "omit to run CTranslate2's own CPU encoder")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="encoder runtime (default: ort for .onnx, rknnlite for .rknn)")
    p.add_argument("--target", default=DEFAULT_TARGET, help=f"chip for the simulator build (default {DEFAULT_TARGET})")
    p.add_argument("--core-mask", default=None, choices=CORE_MASKS, help="rknnlite NPU core mask (board only)")
    p.add_argument("--compare", action="store_true", help="also run the all-CPU pipeline and diff the transcripts")
    p.add_argument("--compute-type", default="float32", help="CTranslate2 compute type (default float32)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for CTranslate2 and onnxruntime (default 1: on a shared 2-core host, "
                        "2 CTranslate2 threads made the decoder 2-10x slower through OpenMP spin-waits; "
                        "0 = library default)")
    p.add_argument("--language", default=None, help="language code for multilingual models (default en)")
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time

    from rkspeech.core import progress
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.whisper import WhisperPipeline, diff_transcripts, load_audio, open_encoder

    backend = args.backend
    if args.encoder and backend is None:
        backend = "rknnlite" if args.encoder.lower().endswith(".rknn") else "ort"
    if backend and not args.encoder:
        raise RkspeechError(f"--backend {backend} needs --encoder FILE")

    audio = load_audio(args.audio)
    with progress.stage("load Whisper (CTranslate2 decoder, tokenizer)"):
        pipeline = WhisperPipeline(args.model, compute_type=args.compute_type, threads=args.threads,
                                   language=args.language)
    encoder = None
    setup_s = 0.0
    if args.encoder:
        start = time.perf_counter()
        with progress.stage(f"open encoder ({backend})"):
            encoder = open_encoder(backend, args.encoder, target=args.target, threads=args.threads or None,
                                   core_mask=args.core_mask)
        setup_s = time.perf_counter() - start
    try:
        result = pipeline.transcribe(audio, encoder)
    finally:
        if encoder is not None:
            encoder.close()

    report = {"audio": args.audio, "model": str(args.model), "encoder": args.encoder,
              "backend": backend or "ct2-cpu", "encoder_setup_s": round(setup_s, 3), **result.to_report()}
    status = 0
    if args.compare:
        with progress.stage("all-CPU reference (faster-whisper)"):
            ref = pipeline.reference(audio)
        diff = diff_transcripts(ref.text, result.text)
        report["compare"] = {"identical": diff is None, "reference_text": ref.text,
                             "tokens_identical": ref.tokens == result.tokens,
                             "reference_total_s": round(ref.timing["total_s"], 4), "diff": diff}
        status = 0 if diff is None else 1

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(result.text.strip())
        t = result.timing
        print(f"timing: host {t['host_s']:.3f} s | encoder {t['encoder_s']:.3f} s ({report['backend']}) | "
              f"decoder {t['decoder_s']:.3f} s | total {t['total_s']:.3f} s | "
              f"{len(result.windows)} window(s), {result.audio_s:.1f} s audio"
              + (f" | encoder setup {setup_s:.1f} s" if setup_s else ""), file=sys.stderr)
        if args.compare:
            if report["compare"]["identical"]:
                print("compare: identical to the all-CPU transcript", file=sys.stderr)
            else:
                print("compare: DIFFERS from the all-CPU transcript\n" + report["compare"]["diff"], file=sys.stderr)
    return status
