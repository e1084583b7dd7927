"""Qwen3-ASR's audio encoder in plain torch, official key names (``thinker.audio_tower.*``).

The official forward (qwen-asr 0.0.6 ``Qwen3ASRAudioEncoder``) is variable-length; it decomposes
exactly into fixed shapes, which is what lets it run on the NPU:

* **Front end per chunk.**  The log-mel is cut into chunks of ``2 * n_window`` = 100 frames; each
  chunk goes through three 3x3 stride-2 ``Conv2d`` + GELU and ``conv_out`` on its own, and gets
  the sinusoidal position embedding *from 0* (13 tokens per full chunk).  The official pads the
  last chunk with zero frames to the longest chunk of the utterance, so when the utterance has a
  full chunk the tail chunk is computed over 100 frames (the padding's GELU(bias) reaches its
  last valid tokens: that is the model's output and we keep it).  Only an utterance shorter
  than one chunk is not padded: there the zero padding after each conv would differ, and the
  conv masks (``conv_masks``) zero the positions past the valid length, which reproduces the
  unpadded convolution exactly.
* **Attention per window.**  Tokens attend only inside windows of ``n_window_infer / 100`` chunks
  (8 chunks = 104 tokens, 8 s).  Every chunk but the utterance's last is full, so a window's
  valid tokens are a prefix of its ``chunks * 13`` rows: the last window takes an additive key
  mask (``geometry.MASK_VALUE``: finite, fp16-safe; exp underflows to exactly 0 as the official
  ``finfo.min`` fill does in fp32).  Padding rows come out as garbage and are dropped.
* The projector (``ln_post``, ``proj1``, GELU, ``proj2``) is per token, so it rides in the window.

``AudioEncoder.window_forward`` is the graph the build exports (``models.qwen3_asr.window``):
``chunks [k, 1, mels, 100]`` + conv masks + key mask -> ``[k * 13, output_dim]``.
``AudioEncoder.forward`` runs an utterance through it window by window.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.models.qwen3_asr.geometry import EncoderGeometry


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """The official ``SinusoidsPositionEmbedding`` table ``[length, channels]`` (sin | cos)."""
    log_inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-log_inc * torch.arange(channels // 2).float())
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class AudioAttention(nn.Module):
    """Bidirectional multi-head attention over one window, 4-D multi-head matmuls (the NPU's form)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """``x [1, W, d]``, ``key_mask [1, 1, 1, W]`` additive -> ``[1, W, d]``."""
        _, w, d = x.shape
        h, hd = self.heads, self.head_dim
        q = self.q_proj(x).view(1, w, h, hd).transpose(1, 2)
        k = self.k_proj(x).view(1, w, h, hd).transpose(1, 2)
        v = self.v_proj(x).view(1, w, h, hd).transpose(1, 2)
        scores = q @ k.transpose(2, 3) * hd**-0.5 + key_mask
        o = torch.softmax(scores, dim=-1) @ v
        return self.out_proj(o.transpose(1, 2).reshape(1, w, d))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int):
        super().__init__()
        self.self_attn = AudioAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), key_mask)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    """``thinker.audio_tower``: conv front end, transformer layers, projector."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.geometry = EncoderGeometry.of(cfg)
        d, c = cfg.d_model, cfg.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, c, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, 2, padding=1)
        freq = ((cfg.num_mel_bins + 1) // 2 + 1) // 2
        freq = (freq + 1) // 2
        self.conv_out = nn.Linear(c * freq, d, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(d, cfg.encoder_attention_heads, cfg.encoder_ffn_dim)
                                    for _ in range(cfg.encoder_layers))
        self.ln_post = nn.LayerNorm(d)
        self.proj1 = nn.Linear(d, d)
        self.proj2 = nn.Linear(d, cfg.output_dim)
        g = self.geometry
        self.register_buffer("position", sinusoids(cfg.max_source_positions, d)[:g.chunk_tokens].clone(),
                             persistent=False)

    def front_end(self, chunks: torch.Tensor, mask1: torch.Tensor, mask2: torch.Tensor) -> torch.Tensor:
        """``chunks [k, 1, mels, F]`` (zero-padded), conv masks ``[k, 1, 1, T1]`` / ``[k, 1, 1, T2]``
        -> ``[k, chunk_tokens, d]`` with the position embedding added."""
        x = F.gelu(self.conv2d1(chunks)) * mask1
        x = F.gelu(self.conv2d2(x)) * mask2
        x = F.gelu(self.conv2d3(x))
        k, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(k, t, c * f))
        return x + self.position

    def window_forward(self, chunks, mask1, mask2, key_mask) -> torch.Tensor:
        """One window: ``[k, 1, mels, F]`` chunks -> ``[k * chunk_tokens, output_dim]``."""
        k = chunks.shape[0]
        x = self.front_end(chunks, mask1, mask2).reshape(1, k * self.geometry.chunk_tokens, -1)
        for layer in self.layers:
            x = layer(x, key_mask)
        x = self.proj2(F.gelu(self.proj1(self.ln_post(x))))
        return x[0]

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """The official encoder output ``[tokens, output_dim]`` of one utterance ``mel [mels, frames]``,
        window by window through ``window_forward`` (each window at its own number of chunks)."""
        g = self.geometry
        outs = []
        for win in g.windows(mel.shape[1]):
            inputs = g.window_inputs(mel.numpy(), win, chunks=win.chunks)
            with torch.no_grad():
                y = self.window_forward(*(torch.from_numpy(a) for a in inputs))
            outs.append(y[:win.tokens])
        return torch.cat(outs, dim=0)

