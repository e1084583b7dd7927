"""What the host computes for each step: RoPE angles and the KV slot count (numpy only).

The step graph takes ``freqs_in = (position * inv_freq) mod 2*pi`` rather than positions or
cos/sin: cos/sin as graph inputs broke the seed project's fp16 pipeline, and raw angles near position
1e3 sit on an fp16 ulp of 0.5 (seed, measured on a board).  The product is formed in float64
from the model's float32 ``inv_freq`` (the values torch computes), so a 3,000-token stream keeps
its angles exact to float32 rounding instead of drifting by ``pos * ulp``.
"""

from __future__ import annotations

import numpy as np


def inverse_frequencies(head_dim: int, rope_theta: float) -> np.ndarray:
    """RoPE inverse frequencies as float32, computed the way the model's torch code does."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(rope_theta) ** exponents)).astype(np.float32)


def rope_angles(start: int, count: int, inv_freq: np.ndarray) -> np.ndarray:
    """``[count, head_dim/2]`` float32 angles for positions ``start .. start+count-1``."""
    pos = np.arange(start, start + count, dtype=np.float64)[:, None]
    angles = np.mod(pos * inv_freq.astype(np.float64)[None, :], 2.0 * np.pi)
    return angles.astype(np.float32)


def cache_valid(position: int, kv_slots: int) -> np.ndarray:
    """``[1]`` float32: the COUNT of real KV slots before a step at ``position``.

    A 0/1 "has history" flag instead leaks ``kv_slots - B`` phantom all-zero keys into every
    later step's softmax (field notes: 16 dB at B=16).
    """
    return np.array([min(position, kv_slots)], dtype=np.float32)
