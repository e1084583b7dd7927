"""``rkspeech serve``: a speech server -- Wyoming (Home Assistant) and OpenAI-compatible HTTP -- over
one pool of engines, in one process.

Transcription with ``--asr-model-dir DIR [--asr-encoder FILE --asr-backend ort|sim|rknnlite]``
(Whisper: the same model and options as ``rkspeech transcribe``, each flag with the ``--asr-``
prefix) or ``--asr-plan PLAN`` (a Qwen3-ASR plan, as ``rkspeech transcribe --plan``;
``rkspeech.runtime.qwen3_asr.whisper_api``); ``--asr-engines N`` models, each with its own encoder
runner -- on a board one rknn-lite context per NPU core; speech with ``--tts-model-dir DIR --tts-plan plan.json``
(``rkspeech.runtime.tts.speak.Speaker``).  Binds to 127.0.0.1 unless told otherwise;
``--api-key`` (or ``RKSPEECH_API_KEY`` / ``RKSPEECH_API_KEY_FILE``, which keep the key out of
``ps``) protects the HTTP routes.  Every flag can come from ``RKSPEECH_<FLAG>`` or
``RKSPEECH_<FLAG>_FILE`` (:mod:`rkspeech.cli.environment`; the command line wins).  SIGTERM, SIGHUP, SIGINT: stop accepting, refuse what waits,
finish what runs, exit 0.  See docs/serve.md.
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import NPU, Flags
from rkspeech.core.targets import CORE_MASKS, DEFAULT_TARGET
from rkspeech.serve.discovery import DEFAULT_NAME as DEFAULT_ZEROCONF_NAME
from rkspeech.serve.limits import FD_RESERVE
from rkspeech.runtime.runners import BACKENDS

from rkspeech.cli.environment import variable

API_KEY_ENV = variable("--api-key")

#: serve's --help groups: one per engine (its flags carry its prefix), then the server's
ASR, TTS = "transcription (ASR, --asr-*)", "speech (TTS, --tts-*)"
NETWORK, LIMITS = "network", "limits"


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="Wyoming + OpenAI-compatible HTTP speech server over a pool of engines")
    f = Flags(p, "serve", environment=True)
    f.add(ASR, "--asr-model-dir", metavar="DIR", help="CTranslate2/faster-whisper Whisper folder")
    f.add(ASR, "--asr-plan", metavar="PLAN",
          help="a Qwen3-ASR plan.json ('rkspeech build qwen3-asr'), instead of --asr-model-dir")
    f.add(ASR, "--asr-encoder", metavar="FILE",
          help="offloaded encoder enc.onnx / enc.rknn, or a 'build whisper-encoder --windows' plan.json (the "
               "smallest window that holds each request's audio; omit: CTranslate2's)")
    f.add(ASR, "--asr-backend", choices=BACKENDS, default=None,
          help="encoder runtime (default: ort for .onnx, rknnlite for .rknn and NPU plans)")
    f.add(ASR, "--asr-engines", type=int, default=None, metavar="N",
          help="transcription engines = requests transcribed at once (default: 1; rknnlite: one per NPU core)")
    f.add(ASR, "--asr-core-mask", nargs="+", choices=CORE_MASKS, default=None, metavar="MASK",
          help="rknnlite: NPU core mask per engine, cycled (default: one engine per core of --target; "
               "with speech on the NPU too, the cores but the last)")
    f.threads(ASR, "each Whisper engine (CTranslate2, onnxruntime)")
    f.add(ASR, "--asr-compute-type", default="float32",
          help="CTranslate2 compute type (default float32)")
    f.add(ASR, "--asr-beam-size", type=int, default=5, help="beam size (default 5, as transcribe)")
    f.add(ASR, "--asr-language", default="auto",
          help="default language when a request names none (default auto)")
    f.add(ASR, "--asr-vad", action="store_true", help="faster-whisper's Silero VAD filter on every request")
    f.add(ASR, "--asr-partials", action="store_true",
          help="Qwen3-ASR on Wyoming: transcript chunks while the audio arrives (the official streaming mode: "
               "all the audio again every 2 s, only when an engine is free); the final transcript is unchanged")
    f.add(ASR, "--asr-hotwords-file", metavar="FILE",
          help="phrases to bias transcripts toward, one per line (faster-whisper hotwords; re-read when "
               "the file changes, e.g. Home Assistant's entity names)")
    f.add(TTS, "--tts-model-dir", metavar="DIR", help="Qwen3-TTS model folder")
    f.add(TTS, "--tts-plan", metavar="PLAN", help="plan.json of the vocoder built for --tts-model-dir")
    f.add(TTS, "--tts-backend", choices=BACKENDS, default="ort", help="vocoder runtime (default ort)")
    f.add(TTS, "--tts-streams", type=int, default=None, metavar="N",
          help="speech requests generated at once by the one speech engine, over the plan's lanes graphs "
               "(build qwen3-tts --streams): a request joins the running batch (default: the plan's lanes, "
               "one per two cores, 1 below 4 cores: docs/batching.md; 1: one request at a time)")
    f.add(TTS, "--tts-core-mask", nargs="+", choices=CORE_MASKS, default=None,
          metavar="MASK", help="rknnlite: NPU core mask per vocoder engine; the talker and code predictor "
                               "run on the first unless the plan's stage names its core_mask (default: the "
                               "last core of --target when transcription is on the NPU too, else all)"),
    f.add(NPU, "--target", default=DEFAULT_TARGET,
          help=f"chip of the .rknn files, both engines (default {DEFAULT_TARGET})")
    f.cpu_affinity(NPU)
    f.add(NETWORK, "--wyoming", default="tcp://127.0.0.1:10300", metavar="URI",
          help="Wyoming listener tcp://HOST:PORT or unix://PATH, or 'off' (default tcp://127.0.0.1:10300)")
    f.add(NETWORK, "--zeroconf", nargs="?", const=DEFAULT_ZEROCONF_NAME, default=None, metavar="NAME",
          help=f"announce the tcp:// Wyoming listener by zeroconf (mDNS) as NAME (default {DEFAULT_ZEROCONF_NAME}): "
               "Home Assistant discovers it; needs the zeroconf package")
    f.add(NETWORK, "--http", default="127.0.0.1:8000", metavar="HOST:PORT",
          help="HTTP listener, or 'off' (default 127.0.0.1:8000)")
    f.add(NETWORK, "--api-key", default=None, metavar="KEY",
          help=f"require 'Authorization: Bearer KEY' on HTTP (default: none; ${API_KEY_ENV} or "
               f"${API_KEY_ENV}_FILE keep it out of ps)")
    f.add(LIMITS, "--max-queue", type=int, default=8, metavar="N",
          help="requests that may wait per engine kind; more are refused at once (default 8)")
    f.add(LIMITS, "--request-timeout", type=float, default=300.0, metavar="S",
          help="per-request time limit (default 300)")
    f.add(LIMITS, "--max-upload-mb", type=float, default=25.0, help="upload size limit (default 25 MB)")
    f.add(LIMITS, "--max-audio-s", type=float, default=600.0, help="audio length limit (default 600 s)")
    f.add(LIMITS, "--max-text-chars", type=int, default=4096, help="text length limit for speech (default 4096)")
    f.add(LIMITS, "--idle-timeout", type=float, default=300.0, metavar="S",
          help="close a Wyoming connection with no event for S seconds (default 300)")
    f.add(LIMITS, "--max-connections", type=int, default=256, metavar="N",
          help="connections open at once, split evenly between the front ends served (each its own "
               "share: idle Wyoming sockets cannot lock HTTP out); one more is refused at once "
               f"(default 256; kept {FD_RESERVE} below the open-files limit)")
    f.add(LIMITS, "--header-timeout", type=float, default=10.0, metavar="S",
          help="HTTP: a request head must arrive within S seconds of connecting (default 10)")
    f.add(LIMITS, "--body-timeout", type=float, default=60.0, metavar="S",
          help="HTTP: a request body must arrive within S seconds; else 408 (default 60)")
    f.add(LIMITS, "--keep-alive-timeout", type=float, default=5.0, metavar="S",
          help="HTTP: close a kept-alive connection idle for S seconds (default 5)")
    f.add(LIMITS, "--memory-budget-mb", type=float, default=256.0, metavar="MB",
          help="client data held at once (bodies being read, Wyoming audio, streamed text); past it "
               "new work is refused with 503 (default 256)")
    f.add(LIMITS, "--max-speech-s", type=float, default=120.0,
          help="speech generated per request at most (default 120 s): a talker that never chooses "
               "to stop (synthetic weights; a bad prompt) cannot hold an engine for long")
    p.epilog = f.environment.help()
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace):
    import os

    from rkspeech.serve.options import ServeOptions

    off = ("off", "none", "")
    # an explicit --api-key "" is a mistake (it once turned auth off silently); an empty
    # $RKSPEECH_API_KEY means unset (cli.environment: every empty variable does)
    api_key = args.api_key
    return ServeOptions(
        wyoming=None if args.wyoming.lower() in off else args.wyoming,
        http=None if args.http.lower() in off else args.http,
        api_key=api_key,
        max_queue=args.max_queue, request_timeout_s=args.request_timeout,
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024), max_audio_s=args.max_audio_s,
        max_text_chars=args.max_text_chars, idle_timeout_s=args.idle_timeout,
        max_connections=args.max_connections, header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout, keep_alive_timeout_s=args.keep_alive_timeout,
        memory_budget_bytes=int(args.memory_budget_mb * 1024 * 1024), asr_beam_size=args.asr_beam_size,
        asr_language=None if args.asr_language in ("auto", "") else args.asr_language, asr_vad=args.asr_vad,
        asr_partials=args.asr_partials, hotwords_file=_hotwords_file(args.asr_hotwords_file), zeroconf=args.zeroconf,
        model_name=_asr_model_name(args),
        speech_model_name=os.path.basename(os.path.normpath(args.tts_model_dir)) if args.tts_model_dir else "speech")


def _asr_model_name(args) -> str:
    """The model a client sees: the Whisper folder's name, or the Qwen3-ASR plan's folder's."""
    import os

    if args.asr_plan:
        return os.path.basename(os.path.dirname(os.path.abspath(args.asr_plan))) or "qwen3-asr"
    return os.path.basename(os.path.normpath(args.asr_model_dir)) if args.asr_model_dir else "whisper"


