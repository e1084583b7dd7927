"""The official Qwen3-TTS 12 Hz decoder, loaded for parity tests and benchmarks only.

Needs PyPI ``qwen-tts==0.1.1`` (installed with ``--no-deps``) and ``transformers==4.57.3``; the
product never imports this module.  ``import qwen_tts`` runs a package ``__init__`` that pulls
librosa, sox, torchaudio and more, none of which the 12 Hz decoder uses, so the three parent
packages are registered as bare namespace-like modules (located with ``find_spec``, ``__path__``
set, ``__init__`` not executed) before the one module we need is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

from rkspeech.core.errors import RkspeechError

MODULE = "qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2"
CONFIG_MODULE = "qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2"


def _register_bare_packages() -> None:
    if "qwen_tts.core.tokenizer_12hz" in sys.modules:
        return
    spec = importlib.util.find_spec("qwen_tts")
    if spec is None or not spec.submodule_search_locations:
        raise RkspeechError("the official reference needs qwen-tts: pip install --no-deps qwen-tts==0.1.1")
    path = list(spec.submodule_search_locations)[0]
    for name, sub in (("qwen_tts", ""), ("qwen_tts.core", "core"), ("qwen_tts.core.tokenizer_12hz", "core/tokenizer_12hz")):
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(path, sub) if sub else path]
        sys.modules[name] = module


def official_modules():
    """(modeling module, configuration module) of the official 12 Hz tokenizer."""
    _register_bare_packages()
    return importlib.import_module(MODULE), importlib.import_module(CONFIG_MODULE)


def load_official_decoder(model_dir):
    """The official ``Qwen3TTSTokenizerV2Decoder`` with the checkpoint's decoder weights."""
    import torch

    from rkspeech.models.qwen3_tts.checkpoint import read_decoder_state, resolve_checkpoint
    import json

    modeling, configuration = official_modules()
    files = resolve_checkpoint(model_dir)
    raw = json.loads(files.config.read_text())
    cfg = configuration.Qwen3TTSTokenizerV2DecoderConfig(**raw["decoder_config"])
    cfg._attn_implementation = "eager"
    decoder = modeling.Qwen3TTSTokenizerV2Decoder(cfg)
    state = read_decoder_state(files)
    with torch.no_grad():
        missing, unexpected = decoder.load_state_dict(state, strict=False)
    if [k for k in missing if not k.endswith("inv_freq")] or unexpected:
        raise RkspeechError(f"official decoder key mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return decoder.eval()
