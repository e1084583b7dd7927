"""Whisper's audio encoder in plain torch: one definition for every size (80 or 128 mel bins).

The module layout and parameter names are openai/whisper's ``model.py`` ``AudioEncoder``
(``conv1``, ``conv2``, ``positional_embedding``, ``blocks.N.attn.{query,key,value,out}``,
``blocks.N.attn_ln``, ``blocks.N.mlp.{0,2}``, ``blocks.N.mlp_ln``, ``ln_post``), so an
openai-whisper checkpoint loads with its own keys; the CTranslate2 and Hugging Face loaders in
``whisper_weights`` rename into this layout.

Choices made for the NPU (rk3588, fp16) and the ONNX export:

* Attention is written as 4-D multi-head MatMuls ([B, H, T, Dh]); rknn-toolkit2 2.5.0 fails on
  the 3-D single-head MatMul form (``KeyError: 'q_mm'``, field notes) and fuses this one.
* q and k are each scaled by ``Dh ** -0.25`` before the product (as openai does) so the fp16
  attention logits stay in range; softmax runs over the last axis of a fixed 1500-long window.
* The key projection has no bias (as in openai/whisper and HF).  CTranslate2 stores a fused qkv
  bias whose key third is zero; a key bias would only add a per-query constant to the logits,
  which softmax removes, so dropping it is exact either way.
* GELU is the exact (erf) form all three checkpoint families were trained with.
* No masks, no dynamic shapes: the window is fixed at ``n_audio_ctx * 2`` mel frames
  (3000 = 30 s); :meth:`WhisperEncoder.check_window` refuses anything else, unless asked for a
  bucket (a shorter window, ``bucket=True``): then the first ``n_frames / 2`` rows of the
  positional table are added, as whisper.cpp's ``audio_ctx`` does (``models.whisper.window``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import FRAMES_PER_SECOND, output_frames


@dataclass(frozen=True)
class WhisperEncoderDims:
    """The encoder half of openai/whisper's ``ModelDimensions`` (same field names)."""

    n_mels: int = 80
    n_audio_ctx: int = 1500
    n_audio_state: int = 384
    n_audio_head: int = 6
    n_audio_layer: int = 4
    layer_norm_eps: float = 1e-5

    @property
    def n_frames(self) -> int:
        """Mel frames in one window: conv2 has stride 2, so 2 * n_audio_ctx (3000 = 30 s)."""
        return 2 * self.n_audio_ctx

    @property
    def window_seconds(self) -> float:
        return self.n_frames / FRAMES_PER_SECOND

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> None:
        if self.n_mels not in (80, 128):
            raise RkspeechError(f"Whisper encoder: n_mels={self.n_mels}; expected 80 or 128")
        if self.n_audio_state % self.n_audio_head:
            raise RkspeechError(
                f"Whisper encoder: width {self.n_audio_state} is not divisible by "
                f"{self.n_audio_head} heads; the checkpoint config is inconsistent"
            )


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.head_dim = n_state // n_head
        self.scale = float(self.head_dim) ** -0.25  # a Python float: folded into the graph
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, ctx, state = x.shape
        heads = (batch, ctx, self.n_head, self.head_dim)
        q = self.query(x).view(heads).permute(0, 2, 1, 3) * self.scale
        k = self.key(x).view(heads).permute(0, 2, 3, 1) * self.scale
        v = self.value(x).view(heads).permute(0, 2, 1, 3)
        weights = torch.softmax(q @ k, dim=-1)  # [B, H, T, T]
        out = (weights @ v).permute(0, 2, 1, 3).reshape(batch, ctx, state)
        return self.out(out)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, eps: float):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state, eps=eps)
        self.mlp = nn.Sequential(
            nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state)
        )
        self.mlp_ln = nn.LayerNorm(n_state, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x))
        x = x + self.mlp(self.mlp_ln(x))
        return x


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """openai/whisper's positional table (used only when a checkpoint does not carry one)."""
    import math

    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class WhisperEncoder(nn.Module):
    """mel [B, n_mels, 2*n_audio_ctx] -> [B, n_audio_ctx, n_audio_state]."""

    def __init__(self, dims: WhisperEncoderDims):
        super().__init__()
        dims.validate()
        self.dims = dims
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList(
            ResidualAttentionBlock(dims.n_audio_state, dims.n_audio_head, dims.layer_norm_eps)
            for _ in range(dims.n_audio_layer)
        )
        self.ln_post = nn.LayerNorm(dims.n_audio_state, eps=dims.layer_norm_eps)

    def check_window(self, n_frames: int, *, bucket: bool = False) -> None:
        """Refuse a window that does not give exactly ``n_audio_ctx`` encoder frames.

        ``bucket=True``: also accept a shorter window of whole seconds (1 s .. the full window),
        run only beside the full one for audio that fits (``runtime.whisper.buckets``).

        The RK model zoo exports a 20 s window (2000 mel frames -> 1000 encoder frames); the
        stock 30 s decoder attends to 1500 frames, so such an encoder silently does not compose.
        """
        if bucket and n_frames < self.dims.n_frames:
            if n_frames < FRAMES_PER_SECOND or n_frames % FRAMES_PER_SECOND:
                raise RkspeechError(f"Whisper encoder window of {n_frames} mel frames: a shorter window is a whole "
                                    f"number of seconds ({FRAMES_PER_SECOND} frames each)")
            return
        got = output_frames(n_frames)
        # 2999 frames would also give 1500 outputs; the front end cuts 3000-frame windows, so
        # anything but exactly 2 * n_audio_ctx is refused.
        if got != self.dims.n_audio_ctx:
            raise RkspeechError(
                f"Whisper encoder window of {n_frames} mel frames ({n_frames / FRAMES_PER_SECOND:g} s) "
                f"gives {got} encoder frames, but the decoder expects {self.dims.n_audio_ctx} "
                f"(a {self.dims.window_seconds:g} s window of {self.dims.n_frames} frames); "
                f"use --frames {self.dims.n_frames}"
            )
        if n_frames != self.dims.n_frames:
            raise RkspeechError(
                f"Whisper encoder window of {n_frames} mel frames: the front end cuts windows of exactly "
                f"{self.dims.n_frames} frames ({self.dims.window_seconds:g} s); use --frames {self.dims.n_frames}"
            )

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_tracing():  # the exporter checks the window itself
            if mel.shape[1] != self.dims.n_mels:
                raise RkspeechError(
                    f"Whisper encoder: input has {mel.shape[1]} mel bins, the model expects {self.dims.n_mels}"
                )
            self.check_window(int(mel.shape[-1]), bucket=True)
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x))
        x = x.permute(0, 2, 1)
        n_out = output_frames(int(mel.shape[-1]))
        # the full window adds the whole table (the graph exported before buckets, unchanged)
        pos = self.positional_embedding if n_out == self.dims.n_audio_ctx else self.positional_embedding[:n_out]
        x = x + pos
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)