def _check_asr_plan(args, options) -> None:
    """``--asr-plan``'s one-line refusals, before anything loads."""
    from pathlib import Path

    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_asr.languages import normalize_language
    from rkspeech.plan.asr import is_asr_plan

    whisper_only = [flag for flag, used in (("--asr-model-dir", args.asr_model_dir), ("--asr-encoder", args.asr_encoder),
                                            ("--asr-vad", args.asr_vad),
                                            ("--asr-compute-type", args.asr_compute_type != "float32")) if used]
    if whisper_only:
        raise RkspeechError(f"--asr-plan runs a Qwen3-ASR plan on its own: drop {', '.join(whisper_only)} (Whisper's)")
    if not Path(args.asr_plan).is_file():
        raise RkspeechError(f"--asr-plan {args.asr_plan}: no such file")
    if not is_asr_plan(args.asr_plan):
        raise RkspeechError(f"--asr-plan {args.asr_plan} is not a Qwen3-ASR plan (a Whisper encoder plan goes to "
                            "--asr-encoder with --asr-model-dir)")
    normalize_language(options.asr_language)  # one line listing the languages


def _hotwords_file(path):
    """``--asr-hotwords-file``, read once now so a missing or unreadable file stops the start."""
    if path is None:
        return None
    from rkspeech.core.errors import RkspeechError
    from rkspeech.serve.biasing import read_phrases

    try:
        read_phrases(path)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else exc
        raise RkspeechError(f"--asr-hotwords-file {path}: cannot read it ({why})") from None
    return path


