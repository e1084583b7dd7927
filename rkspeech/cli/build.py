"""``rkspeech build MODEL ...``: the whole road from checkpoint to verified .rknn for one model.

The first positional picks the model; each model's flags and summary live in their own CLI
module (``add_arguments(parser)``, ``run(args) -> int``), and the work in ``rkspeech.pipelines``.
"""

from __future__ import annotations

from rkspeech.cli import build_asr, build_tts, build_vocoder, build_whisper

#: model name -> CLI module
BUILDERS = {
    "whisper-encoder": build_whisper,
    "qwen3-tts-vocoder": build_vocoder,
    "qwen3-tts": build_tts,
    "qwen3-asr": build_asr,
}


def register(subparsers) -> None:
    p = subparsers.add_parser("build", help="checkpoint -> ONNX -> .rknn -> simulator check, for one model")
    models = p.add_subparsers(dest="model_kind", metavar="MODEL")
    for name, module in BUILDERS.items():
        sub = models.add_parser(name, help=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
