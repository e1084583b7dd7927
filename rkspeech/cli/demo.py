"""``rkspeech demo``: the main job on the embedded default checkpoint.

Writes a synthetic Qwen3-TTS model root (custom-voice: talker, code predictor, text tokenizer and
speech tokenizer, in the real on-disk format; real weights cannot be downloaded here), runs
``rkspeech build qwen3-tts-vocoder`` on it (export + checks, lint, conversion for the target,
container inspection, simulator verification, plan.json), and ends with speech: a sentence
through the talker and code predictor on the host into the plan's streaming vocoder
(onnxruntime; the .rknn needs a board), written to ``speech.wav``.  On synthetic weights the
audio is not speech, and the talker never chooses to stop, so the sentence is cut at
``--speech-frames`` frames (12.5 per second).
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.contracts.formulations import CHOICES, DEFAULT_FORMULATION


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="build the vocoder from an embedded synthetic checkpoint, end to end")
    f = Flags(p, "demo")
    f.add(INPUT, "--config", choices=("published", "reduced"), default="published",
          help="synthetic checkpoint size (published: ~10 min and ~10 GB at B=16; reduced: a few min)")
    f.add(OUTPUT, "--out-dir", writes="folder", dest="out", default="out/demo", metavar="DIR", help="output folder (default out/demo)")
    f.add(OUTPUT, "--speech-frames", writes=None, type=int, default=25,
          help="frames of the spoken sentence at the end (default 25 = 2 s; 0 = no speech)")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS)
    f.add(NPU, "--codes-length", "-B", type=int, default=16,
          help="main step B (default 16; 64 needs ~21 GB to convert the published config)")
    f.add(NPU, "--first-length", type=int, default=4)
    f.add(NPU, "--formulation", choices=CHOICES, default=DEFAULT_FORMULATION)
    f.add(NPU, "--skip-sim", dest="skip_verify", action="store_true", help="no simulator verification")
    p.set_defaults(func=run)


SENTENCE = "Hello from the Rockchip NPU. This sentence went through the talker, the code predictor and the vocoder."


def run(args: argparse.Namespace) -> int:
    from rkspeech.cli.build_vocoder import print_summary
    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions, build_vocoder

    if args.speech_frames < 0:
        raise RkspeechError(f"--speech-frames must be >= 0, got {args.speech_frames}")
    out = check_writable(args.out, what="output", folder=True)
    ckpt = out / f"model-{args.config}-custom-voice"
    if not (ckpt / "config.json").is_file():  # written last: a root with config.json is complete
        with progress.stage(f"synthetic {args.config} Qwen3-TTS model (custom voice)"):
            write_tts_checkpoint(ckpt, args.config, "custom-voice", seed=0)
    build_dir = out / f"build-{args.config}-{args.formulation}-{args.target}-B{args.codes_length}"
    summary = build_vocoder(VocoderBuildOptions(
        out=build_dir, model_dir=ckpt, target=args.target, codes_length=args.codes_length,
        first_length=args.first_length, skip_verify=args.skip_verify, formulation=args.formulation))
    print_summary(summary)
    if args.speech_frames:
        _speak(ckpt, summary["plan"], out / "speech.wav", args.speech_frames)
    return 0


def _speak(model_dir, plan, wav_path, frames: int) -> None:
    """The demo's last stage: a sentence streamed into ``wav_path`` (see the module docstring)."""
    import time

    from rkspeech.core import progress
    from rkspeech.core.reporting import print_table
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import DEFAULT_SEED, Speaker, SpeechTiming
    from rkspeech.runtime.wav import WavWriter

    with progress.stage("load the talker, code predictor and the plan's vocoder (onnxruntime)"):
        speaker = Speaker(model_dir, plan, backend="ort",
                          options=GenerationOptions(seed=DEFAULT_SEED, max_new_tokens=frames + 1))
    timing = SpeechTiming()
    voice = speaker.speakers[0]
    start = time.perf_counter()
    with speaker, WavWriter(wav_path, speaker.sample_rate) as wav:
        for pcm in progress.track(speaker.stream(SENTENCE, speaker=voice, language="english", timing=timing),
                                  f"speak {frames} frames", total=None):
            wav.write(pcm)
    seconds = time.perf_counter() - start
    audio_s = timing.samples / speaker.sample_rate
    print_table("rkspeech demo: text to speech (host talker + code predictor, onnxruntime vocoder)", [
        ("text", SENTENCE),
        ("voice", f"{voice} (synthetic weights: the audio is not speech)"),
        ("output", f"{wav_path} ({audio_s:.2f} s of audio, {timing.frames} frames)"),
        ("time to first audio", f"{timing.first_audio_s:.2f} s" if timing.first_audio_s is not None else "-"),
        ("talker + code predictor", f"{timing.generate_s:.2f} s"),
        ("vocoder (onnxruntime)", f"{timing.vocoder_s:.2f} s"),
        ("total", f"{seconds:.2f} s (realtime factor {seconds / audio_s:.2f})" if audio_s else f"{seconds:.2f} s"),
    ])
