"""``rkspeech demo``: the main job on the embedded default checkpoint, the product's real path.

Writes a synthetic Qwen3-TTS model root (custom-voice: talker, code predictor, text tokenizer and
speech tokenizer, in the real on-disk format; real weights cannot be downloaded here), builds it
the way the docs recommend for a board (``rkspeech build qwen3-tts``): the talker and the code
predictor on the CPU in 4 bits (blocks of 128, symmetric: :data:`CPU_PLACEMENT`), each judged by
the accuracy gate, and the vocoder on the NPU (export + checks, lint, conversion for the target,
container inspection, simulator verification) with a small first step; then speaks a sentence
through that plan with the torch-free numpy host loop (the vocoder's exact host graph on
onnxruntime: the .rknn needs a board), written to ``speech.wav``, and ends with ``estimate
--plan``'s board estimate of the same plan.

On synthetic weights the gate cannot pass (random weights have flat logits: a quantized stage
agrees with fp32 mostly on near-ties, and the talker never chooses to stop), so the demo builds
with ``--gate warn``, as the docs tell users to do for an untrained root, and says so in one
line; the sentence is cut at ``--speech-frames`` frames (12.5 per second).
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import INPUT, NPU, OUTPUT, Flags
from rkspeech.contracts.formulations import CHOICES, DEFAULT_FORMULATION
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS

#: Where the demo places the stages: what docs/cpu-stages.md recommends for a board (int4 in
#: blocks of 128, symmetric: 17 % fewer bytes per call than block 32, and faster than real
#: time on this host's 2 cores where block 32 is at real time: docs/speak.md).
CPU_PLACEMENT = {"talker": "cpu-int4", "code_predictor": "cpu-int4", "int4_block": 128, "int4_symmetric": True}
#: The vocoder's first step (tokens): speak's first audio and its eager steps after the last frame
#: use it; 2 brought first audio from 0.61-0.75 s to 0.40 s on this host (docs/speak.md).
DEMO_FIRST_LENGTH = 2


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="build a whole text-to-speech plan (CPU int4 talker and code predictor, "
                                           "NPU vocoder) from an embedded synthetic checkpoint and speak through it")
    f = Flags(p, "demo")
    f.add(INPUT, "--config", choices=("published", "reduced"), default="published",
          help="synthetic checkpoint size (published: the real model's size, most of an hour and ~10 GB; "
               "reduced: a few minutes)")
    f.add(OUTPUT, "--out-dir", writes="folder", default="out/demo", metavar="DIR",
          help="output folder (default out/demo)")
    f.add(OUTPUT, "--speech-frames", writes=None, type=int, default=25,
          help="frames of the spoken sentence at the end (default 25 = 2 s; 0 = no speech)")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS)
    f.add(NPU, "--codes-length", "-B", type=int, default=16,
          help="vocoder main step B (default 16; 64 needs ~21 GB to convert the published config)")
    f.add(NPU, "--first-length", type=int, default=DEMO_FIRST_LENGTH,
          help=f"vocoder first step B (default {DEMO_FIRST_LENGTH}: the first audio sooner)")
    f.add(NPU, "--formulation", choices=CHOICES, default=DEFAULT_FORMULATION)
    f.add(NPU, "--skip-sim", action="store_true", help="no simulator verification")
    p.set_defaults(func=run)


SENTENCE = "Hello from the Rockchip NPU. This sentence went through the talker, the code predictor and the vocoder."


def run(args: argparse.Namespace) -> int:
    from rkspeech.cli.build_tts import summary_rows
    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.pipelines.tts_build import build_tts
    from rkspeech.pipelines.tts_options import TTSBuildOptions

    if args.speech_frames < 0:
        raise RkspeechError(f"--speech-frames must be >= 0, got {args.speech_frames}")
    out = check_writable(args.out_dir, what="output", folder=True)
    ckpt = out / f"model-{args.config}-custom-voice"
    if not (ckpt / "config.json").is_file():  # written last: a root with config.json is complete
        with progress.stage(f"synthetic {args.config} Qwen3-TTS model (custom voice)"):
            write_tts_checkpoint(ckpt, args.config, "custom-voice", seed=0)
    build_dir = out / (f"build-{args.config}-{args.formulation}-{args.target}-B{args.codes_length}"
                       f"-first{args.first_length}-cpu-int4")
    summary = build_tts(TTSBuildOptions(
        out_dir=build_dir, model_dir=ckpt, target=args.target, codes_length=args.codes_length,
        first_length=args.first_length, formulation=args.formulation, skip_sim=args.skip_sim,
        gate="warn", **CPU_PLACEMENT))
    print_table("qwen3-tts build (NPU numerics from the x86 simulator; no board here)", summary_rows(summary))
    gate = summary.get("accuracy_gate") or {}
    if not gate.get("passed", True):
        progress.info("accuracy gate: failed, as it must on synthetic weights (flat random logits, a talker that "
                      "never stops); the plan was written with its warning (--gate warn), as docs/accuracy-gate.md "
                      "says to build an untrained root")
    rows = _build_rows(summary)
    if args.speech_frames:
        rows += _speak(ckpt, summary["plan"], out / "speech.wav", args.speech_frames)
    rows += _estimate(summary["plan"], args.target)
    print_table("rkspeech demo: the plan a board runs (CPU int4 talker + code predictor, NPU vocoder)", rows)
    return 0


def _build_rows(summary: dict) -> list[tuple]:
    """Ops per graph, the simulator's dB and the gate's verdict, one row each."""
    from rkspeech.core.compare import db_text

    rows = []
    for name, row in summary["graphs"].items():
        roles = row.get("roles") or ({"": row} if row.get("placement") else {})
        for role, conv in roles.items():
            pl = conv["placement"]
            rows.append((f"{name} {role}".strip(), f"NPU: {pl.get('npu_ops')} NPU / {pl.get('cpu_ops')} CPU ops, "
                                                   f"{(conv.get('build') or {}).get('regtask_overflow_lines')} "
                                                   "REGTASK lines"))
        cpu = row.get("cpu")
        if not roles and cpu:
            q = cpu.get("quantization") or {}
            rows.append((name, f"CPU: {cpu['placement']} on onnxruntime"
                               + (f" (block {q['block_size']}{', symmetric' if q.get('symmetric') else ''})"
                                  if q.get("bits") == 4 else "")))
    voc = (summary["graphs"].get("vocoder") or {}).get("verify")
    if voc:
        rows.append(("vocoder on the simulator", f"{db_text(voc['snr_db']['rknn_sim_step'])} dB against the full decode"))
    gate = summary.get("accuracy_gate") or {}
    if gate:
        rows.append(("accuracy gate", "passed" if gate.get("passed") else
                     "FAILED (expected on synthetic weights; built with --gate warn)"))
    return rows


def _speak(model_dir, plan, wav_path, frames: int) -> list[tuple]:
    """A sentence streamed into ``wav_path`` through the plan with the numpy host loop."""
    import time

    from rkspeech.core import progress
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import DEFAULT_SEED, Speaker, SpeechTiming
    from rkspeech.runtime.wav import WavWriter

    with progress.stage("load the plan: int4 talker and code predictor, the vocoder's host graph (onnxruntime)"):
        speaker = Speaker(model_dir, plan, backend="ort", host="numpy",
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
    first = f"{timing.first_audio_s:.2f} s" if timing.first_audio_s is not None else "-"
    return [
        ("speech", f"{wav_path} ({audio_s:.2f} s of audio, {timing.frames} frames; voice {voice}: synthetic weights, "
                   "not speech)"),
        ("on this host (measured)", (f"real-time factor {seconds / audio_s:.2f}, first audio {first} "
                                     f"({speaker.host} host loop; vocoder on onnxruntime)")
         if audio_s else f"{seconds:.2f} s"),
    ]


def _estimate(plan, target: str) -> list[tuple]:
    """``estimate --plan``'s figures for the board (an estimate: every assumption in its report)."""
    from rkspeech.estimate.assumptions import PlanAssumptions
    from rkspeech.estimate.plan_time import estimate_plan

    chip = target if target in ("rk3588", "rk3576") else "rk3588"
    rep = estimate_plan(plan, PlanAssumptions(chip=chip))
    t = rep.get("time_to_first_audio") or {}
    first = f", first audio {t['ms'] / 1000:.2f} s" if t else ""
    sp = rep.get("speak_schedule") or {}
    as_speak = f" ({sp['rtf']:.2f} with speak's small vocoder steps)" if sp.get("rtf") else ""
    return [(f"on an {chip.upper()} (estimate)",
             f"real-time factor {rep['rtf']:.2f}{as_speak}{first}, limited by {rep['limiting_stage']} "
             f"(no board here: rkspeech estimate --plan B/plan.json prints every assumption)")]
