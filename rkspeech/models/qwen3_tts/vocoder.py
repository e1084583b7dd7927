"""The Qwen3-TTS 12 Hz speech-tokenizer decoder (the vocoder), in plain torch.

16 codebooks of codes at 12.5 Hz -> 24 kHz audio, 1920 samples per token.  Module and
parameter names follow the checkpoint (``decoder.<name>`` in ``model.safetensors``), so the
keys load as they are; no ``transformers`` or ``qwen-tts`` import.

Written for export to NPU-friendly graphs:

* weight-only computations are folded once by ``fold()`` (called by the loader): SnakeBeta's
  ``exp(alpha)`` and ``1/(exp(beta)+1e-9)``, and each codebook's ``embedding_sum /
  cluster_usage`` followed by the 1x1 ``output_proj``, into one ``[Q*codebook_size, D]`` table
  looked up with a single Gather.  The official graph exports an ``Exp`` per Snake and 16
  Gathers + 2 convs for the codebooks (field notes: 2735 nodes).
* no zero pads are traced for k=1 convs (the official causal conv pads by 0 and still emits a
  ``Pad``/``Shape`` chain).

``Vocoder.forward(codes)`` is the full decode, numerically the official one (parity test:
``tests/verify/test_parity_official.py``).  The stateful step lives in ``rkspeech.stepgraph.step``;
it reuses these modules, and each stateful one states what it carries between steps
(``state_shape``: the convs' ``context`` samples, the attention's ``sliding_window - 1`` KV
slots).  The pre-transformer's blocks are in ``rkspeech.models.qwen3_tts.vocoder_transformer``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.models.qwen3_tts.vocoder_config import VocoderConfig
from rkspeech.models.qwen3_tts.vocoder_transformer import PreTransformer

RESIDUAL_DILATIONS = (1, 3, 9)


# ---------------------------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------------------------
class CausalConv(nn.Module):
    """Causal 1-D conv (stride 1): left context of ``(k-1)*dilation`` samples, zeros at start.

    State: the last ``context`` input samples (``state_shape``; none for k=1).
    """

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel_size, dilation=dilation, groups=groups)
        self.dilation = dilation
        self.context = (kernel_size - 1) * dilation

    @property
    def state_shape(self) -> tuple[int, int]:
        return (self.conv.in_channels, self.context)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.context:
            x = F.pad(x, (self.context, 0))
        return self.conv(x)


class CausalTransConv(nn.Module):
    """ConvTranspose1d trimmed to ``stride`` samples per input frame (official right trim).

    With kernel ``k`` and stride ``s`` an output sample depends on ``ceil((k-s)/s)`` earlier
    input frames: 1 for the decoder blocks (k=2s), 0 for the k=s upsamplers.  State: those
    ``context`` input frames (``state_shape``).
    """

    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel_size, stride=stride)
        self.stride = stride
        self.trim = kernel_size - stride
        self.context = -(-(kernel_size - stride) // stride)

    @property
    def state_shape(self) -> tuple[int, int]:
        return (self.conv.in_channels, self.context)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[..., : y.shape[-1] - self.trim] if self.trim else y


# ---------------------------------------------------------------------------------------------
# Activation
# ---------------------------------------------------------------------------------------------
class SnakeBeta(nn.Module):
    """x + 1/(exp(beta)+1e-9) * sin(exp(alpha) * x)^2, per channel, on [N, C, T].

    ``alpha``/``beta`` are the checkpoint's log-parameters; ``fold()`` turns them into the
    per-channel ``freq`` and ``gain`` the graph uses, so no ``Exp`` is exported.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("freq", torch.ones(channels, 1), persistent=False)
        self.register_buffer("gain", torch.ones(channels, 1), persistent=False)

    @torch.no_grad()
    def fold(self) -> None:
        self.freq = torch.exp(self.alpha.detach()).view(-1, 1).clone()
        self.gain = (1.0 / (torch.exp(self.beta.detach()) + 1e-9)).view(-1, 1).clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gain * torch.sin(x * self.freq).pow(2)


