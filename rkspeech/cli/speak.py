"""``rkspeech speak "TEXT" --model-dir DIR --plan plan.json -o out.wav``: text to speech, streaming.

The talker and code predictor generate frames (as the plan places them: their graphs from
``build qwen3-tts``, with the prompt, heads and sampling in numpy and no torch (``--host-loop``),
else torch on the host); each frame goes to the plan's streaming vocoder at once, and each finished vocoder step's audio goes straight to the
wav, or with ``-o -`` to stdout as raw 16-bit little-endian mono PCM while generation goes on
(``| aplay -f S16_LE -r 24000 -c 1``).  Progress and the summary table go to stderr then.
A text of several sentences is spoken one sentence at a time (``runtime.tts.long_text``: memory
stays that of one sentence however long the text).
``--codes-out`` saves the frames as ``[T, 16]`` int64, the layout ``rkspeech decode`` reads; a
text of several sentences as ``[N, T, 16]``, one row per sentence padded with -1 (the official
batched layout): decode gives each sentence a fresh vocoder state, as speak did.
``--margins-out`` (greedy) saves how near each decision was to a tie, in the unit of a logit SNR
(``loop.decision_margin``): codes that differ between two machines at a near-tie differ by
arithmetic, not by a bug (``board.compare``).
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import CORE_MASKS
from rkspeech.runtime.runners import BACKENDS


#: speak's own --help groups
VOICE, SAMPLING = "voice", "sampling"


def register(subparsers) -> None:
    p = subparsers.add_parser("speak", help="text to speech through a plan's streaming vocoder")
    f = Flags(p, "speak")
    f.add(INPUT, "text", help="the text to speak")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR",
          help="Qwen3-TTS model root or HF cache snapshot (default $QWEN3_TTS_MODEL)")
    f.add(INPUT, "--plan", required=True, help="plan.json from `rkspeech build qwen3-tts` (talker, code predictor "
                                               "and vocoder graphs) or `build qwen3-tts-vocoder` for this model")
    f.add(OUTPUT, "-o", "--output", writes="file", required=True, help="output .wav, or - for raw s16le PCM on stdout")
    f.add(OUTPUT, "--codes-out", writes="file", default=None,
          help="save the generated codes here ([T,16] int64 .npy; several sentences: [N,T,16], -1 padded)")
    f.add(OUTPUT, "--margins-out", writes="file", default=None,
          help="with --greedy: save each decision's margin here (top-two logit gap over the logits' rms, "
               "[T+1,16] float32 .npy, the last row the decision that ended; several sentences: [N,T+1,16], NaN "
               "padded): tells a near-tie from a real difference when codes differ between machines")
    f.add(OUTPUT, "--report", writes="file", default=None, help="write the timing report JSON here")
    f.add(VOICE, "--speaker", default=None, help="a named speaker (custom-voice models)")
    f.add(VOICE, "--instruct", default=None, help="a description of the voice (voice-design models; "
                                                  "with --speaker on 1.7B custom-voice models)")
    f.add(VOICE, "--ref-audio", default=None, help="a recording of the voice to clone (Base models): from its "
                                                   "speaker embedding, and with --ref-text in context (the plan's "
                                                   "speaker encoder and speech encoder graphs; no torch)")
    f.add(VOICE, "--voice", default=None, metavar="NAME",
          help="a voice saved beside the plan (Base models; rkspeech voices save NAME --plan PLAN --ref-audio WAV)")
    f.add(VOICE, "--ref-text", default=None, help="the transcript of --ref-audio: in-context cloning (the "
                                                  "recording's codes and words lead the prompt)")
    f.add(VOICE, "--language", default=None, help="language name (default: auto)")
    f.add(NPU, "--backend", choices=BACKENDS, default="ort",
          help="backend of the plan's graphs (default ort: the vocoder's exact host graphs; sim: the "
               "x86 simulator; rknnlite: a board)")
    f.add(NPU, "--target", default=None, help="chip for sim/rknnlite (default: the plan's target)")
    f.add(NPU, "--core-mask", default="auto", choices=CORE_MASKS, help="rknnlite NPU core(s)")
    f.add(NPU, "--host-stages", action="store_true",
          help="run the talker and code predictor in torch even when the plan holds their graphs")
    f.add(SAMPLING, "--greedy", action="store_true", help="greedy decoding (no sampling)")
    f.add(SAMPLING, "--seed", type=int, default=None, help="sampling seed (default 0, as the server uses)")
    f.add(SAMPLING, "--temperature", type=float, default=None)
    f.add(SAMPLING, "--top-k", type=int, default=None)
    f.add(SAMPLING, "--top-p", type=float, default=None)
    f.add(SAMPLING, "--repetition-penalty", type=float, default=None)
    f.add(SAMPLING, "--max-frames", type=int, default=None,
          help="at most this many frames of audio, N frames = N/12.5 s (fewer if the talker ends the "
               "utterance first); qwen-tts' max_new_tokens=N+1 gives the same N frames")
    f.add(ADVANCED, "--streams", type=int, default=None, metavar="N",
          help="sentences generated at once over the plan's lanes graphs (build qwen3-tts --streams): the "
               "first sentence starts alone, then up to N in flight, audio in order (default, for a text of "
               "several sentences without --max-frames: the plan's lanes, one per two cores, 1 below 4 cores; else 1)")
    f.threads(ADVANCED, "onnxruntime (intra-op)")
    f.cpu_affinity(ADVANCED)
    f.add(ADVANCED, "--host-loop", choices=("auto", "numpy", "torch"), default="auto",
          help="what runs the prompt, heads and sampling around the graphs: numpy (no torch; needs a plan "
               "from `build qwen3-tts` that places the talker and the code predictor), torch (the reference), "
               "auto (default): numpy when the plan places both stages.  Voice cloning (--ref-audio) runs the "
               "plan's cloning graphs (a plan built before them: the speaker encoder in torch); greedy codes "
               "are the same either way, sampled codes differ (another random stream, the same distribution)")
    p.set_defaults(func=run)


def _options(args, speaker):
    """Sampling controls for the talker; the code predictor keeps qwen-tts' defaults, or argmax
    when the plan runs it as a greedy graph (said on stderr)."""
    from rkspeech.core import progress
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import DEFAULT_SEED

    seed = DEFAULT_SEED if args.seed is None else args.seed
    talker = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
              "repetition_penalty": args.repetition_penalty,
              # N talker steps give at most N - 1 frames (as in qwen-tts, the last step's token would
              # get its codes in step N + 1), so N frames of audio take N + 1 steps
              "max_new_tokens": None if args.max_frames is None else args.max_frames + 1}
    talker = {k: v for k, v in talker.items() if v is not None}
    if args.greedy:
        return GenerationOptions.greedy(seed=seed, **talker)
    if speaker.greedy_code_predictor:
        progress.info("the plan's code predictor graph is greedy: codebooks 1-15 are argmax, the talker samples")
    return speaker.default_options(seed=seed, **talker)


def run(args: argparse.Namespace) -> int:
    import contextlib
    import sys
    import time
    from pathlib import Path

    import numpy as np

    from rkspeech.core import progress
    from rkspeech.core.atomic import atomic_path, check_writable, output_lock, write_json
    from rkspeech.core.cpus import pin_cpu_stages
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.core.targets import board_target
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.tts.long_text import stream_sentences
    from rkspeech.runtime.tts.speak import MIN_REF_AUDIO_S, Speaker, SpeechTiming
    from rkspeech.runtime.wav import WavWriter, to_int16

    from rkspeech.core.text import check_text

    check_text(args.text)
    if args.voice is not None and (args.speaker or args.ref_audio or args.ref_text):
        raise RkspeechError("--voice names a saved voice; give no --speaker, --ref-audio or --ref-text with it")
    to_stdout = args.output == "-"
    out = None if to_stdout else Path(args.output)
    if out is not None:
        if out.suffix.lower() != ".wav":
            raise RkspeechError(f"output {out} must end in .wav (or - for raw PCM on stdout)")
        check_writable(out, what="output wav")
    for flag, path in (("--codes-out", args.codes_out), ("--margins-out", args.margins_out), ("--report", args.report)):
        if path:
            check_writable(path, what=flag[2:].replace("-", " "))
            if out is not None and Path(path).resolve() == out.resolve():
                raise RkspeechError(f"{flag} {path} is the output wav; pick another name")
    for flag, path in (("--codes-out", args.codes_out), ("--margins-out", args.margins_out)):
        if path and not path.endswith(".npy"):
            raise RkspeechError(f"{flag} {path} must end in .npy")
    if args.margins_out and not args.greedy:
        raise RkspeechError("--margins-out measures greedy decisions: add --greedy")
    if args.threads is not None and args.threads < 1:
        raise RkspeechError(f"--threads must be >= 1, got {args.threads}")
    if args.streams is not None and args.streams < 1:
        raise RkspeechError(f"--streams must be >= 1, got {args.streams}")
    if args.max_frames is not None and args.max_frames < 1:
        raise RkspeechError(f"--max-frames must be >= 1, got {args.max_frames}")
    target = args.target or (board_target() if args.backend == "rknnlite" else None)
    pinned = pin_cpu_stages(args.cpu_affinity)  # before any onnxruntime session: its threads inherit it

    with contextlib.ExitStack() as stack:
        if out is not None:
            stack.enter_context(output_lock(out, what="output wav"))
        with progress.stage("load the model and the vocoder plan"):
            speaker = stack.enter_context(Speaker(args.model_dir, args.plan, backend=args.backend,
                                                  threads=args.threads, core_mask=[args.core_mask], target=target,
                                                  host_stages=args.host_stages, host=args.host_loop,
                                                  streams=_streams(args)))
        streams = getattr(speaker, "streams", 1)
        if streams > 1:
            progress.info(f"streams: up to {streams} sentences generated at once (the plan's lanes graphs)")
        options = _options(args, speaker)
        if args.voice is not None and args.voice not in speaker.voices:
            saved = ", ".join(speaker.voices) or "none"
            raise RkspeechError(f"no voice {args.voice!r} is saved beside {args.plan} (saved: {saved}); save one with "
                                f"rkspeech voices save {args.voice} --plan {args.plan} --ref-audio WAV")
        rate = speaker.sample_rate
        ref = (decode_audio(args.ref_audio, sample_rate=rate, what="reference audio", min_seconds=MIN_REF_AUDIO_S)
               if args.ref_audio else None)
        timing, codes, margins = SpeechTiming(), [], []
        # one utterance per sentence: a long text is never one prompt (runtime.tts.long_text)
        chunks = stream_sentences(speaker, args.text, options=options, timing=timing, codes_out=codes,
                                  margins_out=margins if args.margins_out else None,
                                  max_frames=args.max_frames, speaker=args.voice or args.speaker,
                                  language=args.language,
                                  instruct=args.instruct, ref_audio=ref, ref_text=args.ref_text)
        start = time.perf_counter()
        tick = progress.periodic("speak")

        def shown(chunks):  # a line every few seconds: audio so far (a long text runs for minutes)
            for pcm in chunks:
                yield pcm
                tick(f"{timing.samples / rate:.1f} s of audio, {timing.frames} frames")

        if to_stdout:
            sink = sys.stdout.buffer
            for pcm in shown(chunks):
                sink.write(to_int16(pcm).astype("<i2").tobytes())
                sink.flush()
        else:
            with WavWriter(out, rate) as wav:
                for pcm in shown(chunks):
                    wav.write(pcm)
        seconds = time.perf_counter() - start
        if args.codes_out:  # one sentence: [T, 16]; several: [N, T, 16], each padded with -1 (decode: apart)
            from rkspeech.runtime.tts.codes import utterance_array

            with atomic_path(args.codes_out, suffix=".npy") as tmp:
                np.save(tmp, utterance_array(codes))
        if args.margins_out:
            from rkspeech.runtime.tts.codes import utterance_array

            with atomic_path(args.margins_out, suffix=".npy") as tmp:
                np.save(tmp, utterance_array(margins, fill=np.nan, dtype=np.float32))
    report = {"text": args.text, "backend": args.backend, "stage_backends": speaker.stage_names,
              "host_loop": speaker.host, "streams": streams, "output": args.output,
              "cpu_affinity": {"asked": args.cpu_affinity, "cores": list(pinned) if pinned else None},
              "sample_rate": rate,
              **timing.to_dict(rate)}
    if args.report:
        write_json(args.report, report)
    audio_s = timing.samples / rate
    rows = [
        ("output", f"{args.output} ({audio_s:.2f} s of audio, {timing.frames} frames, {rate} Hz, 16-bit)"),
        ("time to first audio", f"{timing.first_audio_s:.3f} s" if timing.first_audio_s is not None else "-"),
        ("total time", f"{seconds:.2f} s (realtime factor {seconds / audio_s:.2f})" if audio_s else f"{seconds:.2f} s"),
        ("generation (talker, code predictor, sampling)", f"{timing.generate_s:.2f} s (host loop: {speaker.host}"
                                                           + (f", {streams} streams at once" if streams > 1
                                                              else "") + ")"),
        *_stage_rows(timing.stages, speaker.stage_names),
        (f"vocoder ({args.backend})", f"{timing.vocoder_s:.2f} s"),
        ("host (rest)", f"{timing.host_s:.2f} s"),
        *[("cut short", cut) for cut in timing.cuts],
    ]
    print_table("rkspeech speak", rows, stderr=to_stdout)
    return 0


def _streams(args) -> int | None:
    """``--streams``, else None (the plan's default) for a text of several sentences spoken without
    ``--max-frames``, else 1: one sentence, or sentences in turn, gain nothing from the lanes
    graphs, whose calls compute every lane's row."""
    if args.streams is not None:
        return args.streams
    from rkspeech.core.sentences import sentences

    return None if args.max_frames is None and len(list(sentences(args.text))) > 1 else 1


def _stage_rows(stages: dict, names: dict) -> list[tuple]:
    """One row per generation stage: where it ran, its seconds, calls and ms per call."""
    rows = []
    for key, label in (("talker", "talker"), ("code_predictor", "code predictor")):
        n, sec = stages.get(f"{key}_calls"), stages.get(f"{key}_s")
        if n:
            rows.append((f"  {label} ({names.get(key)})", f"{sec:.2f} s, {n} calls, {1000 * sec / n:.1f} ms per call"))
    return rows
