"""``rkspeech transcribe AUDIO... --model-dir DIR [--encoder enc.onnx|enc.rknn|encoder-pieces.json]``:
faster-whisper with the encoder offloaded (a split encoder, large: the build's manifest).

faster-whisper's whole transcribe (beam search, temperature fallback, timestamps, word
timestamps, VAD, language detection, translate, the batched pipeline) with each 30 s window's
encoder on onnxruntime, the rknn-toolkit2 simulator or rknn-toolkit-lite2 on the board
(:class:`rkspeech.runtime.whisper.model.WhisperModel`).  All files are decoded and the encoder
checked against the model before anything is transcribed; the model is loaded once; outputs
(txt, srt, vtt, json) are written atomically per file.  Without ``--vad``, ``--batch-size`` and
``--compare`` a file is decoded and its features computed block by block, never held whole
(``runtime.whisper.long_audio``: 2 h of audio in bounded memory, the same transcript); the files
are then only probed up front (opened and their first block decoded).  ``--compare`` runs stock faster-whisper
with the same options and reports identical or the difference in text, segment boundaries and
word timings (exit 1 when any file differs).
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import CORE_MASKS, DEFAULT_TARGET
from rkspeech.runtime.runners import BACKENDS
from rkspeech.runtime.whisper.subtitles import FORMATS


#: transcribe's own --help group
DECODING = "decoding"


def register(subparsers) -> None:
    p = subparsers.add_parser("transcribe", help="faster-whisper transcripts with the encoder offloaded (ort/sim/board)")
    f = Flags(p, "transcribe")
    f.add(INPUT, "audio", metavar="AUDIO", nargs="+", help="audio files (any format PyAV decodes)")
    f.add(INPUT, "--model-dir", metavar="DIR",
          help="CTranslate2/faster-whisper Whisper folder (model.bin, config.json, tokenizer.json)")
    f.add(INPUT, "--plan", metavar="PLAN", default=None,
          help="a Qwen3-ASR plan.json ('rkspeech build qwen3-asr'), in place of --model-dir: its encoder on "
               "--backend, its decoder on the CPU, greedy as the official transcribe")
    f.add(INPUT, "--encoder", metavar="FILE", help="offloaded encoder: enc.onnx (ort, sim), enc.rknn (rknnlite), or "
          "the encoder-pieces.json a 'build whisper-encoder --pieces N' wrote (the pieces run in turn), or the "
          "plan.json of a 'build whisper-encoder --windows 10,30' (the smallest window that holds each file); "
          "omit to run CTranslate2's own CPU encoder")
    f.add(OUTPUT, "--out-dir", writes="folder", default=None, metavar="DIR",
          help="where output files go (default: .)")
    f.add(OUTPUT, "--output-format", writes=None, choices=FORMATS + ("all",), default=None,
          help="write AUDIO-stem.<fmt> files (default with --out-dir: all)")
    f.add(OUTPUT, "--json", action="store_true", help="print the JSON report on stdout")
    f.add(OUTPUT, "--compare", action="store_true",
          help="also run stock faster-whisper with the same options and diff text, segments, word times")
    f.add(NPU, "--backend", choices=BACKENDS, default=None,
          help="encoder runtime (default: rknnlite for .rknn and NPU plans, ort otherwise)")
    f.add(NPU, "--target", default=DEFAULT_TARGET, help=f"chip the .rknn / simulator is for (default {DEFAULT_TARGET})")
    f.add(NPU, "--core-mask", default=None, choices=CORE_MASKS, help="rknnlite NPU core mask (board only)")
    f.add(DECODING, "--beam-size", type=int, default=5, help="beam size (default 5, faster-whisper's; 1 = greedy)")
    f.add(DECODING, "--language", default="auto", help="language code, or auto to detect (default auto); "
          "Qwen3-ASR: a language name or code of its 30")
    f.add(DECODING, "--context", default="", metavar="TEXT", help="Qwen3-ASR: free text that biases the transcript")
    f.add(DECODING, "--max-new-tokens", type=int, default=512, metavar="N",
          help="Qwen3-ASR: tokens generated at most per piece (the official max_new_tokens; default 512)")
    f.add(DECODING, "--task", choices=("transcribe", "translate"), default="transcribe")
    f.add(DECODING, "--word-timestamps", action="store_true", help="word start/end times (cross-attention alignment)")
    f.add(DECODING, "--vad", action="store_true", help="skip non-speech with faster-whisper's Silero VAD filter")
    f.add(DECODING, "--initial-prompt", default=None, metavar="TEXT", help="prompt for the first window")
    f.add(DECODING, "--batch-size", type=int, default=0, metavar="N",
          help="faster-whisper's BatchedInferencePipeline with N windows per decoder batch "
               "(VAD-split chunks; the encoder still runs one window at a time); 0 = sequential")
    f.add(ADVANCED, "--compute-type", default="float32", help="CTranslate2 compute type (default float32)")
    f.threads(ADVANCED, "CTranslate2 and onnxruntime; 0 = the libraries' own default")
    f.add(ADVANCED, "--seed", type=int, default=0,
          help="seed of CTranslate2's sampler, set before each transcription (the temperature "
               "fallback samples; --compare needs the same draws on both sides; default 0)")
    p.set_defaults(func=run)


def _check_args(args) -> None:
    from collections import Counter
    from pathlib import Path

    from rkspeech.core.errors import RkspeechError

    for flag, value, low in (("--threads", args.threads, 0), ("--beam-size", args.beam_size, 1),
                             ("--batch-size", args.batch_size, 0)):
        if value < low:
            raise RkspeechError(f"{flag} must be >= {low}, got {value}")
    if args.backend and not args.encoder:
        raise RkspeechError(f"--backend {args.backend} needs --encoder FILE")
    if args.output_format and not args.out_dir:  # an --out-dir was checked with every output (cli.outputs)
        from rkspeech.core.atomic import check_writable

        check_writable(".", what="--output-format's folder (the current one; --out-dir picks another)", folder=True)
    if args.out_dir or args.output_format:
        stems = Counter(Path(a).stem for a in args.audio)
        twice = [s for s, n in stems.items() if n > 1]
        if twice:
            raise RkspeechError(f"several AUDIO files share the name {twice[0]!r}: their outputs would overwrite "
                                "each other; transcribe them into separate --out-dir folders")


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time
    from pathlib import Path

    from rkspeech.core import progress
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.checks import check_encoder_file, check_language, check_model_dir, is_multilingual, model_geometry
    from rkspeech.runtime.whisper.subtitles import write_outputs
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    if args.plan:
        from rkspeech.cli.transcribe_asr import run_plan

        return run_plan(args)
    if not args.model_dir:
        from rkspeech.core.errors import RkspeechError

        raise RkspeechError("give --model-dir DIR (a Whisper model) or --plan PLAN (a Qwen3-ASR plan)")
    # every check that reads files only comes first: a bad input is one line on stderr, nothing else
    _check_args(args)
    geometry = model_geometry(check_model_dir(args.model_dir))  # a folder that is not Whisper fails here
    language = check_language(args.language, multilingual=is_multilingual(args.model_dir))
    backend = args.backend
    if args.encoder:
        backend, _ = check_encoder_file(args.encoder, model_dir=args.model_dir, backend=backend, target=args.target)
    from rkspeech.runtime.whisper.long_audio import transcribe_file, whole_file_needed

    streamed = not (whole_file_needed(vad=args.vad, batch_size=args.batch_size) or args.compare)
    if streamed:  # probe each file now (a bad one is one line before the model loads); decode later
        audios = [_probe(path) for path in args.audio]
    else:
        audios = [decode_audio(path, sample_rate=SAMPLE_RATE, allow_empty=True) for path in args.audio]  # no samples: ""

    start = time.perf_counter()
    with progress.stage(f"load Whisper (CTranslate2 decoder{', encoder on ' + backend if backend else ''})"):
        model = WhisperModel(args.model_dir, encoder=args.encoder, backend=backend, threads=args.threads,
                             target=args.target, core_mask=args.core_mask, compute_type=args.compute_type)
    setup_s = time.perf_counter() - start
    try:
        options = {"beam_size": args.beam_size, "language": language, "task": args.task,
                   "word_timestamps": args.word_timestamps, "vad_filter": args.vad or bool(args.batch_size),
                   "initial_prompt": args.initial_prompt}
        runner, stock = model, None
        if args.batch_size:
            from faster_whisper import BatchedInferencePipeline

            runner = BatchedInferencePipeline(model=model)
        if args.compare:
            import faster_whisper

            with progress.stage("load stock faster-whisper (for --compare)"):
                stock = faster_whisper.WhisperModel(args.model_dir, device="cpu", compute_type=args.compute_type,
                                                    cpu_threads=args.threads)
                if args.batch_size:
                    stock = faster_whisper.BatchedInferencePipeline(model=stock)

        formats = None
        if args.out_dir or args.output_format:
            fmt = args.output_format or "all"
            formats = FORMATS if fmt == "all" else (fmt,)
        files, status = [], 0
        for index, (path, audio) in enumerate(zip(args.audio, audios), 1):
            if streamed:
                progress.info(f"[{index}/{len(audios)}] {path}")
                result = transcribe_file(runner, path, sample_rate=SAMPLE_RATE, seed=args.seed,
                                         progress=f"transcribe {path}", **options)
            else:
                progress.info(f"[{index}/{len(audios)}] {path} ({len(audio) / SAMPLE_RATE:.1f} s)")
                result = transcribe_audio(runner, audio, batch_size=args.batch_size or None, seed=args.seed,
                                          progress=f"transcribe {path}", **options)
            entry = {"audio": path, **result.to_dict()}
            if model.window_s is not None:  # a plan with window buckets: the window this file ran in
                entry["window_s"] = model.window_s
            if stock is not None:
                ref = transcribe_audio(stock, audio, batch_size=args.batch_size or None, seed=args.seed,
                                       **options)
                cmp = compare_transcriptions(ref, result)
                entry["compare"] = {**cmp, "reference_text": ref.text,
                                    "reference_total_s": round(ref.timing["total_s"], 4)}
                status = status or (0 if cmp["identical"] else 1)
            if formats:
                extra = {"audio": path, "model": str(args.model_dir), "encoder": args.encoder,
                         "backend": backend or "ct2-cpu"}
                written = write_outputs(result, args.out_dir or ".", Path(path).stem, formats, extra)
                entry["outputs"] = [str(p) for p in written]
            files.append(entry)
            if not args.json:
                _print_file(entry, result, backend, multiple=len(audios) > 1, file=sys.stderr)
    finally:
        model.close()

    report = {"model": str(args.model_dir), "geometry": geometry, "encoder": args.encoder,
              "backend": backend or "ct2-cpu", "encoder_setup_s": round(setup_s, 3),
              "options": options, "batch_size": args.batch_size, "files": files}
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return status


def _probe(path) -> None:
    """Open ``path`` and decode its first block: the one-line refusals of ``decode_audio`` now."""
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import iter_audio

    blocks = iter_audio(path, sample_rate=SAMPLE_RATE, allow_empty=True)
    try:
        next(blocks, None)
    finally:
        blocks.close()


def _print_file(entry: dict, result, backend, *, multiple: bool, file) -> None:
    from rkspeech.runtime.whisper.transcript import describe_difference

    if multiple:
        print(f"==> {entry['audio']} <==")
    print(result.text.strip(), flush=True)
    t = result.timing
    window = f", {entry['window_s']} s window" if entry.get("window_s") else ""
    print(f"timing: host {t['host_s']:.3f} s | encoder {t['encoder_s']:.3f} s ({backend or 'ct2-cpu'}{window}) | "
          f"decoder {t['decoder_s']:.3f} s | total {t['total_s']:.3f} s | {len(result.segments)} segment(s), "
          f"{result.duration_s:.1f} s audio, language {result.language}", file=file)
    if "compare" in entry:
        print(f"compare with stock faster-whisper: {describe_difference(entry['compare'])}", file=file)
    for p in entry.get("outputs", []):
        print(f"wrote {p}", file=file)
