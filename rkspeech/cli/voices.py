"""``rkspeech voices``: a Qwen3-TTS model's variant, speakers and languages, from its
``config.json`` (no torch: it answers on a board), and with ``--plan`` the voices saved beside a
Base plan.  The names are what ``speak --speaker`` / ``--voice`` take and what ``serve`` lists as
Wyoming voices and OpenAI ``voice`` values; the languages what ``--language`` takes.  JSON with
``--json``; a short table otherwise.

``rkspeech voices save NAME --plan PLAN --ref-audio WAV [--ref-text TEXT]``: a recording's clone
prompt made once by the plan's encoder graphs and kept beside the plan
(``runtime.tts.saved_voices``)."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import INPUT, Flags


def register(subparsers) -> None:
    p = subparsers.add_parser("voices", help="a Qwen3-TTS model's speakers, languages and variant (config.json; no "
                                             "torch), the voices saved beside a plan; voices save: save one")
    f = Flags(p, "voices")
    f.add(None, "--model-dir", default=None, metavar="DIR",
          help="Qwen3-TTS model folder (default: $QWEN3_TTS_MODEL, as speak)")
    f.add(None, "--plan", default=None, help="a Base model's plan.json: list the voices saved beside it too")
    f.add(None, "--json", action="store_true", help="print the JSON report on stdout")
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="voices_command", metavar="{save}")
    s = sub.add_parser("save", help="save a recording's voice beside a Base plan, to speak it by name")
    g = Flags(s, "voices save")
    g.add(INPUT, "name", help="the voice's name (letters, digits, '-', '_', '.')")
    g.add(INPUT, "--plan", required=True, help="plan.json from `rkspeech build qwen3-tts` on a Base model")
    g.add(INPUT, "--model-dir", default=None, metavar="DIR",
          help="the plan's Qwen3-TTS model root (default $QWEN3_TTS_MODEL)")
    g.add(INPUT, "--ref-audio", required=True, help="a recording of the voice (any format PyAV reads)")
    g.add(INPUT, "--ref-text", default=None,
          help="its transcript: the voice clones in context (the recording's codes lead every prompt)")
    g.add(None, "--force", action="store_true", help="replace a saved voice of that name")
    g.threads(None, "onnxruntime (intra-op)")
    s.set_defaults(func=run_save)


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.models.qwen3_tts.voices import model_voices

    report = model_voices(args.model_dir)
    if args.plan is not None:
        from rkspeech.runtime.tts.saved_voices import listed_voices

        report["saved_voices"] = listed_voices(args.plan, report["variant"])
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    size = f" ({report['size']})" if report["size"] else ""
    print(f"{report['model_dir']}: Qwen3-TTS {report['variant']}{size}")
    speakers = [s["name"] + (f" ({s['dialect']})" if s["dialect"] else "") for s in report["speakers"]]
    print(f"speakers ({len(speakers)}): {', '.join(speakers) if speakers else 'none: ' + report['note']}")
    if "saved_voices" in report:
        saved = [v["name"] + (" (in context)" if v["in_context"] else "") for v in report["saved_voices"]]
        print(f"saved voices ({len(saved)}): {', '.join(saved) if saved else 'none (rkspeech voices save)'}")
    print(f"languages ({len(report['languages'])}): {', '.join(report['languages'])}")
    return 0


def run_save(args: argparse.Namespace) -> int:
    from rkspeech.core import progress
    from rkspeech.runtime.tts.saved_voices import save_from_recording

    with progress.stage(f"encode {args.ref_audio} with the plan's clone encoders"):
        path, voice = save_from_recording(args.plan, args.model_dir, args.name, args.ref_audio, args.ref_text,
                                          replace=args.force, threads=args.threads)
    how = f"in context ({voice.ref_codes.shape[0]} reference frames)" if voice.in_context else "from its x-vector"
    print(f"saved voice {voice.name!r} ({how}) as {path}; speak it with: rkspeech speak --plan {args.plan} "
          f"--voice {voice.name} ...")
    return 0
