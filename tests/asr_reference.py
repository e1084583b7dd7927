"""The official Qwen3-ASR package (PyPI ``qwen-asr==0.0.6``, installed with ``--no-deps``), loaded for
tests and benchmarks only; the product never imports it.

``import qwen_asr`` runs the package ``__init__``, which imports the forced aligner, whose module
imports ``nagisa`` (a Japanese word segmenter, not installable here) at its top; ``transcribe``
never uses it (only ``return_time_stamps=True`` does).  So, only when the real import fails, an
empty module stands under that name (with a ``__spec__``, so an availability probe sees no
installed distribution).  The rest of the transformers path needs nothing beyond the pinned
transformers, librosa and soundfile.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from pathlib import Path

STAND_INS = ("nagisa",)
_LOADED: dict = {}


def _stand_ins() -> None:
    for name in STAND_INS:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module


def qwen_asr():
    """The ``qwen_asr`` package (with the stand-ins it needs)."""
    _stand_ins()
    return importlib.import_module("qwen_asr")


def official_asr(root, *, max_new_tokens: int = 8):
    """``Qwen3ASRModel.from_pretrained(root)`` in float32 on CPU with eager attention, cached per
    root (resolved path).  ``transcribe(audio=(wave, 16000))`` then runs the official pipeline:
    the processor (``AutoProcessor``, ``fix_mistral_regex=True``), greedy ``generate``, decoding
    and ``parse_asr_output``.  ``max_new_tokens`` is set on each call (the cached model is shared)."""
    import logging

    import torch

    key = str(Path(root).resolve())
    model = _LOADED.get(key)
    if model is None:
        package = qwen_asr()
        # transformers 4.57 logs (at warning level) that a local folder whose config.json names a
        # transformers newer than 4.57.2 may hold a Mistral tokenizer regex; qwen-asr passes
        # fix_mistral_regex=True, which is what the published roots are loaded with.
        logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
        model = package.Qwen3ASRModel.from_pretrained(key, dtype=torch.float32,
                                                      attn_implementation="eager", local_files_only=True)
        model.model.eval()
        _LOADED[key] = model
    model.max_new_tokens = max_new_tokens
    return model
