"""The speech tokenizer's ``decoder_config``: the one description of a vocoder's shape.

Defaults are the published 12 Hz values (the ``decoder_config`` of the published checkpoints'
``speech_tokenizer/config.json``, as qwen-tts 0.1.1 defines them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

MODEL_TYPE = "qwen3_tts_tokenizer_12hz"


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
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in kw:
                kw[key] = tuple(int(x) for x in kw[key])
        return cls(**kw)

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
