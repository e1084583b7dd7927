"""What a Qwen3-TTS model root offers a request -- its variant, speakers (with their dialects) and
languages -- read from its ``config.json`` alone: standard library only, so ``rkspeech voices``
answers on a board without torch and before any graph is built.  The lists are the ones the
loaded model gives ``speak`` and ``serve`` (``TTSConfig.speakers`` / ``.languages``: one rule)."""

from __future__ import annotations

from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root

#: how a model without named speakers is given a voice (the ``speak`` flag that does it)
NO_SPEAKERS = {"base": "a base model clones the voice of a recording (speak --ref-audio)",
               "voice-design": "a voice-design model speaks the voice a text describes (speak --instruct)"}


def model_voices(model_dir) -> dict:
    """{"model_dir", "variant", "size", "speakers": [{"name", "dialect"}], "languages", "note"};
    ``RkspeechError`` (one line) for a missing folder or a bad ``config.json``."""
    files = resolve_model_root(model_dir)
    cfg = read_tts_config(files)
    dialects = cfg.dialects
    return {"model_dir": str(files.root), "variant": cfg.variant, "size": cfg.tts_model_size or None,
            "speakers": [{"name": s, "dialect": dialects.get(s.lower())} for s in cfg.speakers],
            "languages": cfg.languages, "note": NO_SPEAKERS.get(cfg.variant)}
