"""The talker contract: a decoder stack as a fixed-shape step graph with a host-kept KV cache.

The graph I/O it describes is in ``stepgraph/talker_step.py`` (``TalkerStep``).  The code
predictor's per-codebook step graph is the same kind over the code predictor's stack, named
``CODE_PREDICTOR_STEP_MODEL`` (B = 1, capacity = its code groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rkspeech.contracts.base import Contract
from rkspeech.core.errors import RkspeechError

CONTRACT_FORMAT = "rkspeech-talker/1"
MODEL_NAME = "qwen3-tts-talker"
CODE_PREDICTOR_STEP_MODEL = "qwen3-tts-code-predictor-step"
#: positions of the code predictor's start graph: the talker's hidden state and codebook 0's embedding
CODE_PREDICTOR_START_B = 2
KV_LAYOUTS = ("heads", "grouped")
CACHE_IO = ("flat", "layers")
OUTPUT_NAMES = ("hidden", "kv_new")
#: Additive mask value; finite so it survives fp16 (exp underflows to 0 either way).
MASK_VALUE = -30000.0


@dataclass(frozen=True)
class TalkerContract(Contract):
    FORMAT = CONTRACT_FORMAT
    KIND = "talker"

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    capacity: int
    B: int
    rope_theta: float
    rms_norm_eps: float
    kv_layout: str = "heads"
    cache_io: str = "flat"
    fingerprint: str = ""
    model: str = MODEL_NAME
    #: the additive mask's "no" value (``step_mask``); -20 in an int16-hybrid graph (INT16_LIMIT)
    mask_value: float = MASK_VALUE

    @property
    def cache_heads(self) -> int:
        return self.heads if self.kv_layout == "heads" else self.kv_heads

    @property
    def mask_rows(self) -> int:
        return self.B * self.heads // self.cache_heads

    @property
    def state_numel(self) -> int:
        n = 1
        for d in self.cache_shape():
            n *= d
        return n

    def cache_shape(self) -> tuple[int, int, int, int]:
        """The host's buffer: ``[2L, Hc, cap, hd]`` (layer i: keys 2i, values 2i+1)."""
        return (2 * self.layers, self.cache_heads, self.capacity, self.head_dim)

    def input_shapes(self) -> dict[str, list[int]]:
        shapes = {"embeds": [self.B, self.hidden], "cos": [self.B, self.head_dim], "sin": [self.B, self.head_dim],
                  "mask": [self.mask_rows, self.capacity + self.B]}
        if self.cache_io == "flat":
            shapes["cache"] = list(self.cache_shape())
        else:
            for i in range(self.layers):
                for kv in "kv":
                    shapes[f"cache_{kv}{i}"] = [1, self.cache_heads, self.capacity, self.head_dim]
        return shapes

    def output_shapes(self) -> dict[str, list[int]]:
        return {"hidden": [self.B, self.hidden],
                "kv_new": [2 * self.layers, self.cache_heads, self.B, self.head_dim]}

    def same_model(self, other: TalkerContract) -> bool:
        """Same stack and cache layout (B may differ): prefill and decode graphs share a cache."""
        keys = ("hidden", "layers", "heads", "kv_heads", "head_dim", "capacity", "rope_theta", "rms_norm_eps",
                "kv_layout", "fingerprint", "model", "mask_value")
        return all(getattr(self, k) == getattr(other, k) for k in keys)

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONTRACT_FORMAT, "model": self.model, "Ht": self.hidden, "layers": self.layers,
                "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "capacity": self.capacity, "B": self.B, "rope_theta": self.rope_theta, "eps": self.rms_norm_eps,
                "kv_layout": self.kv_layout, "cache_io": self.cache_io, "fingerprint": self.fingerprint,
                "mask_value": self.mask_value, "outputs": list(self.output_names)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TalkerContract:
        try:
            c = cls(hidden=int(d["Ht"]), layers=int(d["layers"]), heads=int(d["heads"]), kv_heads=int(d["kv_heads"]),
                    head_dim=int(d["head_dim"]), capacity=int(d["capacity"]), B=int(d["B"]),
                    rope_theta=float(d["rope_theta"]), rms_norm_eps=float(d["eps"]), kv_layout=str(d["kv_layout"]),
                    cache_io=str(d["cache_io"]), fingerprint=str(d.get("fingerprint", "")),
                    model=str(d.get("model", MODEL_NAME)), mask_value=float(d.get("mask_value", MASK_VALUE)))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise RkspeechError(f"talker contract is malformed: {exc!r}") from None
        if c.kv_layout not in KV_LAYOUTS or c.cache_io not in CACHE_IO:
            raise RkspeechError(f"talker contract is malformed: kv_layout {c.kv_layout!r} / cache_io {c.cache_io!r}")
        if min(c.B, c.capacity, c.layers, c.heads, c.kv_heads) < 1 or c.heads % c.kv_heads:
            raise RkspeechError(f"talker contract is malformed: {d}")
        return c
