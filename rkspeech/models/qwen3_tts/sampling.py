"""Sampling options of the Qwen3-TTS loop: ``GenerationOptions`` (qwen-tts' names and defaults).

The samplers that apply them are the hosts': ``torch_host.choose_token`` / ``penalize`` (exactly
as qwen-tts 0.1.1 applies them: greedy codes identical, tests/models/test_tts_generate.py) and
``numpy_host.choose_token`` / ``penalize`` (the same distribution, another random stream)."""

from __future__ import annotations

from dataclasses import dataclass

from rkspeech.core.errors import RkspeechError


@dataclass(frozen=True)
class GenerationOptions:
    """Sampling controls (qwen-tts names). The defaults are qwen-tts 0.1.1's hard defaults
    (``Qwen3TTSModel._merge_generate_kwargs``; the published generation_config.json repeats them,
    with max_new_tokens 8192). ``greedy()`` gives argmax decoding for both stages."""
    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    subtalker_repetition_penalty: float = 1.0  # qwen-tts applies none; 1.0 keeps parity
    max_new_tokens: int = 2048
    seed: int | None = None
    #: None: the checkpoint's recorded prompt form (``TTSConfig.default_text_in_prompt``), else
    #: qwen-tts' default per mode (True for custom voice and voice design, False for clone).
    text_in_prompt: bool | None = None

    @classmethod
    def greedy(cls, **kw) -> GenerationOptions:
        return cls(do_sample=False, subtalker_dosample=False, **kw)

    def check(self) -> None:
        for name in ("temperature", "subtalker_temperature", "repetition_penalty", "subtalker_repetition_penalty"):
            v = getattr(self, name)
            if not v > 0:
                raise RkspeechError(f"{name} must be > 0, got {v!r}")
        for name in ("top_p", "subtalker_top_p"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise RkspeechError(f"{name} must be in (0, 1], got {v!r}")
        for name in ("top_k", "subtalker_top_k"):
            if getattr(self, name) < 0:
                raise RkspeechError(f"{name} must be >= 0 (0: off), got {getattr(self, name)!r}")
        if self.max_new_tokens < 1:
            raise RkspeechError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
