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

    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_decoder_state, resolve_checkpoint
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


# -- the full Qwen3-TTS model (talker, code predictor, speaker encoder) -----------------------------

TTS_MODULE = "qwen_tts.core.models.modeling_qwen3_tts"


def official_tts_module():
    """``qwen_tts.core.models.modeling_qwen3_tts`` without the package ``__init__`` files.

    The module imports ``librosa.filters.mel`` (installed for the tests: ``librosa==0.11.0``) and
    ``qwen_tts.inference.qwen3_tts_tokenizer``, whose import chain (``qwen_tts.core.__init__``)
    pulls the 25 Hz tokenizer and torchaudio; the generation path never uses it, so that one module
    is registered as a stand-in whose ``Qwen3TTSTokenizer.from_pretrained`` returns None.
    """
    _register_bare_packages()
    path = sys.modules["qwen_tts"].__path__[0]
    for name, sub in (("qwen_tts.core.models", "core/models"), ("qwen_tts.inference", "inference")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [os.path.join(path, sub)]
            sys.modules[name] = module
    stub = "qwen_tts.inference.qwen3_tts_tokenizer"
    if stub not in sys.modules:
        module = types.ModuleType(stub)

        class Qwen3TTSTokenizer:  # stand-in: the speech tokenizer is not needed to generate codes
            @classmethod
            def from_pretrained(cls, *args, **kwargs):
                return None

        module.Qwen3TTSTokenizer = Qwen3TTSTokenizer
        sys.modules[stub] = module
    return importlib.import_module(TTS_MODULE)


def load_official_tts(model_dir, dtype=None):
    """``Qwen3TTSForConditionalGeneration.from_pretrained`` (eager attention, float32) and the
    processor ``Qwen3TTSModel.from_pretrained`` loads (``AutoProcessor``, ``fix_mistral_regex=True``:
    a ``Qwen3TTSProcessor`` around the ``Qwen2TokenizerFast`` built from vocab.json/merges.txt).
    Call the processor as qwen-tts does: ``processor(text=s)["input_ids"][0]``."""
    import logging

    import torch
    from transformers import AutoConfig, AutoProcessor

    modeling = official_tts_module()
    configuration = importlib.import_module("qwen_tts.core.models.configuration_qwen3_tts")
    processing = importlib.import_module("qwen_tts.core.models.processing_qwen3_tts")
    try:
        AutoConfig.register("qwen3_tts", configuration.Qwen3TTSConfig)
        AutoProcessor.register(configuration.Qwen3TTSConfig, processing.Qwen3TTSProcessor)
    except ValueError:
        pass  # registered by an earlier call
    model = modeling.Qwen3TTSForConditionalGeneration.from_pretrained(
        str(model_dir), dtype=dtype or torch.float32, attn_implementation="eager", local_files_only=True)
    # transformers 4.57.3 warns that a local folder whose config.json says 4.57.3 may hold a Mistral
    # regex; with qwen-tts' fix_mistral_regex=True the Qwen2 pre-tokenizer is kept (checked: same ids).
    logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
    processor = AutoProcessor.from_pretrained(str(model_dir), fix_mistral_regex=True)
    return model.eval(), processor


def official_codes(model, tokenizer, text, *, speaker=None, language="auto", instruct=None, ref_audio=None,
                   ref_text=None, ref_codes=None, non_streaming_mode=False, max_new_tokens=20, **sampling):
    """Codes ``[T, 16]`` from qwen-tts' ``generate``, with the prompts its ``Qwen3TTSModel`` wrapper
    builds (``_build_assistant_text`` / ``_build_instruct_text`` / ``_build_ref_text``; the clone
    prompt is x-vector only, or ICL when ``ref_codes`` and ``ref_text`` are given)."""
    import numpy as np
    import torch

    def ids(s):  # Qwen3TTSModel._tokenize_texts
        return tokenizer(text=s, return_tensors="pt", padding=True)["input_ids"]

    kw = dict(do_sample=False, subtalker_dosample=False, repetition_penalty=1.05, top_k=50, top_p=1.0,
              temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9)
    kw.update(sampling)
    input_ids = [ids(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")]
    extra = {}
    if instruct:
        extra["instruct_ids"] = [ids(f"<|im_start|>user\n{instruct}<|im_end|>\n")]
    if speaker:
        extra["speakers"] = [speaker]
    if ref_audio is not None:
        emb = model.extract_speaker_embedding(np.asarray(ref_audio, dtype=np.float32), 24000)
        icl = ref_codes is not None
        extra["voice_clone_prompt"] = {"ref_code": [torch.from_numpy(np.asarray(ref_codes)) if icl else None],
                                       "ref_spk_embedding": [emb], "x_vector_only_mode": [not icl],
                                       "icl_mode": [icl]}
        if icl:
            extra["ref_ids"] = [ids(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")]
    with torch.no_grad():
        codes, _ = model.generate(input_ids=input_ids, languages=[language], non_streaming_mode=non_streaming_mode,
                                  max_new_tokens=max_new_tokens, **extra, **kw)
    return codes[0].numpy().astype(np.int64)
