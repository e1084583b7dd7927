"""``rkspeech build MODEL ...``: the whole road from checkpoint to verified .rknn for one model.

The first positional picks the model; each model's builder is its own module exposing
``add_arguments(parser)`` and ``run(args) -> int``, imported only when chosen:

* ``whisper-encoder``   -> ``rkspeech.whisper_build``
* ``qwen3-tts-vocoder`` -> ``rkspeech.vocoder_build``
"""

from __future__ import annotations

import argparse
import importlib

#: model name -> builder module (imported lazily: each pulls torch/onnx/rknn when it runs)
BUILDERS = {
    "whisper-encoder": ("rkspeech.whisper_build", "Whisper encoder: fixed 30 s window -> .rknn"),
    "qwen3-tts-vocoder": ("rkspeech.vocoder_build", "Qwen3-TTS 12 Hz vocoder step graph -> .rknn"),
}


def register(subparsers) -> None:
    p = subparsers.add_parser("build", help="checkpoint -> ONNX -> .rknn -> simulator check, for one model")
    models = p.add_subparsers(dest="model_kind", metavar="MODEL")
    for name, (module_name, help_text) in BUILDERS.items():
        sub = models.add_parser(name, help=help_text)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            sub.set_defaults(func=_missing(name, module_name))
            continue
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _missing(name: str, module_name: str):
    def run(args: argparse.Namespace) -> int:
        from ..errors import RkspeechError

        raise RkspeechError(f"`rkspeech build {name}` is not available in this checkout ({module_name} missing)")

    return run