def _asr_on_npu(args) -> bool:
    if args.asr_backend is not None or not args.asr_encoder:  # a Qwen3-ASR plan: ort unless told
        return args.asr_backend == "rknnlite"
    from rkspeech.runtime.whisper.checks import default_backend

    return default_backend(args.asr_encoder) == "rknnlite"


def _core_mask(args) -> tuple:
    """(transcription masks, speech masks): as given, else each kind on its own cores when both
    run on the NPU (``core.targets.split_cores``), else every core of ``--target``.  Masks that
    overlap while both kinds are on the NPU get one warning line (they then share a core)."""
    import sys

    from rkspeech.core.targets import cores_for, mask_cores, split_cores

    asr_npu = bool(args.asr_model_dir or args.asr_plan) and _asr_on_npu(args)
    tts_npu = bool(args.tts_model_dir) and args.tts_backend == "rknnlite"
    both = asr_npu and tts_npu
    asr_default, tts_default = split_cores(args.target) if both else (cores_for(args.target),) * 2
    asr = tuple(args.asr_core_mask or asr_default)
    tts = tuple(args.tts_core_mask or tts_default)
    if both:
        shared = set().union(*map(mask_cores, asr)) & set().union(*map(mask_cores, tts))
        if shared:
            print(f"rkspeech serve: warning: transcription and speech share NPU core(s) {', '.join(sorted(shared))} "
                  "(--asr-core-mask / --tts-core-mask)", file=sys.stderr)
    return asr, tts


