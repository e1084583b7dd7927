"""The NPU-resident step graph (``formulation="npu"``): same I/O as ``VocoderStep``, no CPU ops
in the decoder, no REGTASK overflow.

What changes against the seed formulation (``rkspeech.streaming.step``), each for a measured
reason (rk3588 fp16, rknn-toolkit2 2.5.0, reduced config B=16; ``docs/npu-formulation.md``):

* SnakeBeta ``sin`` -> ``npu_ops.NpuSnake`` (reflection range reduction + polynomial on the
  NPU); RoPE cos/sin -> ``npu_ops.rope_cos_sin``.  The seed graph ran 30 Sin + 1 Cos on the CPU.
* decoder-block ConvTransposes -> ``npu_ops.PolyphaseTransConv`` (strides 5 and 3 padded on
  the CPU).
* dilated residual convs (d = 3, 9) -> ``npu_ops.FoldedDilatedConv`` (the REGTASK trigger).
* codebook Gather -> ``npu_ops.OneHotCodebook`` (the Gather and its index Add ran on the CPU).
* conv tails are stored TIME-MAJOR in the flat cache (segment shape ``(n, C)`` instead of the
  seed's ``(C, n)``): reshaping a flat slice straight to ``(1, C, n)`` compiled to a CPU Reshape
  for every tail in and out (34 in the seed graph), while ``reshape(n, C).t()`` stays on the NPU.
  The layout is ``npu_cache_segments(cfg)`` (same names, order and N as ``cache_segments``; the KV
  segment is unchanged) and lives in the contract, so first/main graphs of this formulation share
  caches, and a seed cache is refused by ``compatible_cache``.

Snake bounds: each Snake is exact for ``|freq*x| <= bound``; ``calibrate_snake_bounds`` takes
the largest value seen on a full decode of random codes and multiplies it by ``margin`` (4 by
default, i.e. 2 extra reflections).  Beyond the bound the error stays below the layer's gain.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..models.qwen3_tts_vocoder import RESIDUAL_DILATIONS, SnakeBeta, Vocoder, VocoderConfig, snake_modules
from . import npu_ops
from .contract import StepContract, make_segments
from .step import VocoderStep, cache_segments, step_contract

FORMULATION = "npu"
DEFAULT_MARGIN = 4.0


def npu_cache_segments(cfg: VocoderConfig):
    """``cache_segments(cfg)`` with every conv tail transposed to time-major ``(n, C)``."""
    named = []
    for seg in cache_segments(cfg):
        shape = seg.shape if seg.name == "kv" else (seg.shape[1], seg.shape[0])
        named.append((seg.name, shape))
    return make_segments(named)


def npu_step_contract(cfg: VocoderConfig, codes_length: int) -> StepContract:
    base = step_contract(cfg, codes_length, formulation=FORMULATION)
    return StepContract(**{**base.__dict__, "segments": npu_cache_segments(cfg)})


@torch.no_grad()
def calibrate_snake_bounds(vocoder: Vocoder, tokens: int = 12, seed: int = 1234,
                           margin: float = DEFAULT_MARGIN) -> dict[int, float]:
    """``{id(snake): margin * max|freq * x|}`` over a full decode of random codes."""
    cfg = vocoder.cfg
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, tokens), generator=g)
    seen: dict[int, float] = {}
    hooks = []
    for m in snake_modules(vocoder):
        def hook(mod, inputs, _out, key=id(m)):
            seen[key] = max(seen.get(key, 0.0), float((inputs[0] * mod.freq).abs().max()))
        hooks.append(m.register_forward_hook(hook))
    try:
        vocoder(codes)
    finally:
        for h in hooks:
            h.remove()
    return {k: max(v * margin, 2.0) for k, v in seen.items()}


class NpuVocoderStep(VocoderStep):
    """``forward(audio_codes, freqs_in, cache_valid, cache_in) -> (audio_values, cache_out)``.

    ``snake_bounds``: ``{id(SnakeBeta): bound}`` (default: ``calibrate_snake_bounds``);
    ``sin2_degree``: polynomial degree in ``t^2`` (5: 4.6e-7 max error, 6: 6.3e-9).
    """

    #: Every replacement can be switched off (ablations, ``benchmarks/bench_formulations.py``).
    PARTS = ("snake", "rope", "polyphase", "fold", "codebook", "time_major", "mesh_break")

    def __init__(self, vocoder: Vocoder, codes_length: int, *, snake_bounds: dict[int, float] | None = None,
                 sin2_degree: int = npu_ops.SIN2_DEGREE, margin: float = DEFAULT_MARGIN,
                 disable: tuple[str, ...] = (), tails: str = "transpose"):
        super().__init__(vocoder, codes_length)
        cfg = self.cfg
        unknown = set(disable) - set(self.PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; choose from {self.PARTS}")
        self.use = {p: p not in disable for p in self.PARTS}
        if tails not in ("transpose", "frames"):
            raise ValueError(f"tails must be 'transpose' or 'frames', got {tails!r}")
        self.tails = tails
        self.contract = npu_step_contract(cfg, codes_length)
        if not self.use["time_major"]:
            self.contract = StepContract(**{**self.contract.__dict__, "segments": cache_segments(cfg)})
        bounds = snake_bounds or calibrate_snake_bounds(vocoder, margin=margin)
        self.snakes = nn.ModuleDict()
        self._snake_key: dict[int, str] = {}
        for i, m in enumerate(snake_modules(vocoder)):
            key = f"s{i}"
            self.snakes[key] = npu_ops.NpuSnake(m, bounds[id(m)], degree=sin2_degree)
            self._snake_key[id(m)] = key
        for seg in self.contract.segments:
            c = seg.shape[-1] if self.use["time_major"] else seg.shape[0]
            if seg.name != "kv" and not hasattr(self, f"eye{c}"):
                self.register_buffer(f"eye{c}", torch.eye(c).unsqueeze(-1), persistent=False)
        self.codebook = npu_ops.OneHotCodebook(vocoder.quantizer)
        self.coeffs = npu_ops.sin2_coefficients(sin2_degree)
        frames = codes_length * math.prod(cfg.upsampling_ratios)
        ups = []
        for i, r in enumerate(cfg.upsample_rates):
            ups.append(npu_ops.upsampler(vocoder.decoder[1 + i].block[1], frames))
            frames *= r
        self.polyphase = nn.ModuleList(ups)
        self.folded = nn.ModuleDict()
        for i in range(len(cfg.upsample_rates)):
            for unit, d in zip(vocoder.decoder[1 + i].block[2:], RESIDUAL_DILATIONS):
                if d > 1:
                    self.folded[f"b{i}_r{d}"] = npu_ops.FoldedDilatedConv(unit.conv1.conv)

    def snake(self, m: SnakeBeta, x: torch.Tensor) -> torch.Tensor:
        return self.snakes[self._snake_key[id(m)]](x) if self.use["snake"] else m(x)

    def snake_folds(self) -> list[int]:
        return [s.folds for s in self.snakes.values()]

    # ---- pieces ---------------------------------------------------------------------------
    def _with_tail(self, x: torch.Tensor, tail_tm: torch.Tensor):
        """Prepend a time-major tail ``(n, C)``; return ``xin`` and the new time-major tail."""
        if not self.use["time_major"]:  # seed layout (C, n)
            n = int(tail_tm.shape[1])
            xin = torch.cat([tail_tm.unsqueeze(0), x], dim=-1)
            return xin, xin[0, :, -n:]
        n, c = int(tail_tm.shape[0]), int(tail_tm.shape[1])
        if self.tails == "frames":  # one channel slice per frame in, one time column per frame out
            tail = torch.cat([tail_tm[i].reshape(1, c, 1) for i in range(n)], dim=-1)
            xin = torch.cat([tail, x], dim=-1)
            t = int(xin.shape[-1])
            return xin, torch.stack([xin[0, :, t - n + i] for i in range(n)])
        eye = self._eye(c)
        # identity 1x1 convs on the tail in and out: exact, and they cut the elementwise "mesh"
        # that otherwise joins every Snake chain through the cache Split/Concat (see the class
        # docstring: without them the toolkit's graph optimizer ran > 10 min on this graph)
        tail = F.conv1d(tail_tm.t().unsqueeze(0), eye) if self.use["mesh_break"] else tail_tm.t().unsqueeze(0)
        xin = torch.cat([tail, x], dim=-1)
        out = xin[..., -n:]
        if self.use["mesh_break"]:
            out = F.conv1d(out, eye)
        return xin, out[0].t()

    def _eye(self, c: int) -> torch.Tensor:
        return getattr(self, f"eye{c}")

    def _tconv(self, conv, x, tail_tm, name):
        if tail_tm is None:
            return conv.conv(x), None
        xin, new_tail = self._with_tail(x, tail_tm)
        folded = self.folded[name] if name in self.folded and self.use["fold"] else None
        return (folded(xin) if folded is not None else conv.conv(xin)), new_tail

    # ---- the step -------------------------------------------------------------------------
    def forward(self, audio_codes, freqs_in, cache_valid, cache_in):
        voc, cfg = self.vocoder, self.cfg
        c = self._split(cache_in)
        parts: list[torch.Tensor] = []

        h = self.codebook(audio_codes) if self.use["codebook"] else voc.quantizer(audio_codes)
        h, tail = self._tconv(voc.pre_conv, h, c["pre_conv"], "pre_conv")
        parts.append(tail)

        emb = torch.cat([freqs_in, freqs_in], dim=-1)
        cos, sin = npu_ops.rope_cos_sin(emb, self.coeffs) if self.use["rope"] else (emb.cos(), emb.sin())
        kv_parts: list[torch.Tensor] = []
        tf = voc.pre_transformer
        h = self._attention(tf.input_proj(h.transpose(1, 2)), cos, sin, c["kv"], cache_valid, kv_parts)
        parts.append(torch.stack([torch.stack(kv_parts[i:i + 2]) for i in range(0, len(kv_parts), 2)]))
        h = h.transpose(1, 2)

        for i, (up, block) in enumerate(voc.upsample):
            if up.context:
                raise NotImplementedError("k > s upsampler")  # the published model has k = s
            h = up(h)
            res = h
            h, tail = self._tconv(block.dwconv, h, c[f"up{i}_dw"], f"up{i}_dw")
            parts.append(tail)
            h = res + block.pointwise(h)

        h, tail = self._tconv(voc.decoder[0], h, c["dec0"], "dec0")
        parts.append(tail)
        for i in range(len(cfg.upsample_rates)):
            blk = voc.decoder[1 + i].block
            h = self.snake(blk[0], h)
            if self.use["polyphase"]:
                xin, tail = self._with_tail(h, c[f"b{i}_convT"])
                h = self.polyphase[i](xin)
            else:
                tm = c[f"b{i}_convT"]
                h, tail = self._trans_conv(blk[1], h, tm.t() if self.use["time_major"] else tm)
                tail = tail.t() if self.use["time_major"] else tail
            parts.append(tail)
            for unit, d in zip(blk[2:], RESIDUAL_DILATIONS):
                res = h
                y, tail = self._tconv(unit.conv1, self.snake(unit.act1, h), c[f"b{i}_r{d}"], f"b{i}_r{d}")
                parts.append(tail)
                h = res + unit.conv2.conv(self.snake(unit.act2, y))
        h = self.snake(voc.decoder[-2], h)
        h, tail = self._tconv(voc.decoder[-1], h, c["final"], "final")
        parts.append(tail)
        audio = h.clamp(-1.0, 1.0).reshape(1, 1, -1)
        return audio, torch.cat([p.reshape(-1) for p in parts])


def make_step(vocoder: Vocoder, codes_length: int, formulation: str = "seed", **kw) -> VocoderStep:
    """``VocoderStep`` (``"seed"``) or ``NpuVocoderStep`` (``"npu"``)."""
    if formulation == "seed":
        return VocoderStep(vocoder, codes_length)
    if formulation == FORMULATION:
        return NpuVocoderStep(vocoder, codes_length, **kw)
    from ..errors import RkspeechError

    raise RkspeechError(f"unknown formulation {formulation!r}; choose seed or npu")
