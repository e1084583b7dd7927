"""The vocoder's pre-transformer: sliding-window causal attention with RoPE, in plain torch.

Module and parameter names follow the checkpoint (``decoder.pre_transformer.<name>``).  The
blocks are shared by the full decode (``PreTransformer.forward``) and the stateful step
(``rkspeech.stepgraph.step``), which passes each layer a history of cached keys and values; the
step graph therefore traces exactly the ops written here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:
    from rkspeech.models.qwen3_tts.vocoder_config import VocoderConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


#: A history joins the cached keys/values of one layer with the current ones:
#: ``history(k, v) -> (k_all, v_all)``, all ``[kv_heads, *, head_dim]``.
History = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class Attention(nn.Module):
    """Multi-head attention over ONE sequence: ``x [1, t, hidden] -> [1, t, hidden]``.

    The full decode (``history=None``) and the stateful step (``rkspeech.stepgraph.step``, whose
    history prepends the cached keys/values) run this same code, so the step graph traces
    exactly these ops.  Per-sequence 3-D q/k/v (``[heads, t, head_dim]``) with a 4-D multi-head
    score matmul, because of what the NPU toolchain does with the step graph: a 3-D single-head
    MatMul attention crashes the converter (field notes), and a history joined by ``Concat``
    corrupted sliding-window attention on the RKNN path (step audio 9.5 dB vs 56.8 dB with
    selection matmuls; the seed project, on a board), so the step's history joins the keys
    with selection matmuls between ``rope`` and the scores.  A batch of N sequences is N calls
    (only the full decode has N > 1; it runs eagerly in torch).

    State: ``sliding_window - 1`` rotated keys and values per kv head (``state_shape``).
    """

    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.history_slots = cfg.sliding_window - 1
        inner = cfg.num_attention_heads * cfg.head_dim
        kv_inner = cfg.num_key_value_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, inner, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv_inner, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv_inner, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(inner, cfg.hidden_size, bias=cfg.attention_bias)

    @property
    def state_shape(self) -> tuple[int, ...]:
        """(keys/values, kv heads, slots, head_dim) carried between steps."""
        return (2, self.kv_heads, self.history_slots, self.head_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                history: History | None = None) -> torch.Tensor:
        """``cos``/``sin`` ``[t, head_dim]``; ``mask`` broadcasts to ``[1, heads, t, keys]``."""
        t = x.shape[1]
        heads, kv_heads, hd = self.heads, self.kv_heads, self.head_dim
        q = self.q_proj(x).view(t, heads, hd).transpose(0, 1)  # [H, t, hd]
        k = self.k_proj(x).view(t, kv_heads, hd).transpose(0, 1)
        v = self.v_proj(x).view(t, kv_heads, hd).transpose(0, 1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if history is not None:
            k, v = history(k, v)  # [Hkv, slots + t, hd]
        if heads != kv_heads:
            k = k.repeat_interleave(heads // kv_heads, dim=0)
            v = v.repeat_interleave(heads // kv_heads, dim=0)
        scores = q.unsqueeze(0) @ k.unsqueeze(0).transpose(2, 3) * hd**-0.5 + mask
        o = (torch.softmax(scores, dim=-1) @ v.unsqueeze(0)).transpose(1, 2).reshape(1, t, heads * hd)
        return self.o_proj(o)


class Mlp(nn.Module):
    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    """Pre-norm attention + MLP, each residual branch scaled (``Attention``: one sequence)."""

    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = Mlp(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                history: History | None = None) -> torch.Tensor:
        h = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, history))
        return h + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(h)))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_angles(t: int, inv_freq: torch.Tensor, reduce: bool = True) -> torch.Tensor:
    """[t, head_dim/2] RoPE angles for positions 0..t-1.

    ``reduce=False`` is the official float32 product, whose error grows as ``pos * ulp``
    (about 1e-4 rad at position 3,000); ``reduce=True`` forms the product in float64 and
    reduces it mod 2*pi before the float32 cast, the same values the streaming host feeds the
    step graph, so long streams match the full decode.
    """
    if not reduce:
        return torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
    pos = torch.arange(t, dtype=torch.float64)
    return torch.remainder(torch.outer(pos, inv_freq.double()), 2 * math.pi).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


class PreTransformer(nn.Module):
    """``x [N, T, latent] -> [N, T, latent]``: input proj, the layers per sequence, norm, output proj.

    State: every layer's KV history (``state_shape``).
    """

    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        #: True: angles formed in float64 and reduced mod 2*pi, exactly as the step graph's
        #: host does (``rkspeech.stepgraph.host``); False: the official float32 product.
        self.reduce_angles = True

    @property
    def state_shape(self) -> tuple[int, ...]:
        """(layers, keys/values, kv heads, slots, head_dim): every layer's KV history."""
        return (len(self.layers), *self.layers[0].self_attn.state_shape)

    def run_layers(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                   histories: list[History] | None = None) -> torch.Tensor:
        """The layers over one sequence ``h [1, t, hidden]``; ``histories``: one per layer."""
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, mask, None if histories is None else histories[i])
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Full-sequence forward: x [N, T, latent] -> [N, T, latent]."""
        n, t, _ = x.shape
        angles = rope_angles(t, self.inv_freq, reduce=self.reduce_angles)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        qi = torch.arange(t).view(t, 1)
        ki = torch.arange(t).view(1, t)
        allowed = (ki <= qi) & (ki > qi - self.cfg.sliding_window)
        mask = torch.zeros(t, t).masked_fill(~allowed, float("-inf"))
        h = self.input_proj(x)
        h = torch.cat([self.run_layers(h[i:i + 1], cos, sin, mask) for i in range(n)])
        return self.output_proj(self.norm(h))
