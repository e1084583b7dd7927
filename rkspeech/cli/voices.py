"""``rkspeech voices --model-dir DIR``: a Qwen3-TTS model's variant, speakers and languages, from
its ``config.json`` (no torch: it answers on a board).  The speaker names are what ``speak
--speaker`` takes and what ``serve`` lists as Wyoming voices and OpenAI ``voice`` values; the
languages what ``--language`` takes.  JSON with ``--json``; a short table otherwise."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import Flags


def register(subparsers) -> None:
    p = subparsers.add_parser("voices", help="a Qwen3-TTS model's speakers, languages and variant (config.json; no torch)")
    f = Flags(p, "voices")
    f.add(None, "--model-dir", default=None, metavar="DIR",
          help="Qwen3-TTS model folder (default: $QWEN3_TTS_MODEL, as speak)")
    f.add(None, "--json", action="store_true", help="print the JSON report on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.models.qwen3_tts.voices import model_voices

    report = model_voices(args.model_dir)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    size = f" ({report['size']})" if report["size"] else ""
    print(f"{report['model_dir']}: Qwen3-TTS {report['variant']}{size}")
    speakers = [s["name"] + (f" ({s['dialect']})" if s["dialect"] else "") for s in report["speakers"]]
    print(f"speakers ({len(speakers)}): {', '.join(speakers) if speakers else 'none: ' + report['note']}")
    print(f"languages ({len(report['languages'])}): {', '.join(report['languages'])}")
    return 0
