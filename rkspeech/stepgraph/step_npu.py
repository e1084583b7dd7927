"""The NPU-resident step graph (``formulation="npu"``): same I/O as ``VocoderStep``; no Sin/Cos,
Gather or ConvTranspose pad on the CPU, and no dilated conv over a long axis.

Measured (reduced synthetic checkpoint, B=16, fp16, rknn-toolkit2 2.5.0; docs/npu-formulation.md):
rk3588 699 NPU / 0 CPU ops and 0 REGTASK lines with the phase Snake (1236 with the reflection
Snake), against the reference graph's 316 / 69 and 35,884.

What changes against the reference formulation (``rkspeech.stepgraph.step``), each for a
measured reason (rk3588 fp16, rknn-toolkit2 2.5.0, reduced config B=16;
``docs/npu-formulation.md``); the attention, the MLPs and the k=7 convs are the model's own:

* SnakeBeta ``sin`` -> ``phase_snake.PhaseSnake`` (``snake_form="phase"``, the default: the
  phase reduced by fp16 rounding inside two grouped 1x1 convs, then a polynomial) or
  ``npu_ops.NpuSnake`` (``"reflect"``: reflection range reduction, 2.4x the layers' traffic);
  RoPE cos/sin -> ``npu_ops.rope_cos_sin``.  The reference graph ran 30 Sin + 1 Cos on the CPU.
* decoder-block ConvTransposes -> ``npu_ops.upsampler``: polyphase for outputs up to 4096
  samples, zero-stuffed (Resize + mask + conv) beyond (strides 5 and 3 padded on the CPU; the
  polyphase interleave at width 10240/30720 logged 30,720/92,160 REGTASK lines).
* dilated residual convs (d = 3, 9) -> ``npu_ops.FoldedDilatedConv`` (the REGTASK trigger);
  above 0x1fff samples its ``rows`` form, and tails are cut from rows (``npu_ops.last_samples``):
  a Slice whose input is more than 0x1fff samples wider than its output logs a REGTASK line.
* codebook Gather -> ``npu_ops.OneHotCodebook`` (two 1x1 convs) on a float32 ``audio_codes``
  input (the contract's ``codes_dtype``; an int64 input costs a CPU Cast).
* conv tails stored time-major ``(n, C)`` (``npu_cache_segments``, ``tails="time_major"``,
  the default), read with a 4-D permute and written with a 3-D one: all on the NPU.  The
  reference's channel-major layout (``tails="channel"``, caches interchangeable with a reference
  graph's) leaves 33 tail Reshapes (flat slice ``(1, C*n, 1, 1) <-> (1, C, 1, n)``) on the
  rk3588 CPU; on rk3576 they run on the NPU.  A per-frame slice/concat variant made the
  converter try to allocate a 99456 x 99456 matrix; 2-D ``.t()`` moves took the graph
  optimizer 533 s.

Snake bounds (``"reflect"`` only): each Snake is exact for ``|freq*x| <= bound``; ``calibrate_snake_bounds`` takes
the largest value seen on a full decode of random codes and multiplies it by ``margin`` (4 by
default, i.e. 2 extra reflections).  Beyond the bound the error stays below the layer's gain.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rkspeech.models.qwen3_tts.vocoder_config import VocoderConfig
from rkspeech.models.qwen3_tts.vocoder import (
    CausalConv,
    CausalTransConv,
    SnakeBeta,
    Vocoder,
    snake_modules,
)
from rkspeech.stepgraph import npu_ops
from rkspeech.stepgraph.phase_snake import PHASE_DEGREE, PhaseSnake
from rkspeech.core.thresholds import PHASE_SNAKE_FP32_MIN_SNR_DB
from rkspeech.contracts.vocoder import CacheSegment, VocoderContract, make_segments
from rkspeech.contracts.formulations import (
    DEFAULT_FORMULATION,
    NPU,
    REFERENCE,
    canonical,
)
from rkspeech.stepgraph.step import (
    VocoderStep,
    as_model,
    stateful_modules,
    step_contract,
)

FORMULATION = NPU
DEFAULT_MARGIN = 4.0
#: ``phase``: ``phase_snake.PhaseSnake``; ``reflect``: ``npu_ops.NpuSnake``.
SNAKE_FORMS = ("phase", "reflect")
DEFAULT_SNAKE = "phase"
#: Cache-tail layout: "time_major" puts every tail read and write on the NPU (reduced step,
#: rk3588: 0 CPU ops; "channel", the reference layout: 33 CPU Reshapes).
DEFAULT_TAILS = "time_major"


def npu_cache_segments(source: Vocoder | VocoderConfig) -> tuple[CacheSegment, ...]:
    """``cache_segments(source)`` with every conv tail time-major ``(n, C)`` (the KV history as it is)."""
    named = []
    for name, m in stateful_modules(as_model(source)):
        shape = m.state_shape
        named.append((name, shape[::-1] if isinstance(m, (CausalConv, CausalTransConv)) else shape))
    return make_segments(named)


def npu_step_contract(source: Vocoder | VocoderConfig, codes_length: int,
                      tails: str = DEFAULT_TAILS) -> VocoderContract:
    """The reference contract with ``formulation="npu"`` and float32 codes; ``tails="time_major"``
    (the default) swaps in ``npu_cache_segments``, ``"channel"`` keeps the reference layout
    (interchangeable caches)."""
    base = step_contract(source, codes_length, formulation=FORMULATION, codes_dtype="float32")
    if tails == "channel":
        return base
    return VocoderContract(**{**base.__dict__, "segments": npu_cache_segments(source)})


@torch.no_grad()
def calibrate_snake_bounds(vocoder: Vocoder, tokens: int = 12, seed: int = 1234,
                           margin: float = DEFAULT_MARGIN) -> dict[int, float]:
    """``{id(snake): margin * max|freq * x|}`` over a full decode of random codes."""
    cfg = vocoder.cfg
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, tokens), generator=g)
    seen: dict[int, float] = {}

    def hook(mod, inputs, _out):
        seen[id(mod)] = max(seen.get(id(mod), 0.0), float((inputs[0] * mod.freq).abs().max()))

    hooks = [m.register_forward_hook(hook) for m in snake_modules(vocoder)]
    try:
        vocoder(codes)
    finally:
        for h in hooks:
            h.remove()
    return {k: max(v * margin, 2.0) for k, v in seen.items()}


class NpuVocoderStep(VocoderStep):
    """``forward(audio_codes, freqs_in, cache_valid, cache_in) -> (audio_values, cache_out)``.

    ``snake_bounds``: ``{id(SnakeBeta): bound}`` (default: ``calibrate_snake_bounds``);
    ``sin2_degree``: the Snakes' polynomial degree (default: the form's own, phase 4 / reflect 5;
    max errors in ``phase_snake.sin2pi_coefficients`` and ``npu_ops.sin2_coefficients``).
    """

    #: Every replacement can be switched off (ablations, ``benchmarks/bench_formulations.py``).
    PARTS = ("snake", "rope", "polyphase", "fold", "codebook")

    def __init__(self, vocoder: Vocoder, codes_length: int, *, snake_bounds: dict[int, float] | None = None,
                 sin2_degree: int | None = None, margin: float = DEFAULT_MARGIN,
                 disable: tuple[str, ...] = (), tails: str = DEFAULT_TAILS, snake_form: str = DEFAULT_SNAKE):
        super().__init__(vocoder, codes_length)
        cfg = self.cfg
        unknown = set(disable) - set(self.PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; choose from {self.PARTS}")
        self.use = {p: p not in disable for p in self.PARTS}
        if tails not in ("channel", "time_major"):
            raise ValueError(f"tails must be 'channel' or 'time_major', got {tails!r}")
        self.tails = tails
        self.contract = npu_step_contract(vocoder, codes_length, tails)
        if snake_form not in SNAKE_FORMS:
            raise ValueError(f"snake_form must be one of {SNAKE_FORMS}, got {snake_form!r}")
        self.snake_form = snake_form
        if snake_form != "reflect":
            self.fp32_min_snr_db = PHASE_SNAKE_FP32_MIN_SNR_DB
        if snake_form == "reflect":
            bounds = snake_bounds or calibrate_snake_bounds(vocoder, margin=margin)
        self.snakes = nn.ModuleDict()
        self._snake_key: dict[int, str] = {}
        for i, m in enumerate(snake_modules(vocoder)):
            key = f"s{i}"
            self.snakes[key] = (PhaseSnake(m, sin2_degree or PHASE_DEGREE) if snake_form == "phase"
                                else npu_ops.NpuSnake(m, bounds[id(m)], degree=sin2_degree or npu_ops.SIN2_DEGREE))
            self._snake_key[id(m)] = key
        self.codebook = npu_ops.OneHotCodebook(vocoder.quantizer)
        self.coeffs = npu_ops.sin2_coefficients()  # RoPE's cos/sin
        frames = codes_length * math.prod(cfg.upsampling_ratios)
        ups = []
        for i, r in enumerate(cfg.upsample_rates):
            ups.append(npu_ops.upsampler(vocoder.decoder[1 + i].block[1], frames))
            frames *= r
        self.polyphase = nn.ModuleList(ups)
        self.folded = nn.ModuleDict()  # by the conv's cache segment name
        for name, m in stateful_modules(vocoder):
            if isinstance(m, CausalConv) and m.dilation > 1:
                self.folded[name] = npu_ops.FoldedDilatedConv(m.conv)

    def snake(self, m: SnakeBeta, x: torch.Tensor) -> torch.Tensor:
        return self.snakes[self._snake_key[id(m)]](x) if self.use["snake"] else m(x)

    # ---- pieces ---------------------------------------------------------------------------
    def _read_tail(self, tail_in: torch.Tensor) -> torch.Tensor:
        """A cache tail (``(C, n)``, or ``(n, C)`` for ``tails="time_major"``) as ``[1, C, n]``."""
        if self.tails == "channel":  # reference layout (C, n)
            return tail_in.unsqueeze(0)
        # 4-D permutes on batch-1 tensors: the 2-D ``.t()`` form left the 17 reads as CPU
        # Transposes and took the optimizer 533 s.
        n, c = int(tail_in.shape[0]), int(tail_in.shape[1])
        return tail_in.reshape(1, 1, n, c).permute(0, 3, 1, 2).reshape(1, c, n)

    def _write_tail(self, last: torch.Tensor) -> torch.Tensor:
        """``[1, C, n]`` -> the cache layout of ``_read_tail``."""
        _, c, n = (int(v) for v in last.shape)
        if self.tails == "channel":
            return last[0]
        # a 3-D permute: the 4-D ``(1, C, 1, n) -> (1, 1, n, C)`` form left the widest tail
        # write (C=24, n=54) as 2 CPU Reshapes in the reduced step; this one as none.
        return last.permute(0, 2, 1).reshape(n, c)

    def _tail_length(self, tail_in: torch.Tensor) -> int:
        return int(tail_in.shape[1] if self.tails == "channel" else tail_in.shape[0])

    def _new_tail(self, x: torch.Tensor, tail_in: torch.Tensor, xin: torch.Tensor | None = None):
        """The last n samples of ``cat(tail, x)`` in the cache layout: from ``xin`` on short axes
        (x may be shorter than n there), from rows of ``x`` above ``FIELD_LIMIT`` (a Slice out of
        a 30720-wide axis logs a REGTASK line)."""
        n = self._tail_length(tail_in)
        if xin is None or int(x.shape[-1]) > npu_ops.FIELD_LIMIT:
            return self._write_tail(npu_ops.last_samples(x, n))
        return self._write_tail(xin[..., int(xin.shape[-1]) - n:])

    def _with_tail(self, x: torch.Tensor, tail_in: torch.Tensor):
        """``cat(tail, x)`` and the new tail in the cache layout."""
        xin = torch.cat([self._read_tail(tail_in), x], dim=-1)
        return xin, self._new_tail(x, tail_in, xin)

    def conv_step(self, conv, x, tail_in, name):
        if tail_in is None:
            return conv.conv(x), None
        folded = self.folded[name] if name in self.folded and self.use["fold"] else None
        if folded is not None and int(x.shape[-1]) > npu_ops.FIELD_LIMIT:
            return folded.rows(x, self._read_tail(tail_in)), self._new_tail(x, tail_in)
        xin, new_tail = self._with_tail(x, tail_in)
        return (folded(xin) if folded is not None else conv.conv(xin)), new_tail

    def embed_codes(self, audio_codes):
        return self.codebook(audio_codes) if self.use["codebook"] else self.vocoder.quantizer(audio_codes.to(torch.int64))

    def rope(self, emb):
        return npu_ops.rope_cos_sin(emb, self.coeffs) if self.use["rope"] else (emb.cos(), emb.sin())

    def block_upsample(self, index, tconv, x, tail_in):
        if self.use["polyphase"]:
            up = self.polyphase[index]
            if isinstance(up, npu_ops.ZeroStuffTransConv):  # long: rows, no wide Slice
                return up.rows(x, self._read_tail(tail_in)), self._new_tail(x, tail_in)
            xin, tail = self._with_tail(x, tail_in)
            return up(xin), tail
        if self.tails == "time_major":
            y, tail = self._trans_conv(tconv, x, tail_in.t())
            return y, tail.t()
        return self._trans_conv(tconv, x, tail_in)


def make_step(vocoder: Vocoder, codes_length: int, formulation: str = DEFAULT_FORMULATION, **kw) -> VocoderStep:
    """``VocoderStep`` (``"reference"``, alias ``"seed"``) or ``NpuVocoderStep`` (``"npu"``)."""
    formulation = canonical(formulation)
    if formulation == REFERENCE:
        return VocoderStep(vocoder, codes_length)
    if formulation == FORMULATION:
        return NpuVocoderStep(vocoder, codes_length, **kw)
    from rkspeech.core.errors import RkspeechError

    raise RkspeechError(f"unknown formulation {formulation!r}; choose reference or npu")
