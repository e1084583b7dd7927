"""The speech tokenizer's ``decoder_config``: the one description of a vocoder's shape.

Defaults are the published 12 Hz values (the ``decoder_config`` of the published checkpoints'
``speech_tokenizer/config.json``, as qwen-tts 0.1.1 defines them).

``from_dict`` validates what a ``config.json`` says before anything is built from it: types
(an integer must be a JSON integer, not ``"128"``), ranges, the divisibility the layers need
(attention heads by key/value heads, an even head_dim for RoPE, decoder_dim halved once per
upsampling block) and a size bound: the estimated parameter and cache count may not pass
``MAX_SIZE_FACTOR`` times the published model's, so a typo such as ``hidden_size: 10000000``
is an error naming the key, not a multi-GB allocation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from rkspeech.core.errors import RkspeechError

MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
#: A config may describe at most this many times the published model's estimated size.
MAX_SIZE_FACTOR = 20

_INT_KEYS = ("codebook_size", "codebook_dim", "latent_dim", "hidden_size", "intermediate_size", "head_dim",
             "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "sliding_window",
             "num_quantizers", "decoder_dim", "sample_rate")
_POSITIVE_FLOAT_KEYS = ("rope_theta", "rms_norm_eps")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class VocoderConfig:
    """``decoder_config`` of the speech tokenizer; defaults are the published 12 Hz values."""

    codebook_size: int = 2048
    codebook_dim: int = 512
    latent_dim: int = 1024
    hidden_size: int = 512
    intermediate_size: int = 1024
    head_dim: int = 64
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    num_hidden_layers: int = 8
    sliding_window: int = 72
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    layer_scale_initial_scale: float = 0.01
    num_quantizers: int = 16
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536
    attention_bias: bool = False
    hidden_act: str = "silu"
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, d: dict) -> VocoderConfig:
        """A validated config from ``decoder_config``; raises RkspeechError naming the key."""
        if not isinstance(d, dict):
            raise RkspeechError(f"decoder_config must be an object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in _INT_KEYS:
            if key in kw and (not _is_int(kw[key]) or kw[key] < 1):
                raise RkspeechError(f"{key} must be a positive integer, got {kw[key]!r}")
        for key in _POSITIVE_FLOAT_KEYS:
            if key in kw and (not _is_number(kw[key]) or kw[key] <= 0):
                raise RkspeechError(f"{key} must be a positive number, got {kw[key]!r}")
        if "layer_scale_initial_scale" in kw and not _is_number(kw["layer_scale_initial_scale"]):
            raise RkspeechError(f"layer_scale_initial_scale must be a number, got {kw['layer_scale_initial_scale']!r}")
        if "attention_bias" in kw and not isinstance(kw["attention_bias"], bool):
            raise RkspeechError(f"attention_bias must be true or false, got {kw['attention_bias']!r}")
        if "hidden_act" in kw and not isinstance(kw["hidden_act"], str):
            raise RkspeechError(f"hidden_act must be a string, got {kw['hidden_act']!r}")
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in kw:
                v = kw[key]
                if not isinstance(v, (list, tuple)) or not v or not all(_is_int(x) and x >= 1 for x in v):
                    raise RkspeechError(f"{key} must be a non-empty list of positive integers, got {v!r}")
                kw[key] = tuple(v)
        cfg = cls(**kw)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Relations between keys and the size bound (types are checked by ``from_dict``)."""
        if self.num_attention_heads % self.num_key_value_heads:
            raise RkspeechError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise RkspeechError(f"head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        if self.sliding_window < 2:
            raise RkspeechError(f"sliding_window must be >= 2, got {self.sliding_window}")
        halvings = 2 ** len(self.upsample_rates)
        if self.decoder_dim % halvings:
            raise RkspeechError(f"decoder_dim ({self.decoder_dim}) must be divisible by {halvings} "
                                f"(halved in each of the {len(self.upsample_rates)} upsample_rates blocks)")
        size, published = self.estimated_size(), VocoderConfig().estimated_size()
        if size > MAX_SIZE_FACTOR * published:
            key = max(_INT_KEYS, key=lambda k: getattr(self, k) / getattr(VocoderConfig, k))
            raise RkspeechError(
                f"the config describes ~{size / 1e6:,.0f} M parameters and cache values, more than "
                f"{MAX_SIZE_FACTOR}x the published model's ~{published / 1e6:,.0f} M; check {key} "
                f"({getattr(self, key)}; published {getattr(VocoderConfig, key)})")

    def estimated_size(self) -> int:
        """Weights plus one step's cache, counted from the layer shapes (an estimate that
        grows as the real model does; for the size bound only)."""
        h, heads, kv, hd, inter = (self.hidden_size, self.num_attention_heads, self.num_key_value_heads,
                                   self.head_dim, self.intermediate_size)
        quantizer = self.num_quantizers * self.codebook_size * self.codebook_dim + 2 * self.codebook_dim * self.latent_dim
        attn = h * hd * (2 * heads + 2 * kv)
        mlp = 3 * h * inter
        transformer = self.num_hidden_layers * (attn + mlp) + 2 * self.latent_dim * h
        upsample = len(self.upsampling_ratios) * 10 * self.latent_dim ** 2
        decoder = 7 * self.latent_dim * self.decoder_dim + sum(
            2 * r * i * o + 3 * 8 * o * o for r, (i, o) in zip(self.upsample_rates, self.decoder_block_dims))
        cache = self.num_hidden_layers * 2 * kv * (self.sliding_window - 1) * hd
        return quantizer + transformer + upsample + decoder + cache

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["upsample_rates"] = list(self.upsample_rates)
        d["upsampling_ratios"] = list(self.upsampling_ratios)
        return d

    @property
    def samples_per_token(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)

    @property
    def decoder_block_dims(self) -> list[tuple[int, int]]:
        """(in_dim, out_dim) of each upsampling decoder block."""
        return [
            (self.decoder_dim // 2**i, self.decoder_dim // 2 ** (i + 1))
            for i in range(len(self.upsample_rates))
        ]

    @property
    def output_dim(self) -> int:
        return self.decoder_dim // 2 ** len(self.upsample_rates)
