"""Sampling for the Qwen3-TTS loop: ``GenerationOptions`` (qwen-tts' names and defaults), the
HF-style warpers with multinomial or argmax (``choose_token``) and the repetition penalty
(``penalize``), exactly as qwen-tts 0.1.1 applies them (greedy codes identical: tests/test_tts_generate.py)."""

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


def choose_token(logits, opts_sample: bool, temperature: float, top_k: int, top_p: float, generator):
    """HF warpers (temperature, top-k, top-p) then multinomial, or argmax; ``logits [V]`` float32."""
    import torch

    if not opts_sample:
        return int(torch.argmax(logits))
    scores = logits / temperature if temperature != 1.0 else logits.clone()
    if top_k:
        k = min(top_k, scores.shape[-1])
        kth = torch.topk(scores, k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum <= (1 - top_p)
        remove[-1] = False
        scores = scores.masked_fill(remove.scatter(0, sorted_idx, remove), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def penalize(logits, history: list[int], penalty: float):
    if penalty == 1.0 or not history:
        return logits
    import torch

    idx = torch.tensor(history, dtype=torch.long)
    score = logits.gather(0, idx)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(0, idx, score)
