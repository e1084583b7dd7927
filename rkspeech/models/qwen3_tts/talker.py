"""The talker and code predictor: Qwen3 decoder stacks in plain torch, official key names.

Module and parameter names follow ``model.safetensors`` (``talker.model.layers.N.self_attn.q_proj``,
``talker.code_predictor.lm_head.K``, ...), so the checkpoint loads with ``load_state_dict``.

The Qwen3 decoder layer: pre-norm, attention with per-head RMS q/k norms, grouped key/value
heads, RoPE, SwiGLU MLP.  The official talker uses multimodal (3-D, interleaved) RoPE, but for
text and codec tokens its three position rows are equal (``get_rope_index`` with no padding), and
with equal rows every section takes the same angle: the rotation equals 1-D RoPE with the same
``inv_freq``, which is what this file computes.

KV caches are preallocated fixed-size buffers (``KVCache``): each step writes its keys and values at
its positions and attends over the slots written so far.  One step per frame for the talker (after
one prefill of the prompt), 16 positions per frame for the code predictor (its cache is reset at
each frame).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.models.qwen3_tts.vocoder_transformer import RMSNorm, rotate_half
from rkspeech.models.qwen3_tts.tts_config import DecoderStackConfig, TalkerConfig


class KVCache:
    """Keys and values of every layer: ``[layers, 2, kv_heads, capacity, head_dim]``, preallocated."""

    def __init__(self, cfg: DecoderStackConfig, capacity: int, dtype=torch.float32):
        self.capacity = capacity
        self.buf = torch.zeros(cfg.num_hidden_layers, 2, cfg.num_key_value_heads, capacity, cfg.head_dim, dtype=dtype)
        self.length = 0

    def reset(self) -> None:
        self.length = 0


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer_cache: torch.Tensor,
                start: int) -> torch.Tensor:
        """``x [1, t, hidden]`` at positions ``start..start+t-1``; ``layer_cache [2, kv, cap, hd]`` (written)."""
        t = x.shape[1]
        hd = self.head_dim
        q = self.q_norm(self.q_proj(x).view(t, self.heads, hd)).transpose(0, 1)  # [H, t, hd]
        k = self.k_norm(self.k_proj(x).view(t, self.kv_heads, hd)).transpose(0, 1)
        v = self.v_proj(x).view(t, self.kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        end = start + t
        layer_cache[0, :, start:end] = k
        layer_cache[1, :, start:end] = v
        keys, values = layer_cache[0, :, :end], layer_cache[1, :, :end]
        if self.heads != self.kv_heads:
            keys = keys.repeat_interleave(self.heads // self.kv_heads, dim=0)
            values = values.repeat_interleave(self.heads // self.kv_heads, dim=0)
        scores = q @ keys.transpose(1, 2) * hd**-0.5  # [H, t, end]
        if t > 1:
            qi = torch.arange(start, end).view(t, 1)
            ki = torch.arange(end).view(1, end)
            scores = scores.masked_fill(ki > qi, float("-inf"))
        o = torch.softmax(scores, dim=-1, dtype=torch.float32) @ values  # [H, t, hd]
        return self.o_proj(o.transpose(0, 1).reshape(1, t, self.heads * hd))


class Qwen3Mlp(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.self_attn = Qwen3Attention(cfg)
        self.mlp = Qwen3Mlp(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, layer_cache, start):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, layer_cache, start)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    """Layers + final norm over inputs embeddings, with a ``KVCache``.  Keys: ``layers.N.*``, ``norm``."""

    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(Qwen3Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.cfg, capacity)

    def forward(self, embeds: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """``embeds [1, t, hidden]`` appended at ``cache.length``; returns the normed hidden states."""
        t = embeds.shape[1]
        start = cache.length
        if start + t > cache.capacity:
            raise ValueError(f"KV cache full ({cache.capacity} positions)")
        pos = torch.arange(start, start + t, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]  # float32, as the official rotary embedding
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        h = embeds
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, cache.buf[i], start)
        cache.length = start + t
        return self.norm(h)


class TalkerModel(DecoderStack):
    """``talker.model``: the decoder stack plus the codec and text embeddings."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class ResizeMlp(nn.Module):
    """``talker.text_projection``: text hidden -> talker hidden (two linears with bias, SiLU)."""

    def __init__(self, inp: int, mid: int, out: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(inp, mid, bias=True)
        self.linear_fc2 = nn.Linear(mid, out, bias=True)

    def forward(self, x):
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictorModel(DecoderStack):
    """``talker.code_predictor.model``: the stack plus one embedding per codebook 1..15."""

    def __init__(self, cfg: DecoderStackConfig, embedding_dim: int):
        super().__init__(cfg)
        self.codec_embedding = nn.ModuleList(nn.Embedding(cfg.vocab_size, embedding_dim)
                                             for _ in range(cfg.num_code_groups - 1))


class CodePredictor(nn.Module):
    """``talker.code_predictor``: fills codebooks 1..G-1 of a frame from the talker's hidden state.

    Inputs at positions 0, 1: the talker's last hidden state and the embedding of codebook 0;
    ``lm_head[j-1]`` predicts codebook j, whose embedding (``codec_embedding[j-1]``) is the next input.
    """

    def __init__(self, cfg: DecoderStackConfig, talker_hidden: int):
        super().__init__()
        self.model = CodePredictorModel(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
                                     for _ in range(cfg.num_code_groups - 1))
        if cfg.hidden_size != talker_hidden:
            self.small_to_mtp_projection = nn.Linear(talker_hidden, cfg.hidden_size, bias=True)
        else:
            self.small_to_mtp_projection = nn.Identity()


class Talker(nn.Module):
    """``talker``: model, text_projection, codec_head and the code predictor."""

    def __init__(self, cfg: TalkerConfig, predictor_cfg: DecoderStackConfig):
        super().__init__()
        self.model = TalkerModel(cfg)
        self.text_projection = ResizeMlp(cfg.text_hidden_size, cfg.text_hidden_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(predictor_cfg, cfg.hidden_size)

    def text(self, ids: torch.Tensor) -> torch.Tensor:
        """Projected text embeddings ``[1, n, hidden]`` of token ids ``[1, n]``."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec(self, ids) -> torch.Tensor:
        """Codec (codebook 0 / control token) embeddings ``[1, n, hidden]``."""
        return self.model.codec_embedding(torch.as_tensor(ids, dtype=torch.long).view(1, -1))