def _open_speaker(args, core_mask=None):
    from rkspeech.core.errors import RkspeechError

    if not args.tts_plan:
        raise RkspeechError("--tts-model-dir needs --tts-plan plan.json (the vocoder built for it)")
    import math

    from rkspeech.runtime.tts.speak import Speaker

    if not args.max_speech_s > 0:
        raise RkspeechError(f"--max-speech-s must be > 0, got {args.max_speech_s}")
    if args.tts_streams is not None and args.tts_streams < 1:
        raise RkspeechError(f"--tts-streams must be >= 1, got {args.tts_streams}")
    speaker = Speaker(args.tts_model_dir, args.tts_plan, backend=args.tts_backend, target=args.target,
                      core_mask=list(core_mask) if args.tts_backend == "rknnlite" and core_mask else None,
                      streams=args.tts_streams)
    c = speaker.plan.contract
    frames = math.ceil(args.max_speech_s * c.sample_rate / c.samples_per_token)
    # N talker steps give at most N - 1 frames (the last token's codes would come in step N + 1)
    speaker.options = speaker.default_options(max_new_tokens=frames + 1)
    return speaker


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from rkspeech.core import progress
    from rkspeech.core.errors import RkspeechError
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.transcribers import open_qwen3_asr, open_transcribers
    from rkspeech.serve.server import Server, serve_forever

    options = options_from_args(args)  # address and limit errors before anything loads
    if not args.asr_model_dir and not args.asr_plan and not args.tts_model_dir:
        raise RkspeechError("nothing to serve: give --asr-model-dir DIR (Whisper) or --asr-plan PLAN (Qwen3-ASR), "
                            "and/or --tts-model-dir DIR --tts-plan plan.json")
    if args.asr_plan:
        _check_asr_plan(args, options)
    elif args.asr_partials:
        raise RkspeechError("--asr-partials needs --asr-plan (a Qwen3-ASR plan makes partial transcripts; "
                            "Whisper streams a chunk per decoded segment)")
    elif args.asr_backend and not args.asr_encoder:
        raise RkspeechError(f"--asr-backend {args.asr_backend} needs --asr-encoder FILE")
    if args.tts_plan and not args.tts_model_dir:
        raise RkspeechError("--tts-plan needs --tts-model-dir DIR")
    if args.asr_threads < 0 or (args.asr_engines is not None and args.asr_engines < 1):
        raise RkspeechError("--asr-threads must be >= 0 and --asr-engines >= 1")
    asr_masks, tts_masks = _core_mask(args)
    from rkspeech.core.cpus import pin_cpu_stages

    pin_cpu_stages(args.cpu_affinity)  # before any engine opens a session: their threads inherit it
    transcribers, speakers = [], []
    try:
        if args.asr_plan:
            engines = args.asr_engines or (len(asr_masks) if _asr_on_npu(args) else 1)
            with progress.stage(f"load {engines} Qwen3-ASR engine(s)"):
                transcribers = open_qwen3_asr(args.asr_plan, engines=engines, backend=args.asr_backend or "ort",
                                              core_mask=asr_masks, threads=args.asr_threads)
        elif args.asr_model_dir:
            from rkspeech.runtime.whisper.checks import check_language, check_model_dir, is_multilingual

            check_model_dir(args.asr_model_dir, flag="--asr-model-dir")
            check_language(options.asr_language, multilingual=is_multilingual(args.asr_model_dir))
            engines = args.asr_engines
            if engines is None:
                engines = len(asr_masks) if _asr_on_npu(args) else 1
            with progress.stage(f"load {engines} Whisper engine(s)"):
                transcribers = open_transcribers(args.asr_model_dir, engines=engines, encoder=args.asr_encoder,
                                                 backend=args.asr_backend, target=args.target, core_mask=asr_masks,
                                                 threads=args.asr_threads, compute_type=args.asr_compute_type)
        if args.tts_model_dir:
            with progress.stage("load the speech model"):
                speakers = [_open_speaker(args, tts_masks)]
                streams = getattr(speakers[0], "streams", 1)
                if streams > 1:
                    progress.info(f"speech: up to {streams} requests generated at once (the plan's lanes)")
        pool = ServePool(transcribers=transcribers, speakers=speakers, max_queue=options.max_queue,
                          request_timeout_s=options.request_timeout_s, retry_after_s=options.retry_after_s)
    except BaseException:
        for m in transcribers + speakers:
            close = getattr(m, "close", None)
            if close:
                close()
        raise

    def ready(addresses: dict) -> None:
        for kind, address in addresses.items():
            print(f"rkspeech serve: {kind} on {address}", file=sys.stderr, flush=True)
        if options.api_key is None and options.http and not options.http.startswith(("127.", "localhost", "[::1]")):
            print("rkspeech serve: warning: HTTP is reachable from other hosts and has no --api-key",
                  file=sys.stderr, flush=True)

    finished = asyncio.run(serve_forever(Server(pool, options), on_ready=ready))
    print(f"rkspeech serve: stopped ({'all requests finished' if finished else 'some requests were cut off'})",
          file=sys.stderr)
    return 0