# ---------------------------------------------------------------------------------------------
# Codebooks
# ---------------------------------------------------------------------------------------------
class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class CodebookLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class CodebookStack(nn.Module):
    def __init__(self, n: int, size: int, dim: int):
        super().__init__()
        self.layers = nn.ModuleList(CodebookLayer(size, dim) for _ in range(n))


class ResidualQuantizer(nn.Module):
    """One of the two quantizer halves (``rvq_first``: 1 codebook, ``rvq_rest``: Q-1).

    ``input_proj`` is the encoder's and is only loaded (the checkpoint has it).
    """

    def __init__(self, n: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = CodebookStack(n, size, dim)

    def projected_tables(self) -> list[torch.Tensor]:
        w = self.output_proj.weight[:, :, 0]  # [io_dim, dim]
        return [layer._codebook.table() @ w.T for layer in self.vq.layers]


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.rvq_first = ResidualQuantizer(1, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = ResidualQuantizer(cfg.num_quantizers - 1, cfg.codebook_size, dim, cfg.codebook_dim)
        self.codebook_size = cfg.codebook_size
        self.num_quantizers = cfg.num_quantizers
        self.register_buffer("table", torch.zeros(cfg.num_quantizers * cfg.codebook_size, cfg.codebook_dim),
                             persistent=False)
        self.register_buffer("offsets", torch.arange(cfg.num_quantizers).view(1, -1, 1) * cfg.codebook_size,
                             persistent=False)

    @torch.no_grad()
    def fold(self) -> None:
        tables = self.rvq_first.projected_tables() + self.rvq_rest.projected_tables()
        self.table = torch.cat(tables, dim=0).contiguous()

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [N, Q, T] int64 -> [N, codebook_dim, T]: one Gather on the folded table."""
        emb = F.embedding(codes + self.offsets, self.table)  # [N, Q, T, D]
        return emb.sum(dim=1).transpose(1, 2)


# ---------------------------------------------------------------------------------------------
# Upsampling and the waveform decoder
# ---------------------------------------------------------------------------------------------
class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def pointwise(self, x: torch.Tensor) -> torch.Tensor:
        """The part after the depthwise conv: [N, C, T] -> [N, C, T] (residual not added)."""
        h = x.transpose(1, 2)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return (self.gamma * h).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pointwise(self.dwconv(x))


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class DecoderBlock(nn.Module):
    """Snake -> upsampling ConvTranspose (k=2r, stride r) -> 3 residual units (d = 1, 3, 9)."""

    def __init__(self, cin: int, cout: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList(
            [SnakeBeta(cin), CausalTransConv(cin, cout, 2 * rate, rate)]
            + [ResidualUnit(cout, d) for d in RESIDUAL_DILATIONS]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.block:
            x = m(x)
        return x


class Vocoder(nn.Module):
    """codes [N, Q, T] int64 -> audio [N, 1, T*samples_per_token] in [-1, 1]."""

    def __init__(self, cfg: VocoderConfig):
        super().__init__()
        self.cfg = cfg
        self.quantizer = SplitQuantizer(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = PreTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConv(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)])
            for r in cfg.upsampling_ratios
        )
        decoder: list[nn.Module] = [CausalConv(cfg.latent_dim, cfg.decoder_dim, 7)]
        for (cin, cout), rate in zip(cfg.decoder_block_dims, cfg.upsample_rates):
            decoder.append(DecoderBlock(cin, cout, rate))
        decoder += [SnakeBeta(cfg.output_dim), CausalConv(cfg.output_dim, 1, 7)]
        self.decoder = nn.ModuleList(decoder)

    @torch.no_grad()
    def fold(self) -> Vocoder:
        """Fold weight-only computations into buffers; call after loading weights."""
        self.quantizer.fold()
        for m in self.modules():
            if isinstance(m, SnakeBeta):
                m.fold()
        return self

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        h = self.pre_conv(self.quantizer(codes))
        h = self.pre_transformer(h.transpose(1, 2)).transpose(1, 2)
        for up, block in self.upsample:
            h = block(up(h))
        for m in self.decoder:
            h = m(h)
        return h.clamp(-1.0, 1.0)


def snake_modules(model: Vocoder) -> list[SnakeBeta]:
    return [m for m in model.modules() if isinstance(m, SnakeBeta)]
