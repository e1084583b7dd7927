"""What the host computes for each graph call: RoPE, the KV slot count, masks, greedy codes.

numpy only at import (the board runtime uses it); ``rope_cos_sin`` imports torch when called,
``numpy_rope_cos_sin`` (the board's recipe, no torch) does not.

The vocoder step graph takes ``freqs_in = (position * inv_freq) mod 2*pi`` rather than positions or
cos/sin: cos/sin as graph inputs broke the seed project's fp16 pipeline, and raw angles near position
1e3 sit on an fp16 ulp of 0.5 (seed, measured on a board).  The product is formed in float64
from the model's float32 ``inv_freq`` (the values torch computes), so a 3,000-token stream keeps
its angles exact to float32 rounding instead of drifting by ``pos * ulp``.
"""

from __future__ import annotations

import numpy as np

from rkspeech.contracts.talker import TalkerContract


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


def torch_inverse_frequencies(head_dim: int, rope_theta: float):
    """The talker stack's ``DecoderStack.inv_freq`` (a torch tensor), the same float32 expression:
    numpy's power and cos differ from torch's in the last bit for some entries, and the talker
    path matches the reference bit for bit."""
    import torch

    return 1.0 / (rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rope_cos_sin(positions, inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` ``[n, head_dim]`` float32 of ``positions``, computed as
    ``DecoderStack.forward`` does (float32 product, torch cos/sin), so the graph sees the
    reference's values bit for bit."""
    import torch

    pos = torch.as_tensor(np.asarray(positions), dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().numpy(), emb.sin().numpy()


def numpy_inverse_frequencies(head_dim: int, rope_theta: float) -> np.ndarray:
    """``torch_inverse_frequencies`` without torch: the power in float64 rounded to float32 (torch's
    float32 pow is correctly rounded for all but a few entries; numpy's float32 power differs in
    4/32 (head_dim 64) to 14/64 (head_dim 128, theta 1e6) entries, this recipe in 0-1), then the
    same float32 division."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    power = (np.float64(rope_theta) ** exponents.astype(np.float64)).astype(np.float32)
    return (np.float32(1.0) / power).astype(np.float32)


def numpy_rope_cos_sin(positions, inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """``rope_cos_sin`` without torch: the same float32 angles (``positions * inv_freq``, exact
    IEEE products), cos/sin in float64 rounded to float32.  torch's float32 cos/sin are not
    correctly rounded: ~5 % of entries differ from this in the last bit (numpy's float32 cos:
    ~15 %); docs/numpy-runtime.md says what that does to the codes."""
    pos = np.asarray(positions, dtype=np.float32)
    freqs = pos[:, None] * np.asarray(inv_freq, dtype=np.float32)[None, :]
    emb = np.concatenate((freqs, freqs), axis=-1).astype(np.float64)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def step_mask(contract: TalkerContract, start: int) -> np.ndarray:
    """``[R, cap + B]``: chunk row i (position ``start + i``) sees cache slots ``< start`` and chunk
    columns ``<= i``.  Padding rows of a last prefill chunk keep the same pattern (every row sees
    itself, so none is all-masked; the host drops their outputs and keys/values).  Grouped
    layout: the B rows repeated per query head of a group."""
    cap, B = contract.capacity, contract.B
    m = np.full((B, cap + B), contract.mask_value, dtype=np.float32)
    m[:, :min(start, cap)] = 0.0
    m[:, cap:] = np.where(np.tri(B, dtype=bool), 0.0, contract.mask_value)
    rep = contract.mask_rows // B
    return np.tile(m, (rep, 1)) if rep > 1 else m


def greedy_codes(outputs) -> np.ndarray:
    """Codes ``int64 [G-1]`` of one frame from the graph's outputs (a dict or a tuple/tensor):
    its ``codes`` when it has them, else the argmax of its ``logits``."""
    if isinstance(outputs, dict):
        if "codes" in outputs:
            return np.asarray(outputs["codes"]).astype(np.int64).reshape(-1)
        return np.asarray(outputs["logits"]).argmax(-1).astype(np.int64)
    if isinstance(outputs, (tuple, list)):
        return np.asarray(outputs[1]).astype(np.int64).reshape(-1)
    return np.asarray(outputs).argmax(-1).astype(np.int64)
