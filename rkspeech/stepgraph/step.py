"""The vocoder as a fixed-shape stateful step: B tokens + one flat cache in, B*1920 samples out.

A stream of steps equals a full decode (torch fp32: >= 100 dB over the whole signal, tested),
because every piece of state the full decode would see travels through the flat cache.  Each
stateful module of the model states its own (``state_shape``):

* each causal conv keeps its last ``(k-1)*dilation`` input samples,
* each k=2s ConvTranspose keeps its last input frame (k=s upsamplers keep nothing),
* the pre-transformer keeps ``sliding_window - 1`` rotated keys and values per layer.

``cache_segments`` walks the model in graph order (``stateful_modules``) and lays these out
back to back; the layout lives in the ``VocoderContract``, and the graph reads it through static
slices.  ``N`` (the cache size) does not depend on B, so the cache of a small-B first step
feeds a large-B main step.  The step collects its new tails by segment name, and ``join_tails``
writes them in the contract's order, so the layout cannot drift from the graph.

The step runs the model's own modules: the pre-transformer's layers (``Attention``,
``TransformerLayer``, the same code as the full decode) with a ``SelectionHistory``, and each
conv over its cached tail joined to the new input.  Choices that look odd and are load-bearing
on the NPU (the seed project's measurements, on a board):

* history and current keys are joined with constant selection matmuls, not ``Concat``
  (``SelectionHistory``): the RKNN Concat path corrupted sliding-window attention (step audio
  9.5 dB vs 56.8 dB);
* the causal mask lives on the step's RELATIVE grid as a constant at -100 (``exp(-100)`` is 0
  in fp16; -3e4 leaked through the NPU softmax), and never-written history slots get -100
  from a bias built elementwise from the host's slot count ``cache_valid``;
* attention is 4-D multi-head (a 3-D single-head MatMul attention crashes the converter,
  field notes).
"""

from __future__ import annotations

import torch
from torch import nn

from rkspeech.models.qwen3_tts.vocoder_config import VocoderConfig
from rkspeech.models.qwen3_tts.vocoder import (
    CausalConv,
    CausalTransConv,
    Vocoder,
)
from rkspeech.contracts.vocoder import CacheSegment, VocoderContract, make_segments
from rkspeech.contracts.formulations import REFERENCE
from rkspeech.core.thresholds import FP32_MIN_SNR_DB

MASK_VALUE = -100.0


def stateful_modules(vocoder: Vocoder) -> list[tuple[str, nn.Module]]:
    """The modules that carry state between steps, in graph order, with their segment names.

    ``pre_conv``; ``kv`` (the pre-transformer: every layer's keys and values); per upsampler i
    ``up{i}_convT`` (its ConvTranspose) and ``up{i}_dw`` (the ConvNeXt depthwise conv);
    ``dec0`` (the first decoder conv); per decoder block i ``b{i}_convT`` and ``b{i}_r{d}``
    (the residual units' dilation-d convs); ``final``.  Each module's ``state_shape`` is its
    segment's shape; zero-size ones (the k=s upsamplers) are dropped by ``make_segments``.
    """
    named: list[tuple[str, nn.Module]] = [("pre_conv", vocoder.pre_conv), ("kv", vocoder.pre_transformer)]
    for i, (up, block) in enumerate(vocoder.upsample):
        named += [(f"up{i}_convT", up), (f"up{i}_dw", block.dwconv)]
    named.append(("dec0", vocoder.decoder[0]))
    for i, block in enumerate(vocoder.decoder[1:-2]):
        named.append((f"b{i}_convT", block.block[1]))
        named += [(f"b{i}_r{unit.conv1.dilation}", unit.conv1) for unit in block.block[2:]]
    named.append(("final", vocoder.decoder[-1]))
    return named


def as_model(source: Vocoder | VocoderConfig) -> Vocoder:
    """``source`` itself, or a weightless (meta-device) model of a config, for its layout."""
    if isinstance(source, Vocoder):
        return source
    with torch.device("meta"):
        return Vocoder(source)


def cache_segments(source: Vocoder | VocoderConfig) -> tuple[CacheSegment, ...]:
    """The named segments of the flat cache, in graph order (channel-major conv tails)."""
    return make_segments((name, m.state_shape) for name, m in stateful_modules(as_model(source)))


def step_contract(source: Vocoder | VocoderConfig, codes_length: int, formulation: str = REFERENCE,
                  codes_dtype: str = "int64") -> VocoderContract:
    cfg = source if isinstance(source, VocoderConfig) else source.cfg
    return VocoderContract(
        codes_length=int(codes_length),
        num_quantizers=cfg.num_quantizers,
        codebook_size=cfg.codebook_size,
        head_dim=cfg.head_dim,
        sliding_window=cfg.sliding_window,
        rope_theta=float(cfg.rope_theta),
        samples_per_token=cfg.samples_per_token,
        sample_rate=cfg.sample_rate,
        segments=cache_segments(source),
        formulation=formulation,
        codes_dtype=codes_dtype,
    )


def join_tails(segments: tuple[CacheSegment, ...], tails: dict[str, torch.Tensor]) -> torch.Tensor:
    """``cache_out``: the new tails (by segment name) flattened in the order of ``segments``.

    Raises ``RuntimeError`` when a segment was not produced, an unknown one was, or a tail's
    shape is not its segment's.
    """
    names = [s.name for s in segments]
    missing = [n for n in names if n not in tails]
    unknown = [n for n in tails if n not in names]
    if missing or unknown:
        raise RuntimeError(f"step cache: segments not produced: {missing}; produced but not in the "
                           f"contract: {unknown}")
    for s in segments:
        if tuple(tails[s.name].shape) != s.shape:
            raise RuntimeError(f"step cache: tail {s.name} has shape {tuple(tails[s.name].shape)}, "
                               f"the contract says {s.shape}")
    return torch.cat([tails[n].reshape(-1) for n in names])


def _keep(tails: dict[str, torch.Tensor], name: str, tail: torch.Tensor | None) -> None:
    """Record a module's new tail (``None``: a stateless module, zero-size segment)."""
    if tail is None:
        return
    if name in tails:
        raise RuntimeError(f"step cache: segment {name} produced twice")
    tails[name] = tail


class SelectionHistory:
    """The step's KV history: ``layer(i)`` is the history ``Attention`` of layer i calls.

    It joins that layer's cached keys/values ``kv[i]`` (``[2, Hkv, slots, hd]``) with the
    current ones by constant selection matmuls (``sel_hist @ cached + sel_cur @ current``, not
    ``Concat``; see the module docstring) and records the last ``slots`` of the result;
    ``new_cache()`` stacks them as the ``kv`` segment.
    """

    def __init__(self, kv: torch.Tensor, sel_hist: torch.Tensor, sel_cur: torch.Tensor,
                 layers: int, slots: int):
        self.kv, self.sel_hist, self.sel_cur = kv, sel_hist, sel_cur
        self.layers, self.slots = layers, slots
        self.tails: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def layer(self, i: int):
        def join(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k_all = self.sel_hist @ self.kv[i, 0] + self.sel_cur @ k  # [Hkv, slots+L, hd]
            v_all = self.sel_hist @ self.kv[i, 1] + self.sel_cur @ v
            self.tails[i] = (k_all[:, -self.slots:], v_all[:, -self.slots:])
            return k_all, v_all

        return join

    def new_cache(self) -> torch.Tensor:
        if sorted(self.tails) != list(range(self.layers)):
            raise RuntimeError(f"step cache: KV history written by layers {sorted(self.tails)} "
                               f"of {self.layers}")
        return torch.stack([torch.stack(self.tails[i]) for i in range(self.layers)])


class VocoderStep(nn.Module):
    """``forward(audio_codes, freqs_in, cache_valid, cache_in) -> (audio_values, cache_out)``.

    Torch accepts any number of tokens L <= B in eager mode (the stepwise check uses it for
    a final partial step); the exported graph is fixed at B.
    """

    #: pass mark of this graph's float32 stepwise check against the full decode
    fp32_min_snr_db = FP32_MIN_SNR_DB

    def __init__(self, vocoder: Vocoder, codes_length: int):
        super().__init__()
        cfg = vocoder.cfg
        self.vocoder = vocoder
        self.cfg = cfg
        self.contract = step_contract(vocoder, codes_length)
        #: segment name of each stateful module (``stateful_modules``)
        self.state_names = {m: name for name, m in stateful_modules(vocoder)}
        B, lc = codes_length, vocoder.pre_transformer.layers[0].self_attn.history_slots
        self.B, self.lc = B, lc
        # selection matrices: full keys [lc + B] = hist @ sel_hist + cur @ sel_cur
        sel_hist = torch.zeros(lc + B, lc)
        sel_hist[:lc] = torch.eye(lc)
        sel_cur = torch.zeros(lc + B, B)
        sel_cur[lc:] = torch.eye(B)
        self.register_buffer("sel_hist", sel_hist, persistent=False)
        self.register_buffer("sel_cur", sel_cur, persistent=False)
        qp = torch.arange(B, dtype=torch.float32).view(B, 1)
        kp = torch.arange(lc + B, dtype=torch.float32).view(1, lc + B) - lc
        allowed = (kp <= qp) & (kp > qp - cfg.sliding_window)
        mask = torch.where(allowed, torch.zeros(()), torch.full((), MASK_VALUE))
        self.register_buffer("attn_mask", mask.view(1, 1, B, lc + B), persistent=False)
        self.register_buffer("slot_index", torch.arange(lc, dtype=torch.float32).view(1, 1, 1, lc), persistent=False)

    # ---- pieces ---------------------------------------------------------------------------
    def _split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {s.name: flat[s.offset:s.end].reshape(s.shape) for s in self.contract.segments}

    # ---- hooks a formulation may replace (rkspeech.stepgraph.step_npu) -------------------
    def embed_codes(self, audio_codes: torch.Tensor) -> torch.Tensor:
        """[1, Q, L] int64 -> [1, codebook_dim, L]."""
        return self.vocoder.quantizer(audio_codes)

    def rope(self, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return emb.cos(), emb.sin()

    def snake(self, module, x: torch.Tensor) -> torch.Tensor:
        return module(x)

    def conv_step(self, conv: CausalConv, x: torch.Tensor, tail: torch.Tensor | None, name: str):
        """A causal conv over ``cat(tail, x)``; returns the output and the new tail."""
        if not conv.context:
            return conv.conv(x), None
        xin = torch.cat([tail.unsqueeze(0), x], dim=-1)
        return conv.conv(xin), xin[0, :, -conv.context:]

    def block_upsample(self, index: int, tconv: CausalTransConv, x: torch.Tensor, tail: torch.Tensor):
        """The decoder block's ConvTranspose (k=2s) with its one frame of context."""
        return self._trans_conv(tconv, x, tail)

    @staticmethod
    def _trans_conv(tconv: CausalTransConv, x: torch.Tensor, tail: torch.Tensor | None):
        if not tconv.context:
            return tconv(x), None
        L, s, c = x.shape[-1], tconv.stride, tconv.context
        xin = torch.cat([tail.unsqueeze(0), x], dim=-1)
        y = tconv.conv(xin)
        return y[..., c * s: c * s + L * s], xin[0, :, -c:]

    def _slot_bias(self, n_valid: torch.Tensor, L: int) -> torch.Tensor:
        # MASK_VALUE on the lc - n_valid never-written slots (the real ones are the last
        # n_valid); elementwise on a [1,1,1,lc] grid, no comparison or Where.
        phantom = torch.clamp(self.lc - n_valid - self.slot_index, 0.0, 1.0)
        return torch.cat([MASK_VALUE * phantom, torch.zeros(1, 1, 1, L)], dim=-1)

    def _conv(self, conv: CausalConv, x: torch.Tensor, old: dict, new: dict) -> torch.Tensor:
        name = self.state_names[conv]
        y, tail = self.conv_step(conv, x, old.get(name), name)
        _keep(new, name, tail)
        return y

    def _pre_transformer(self, h: torch.Tensor, freqs_in, cache_valid, old: dict, new: dict) -> torch.Tensor:
        """``[1, latent, L] -> [1, latent, L]``: the model's layers with the KV history."""
        tf, lc = self.vocoder.pre_transformer, self.lc
        cos, sin = self.rope(torch.cat([freqs_in, freqs_in], dim=-1))
        x = tf.input_proj(h.transpose(1, 2))
        L = x.shape[1]
        mask = self.attn_mask[:, :, :L, : lc + L] + self._slot_bias(cache_valid, L)
        name = self.state_names[tf]
        layers = len(tf.layers)
        history = SelectionHistory(old[name], self.sel_hist[: lc + L], self.sel_cur[: lc + L, :L], layers, lc)
        x = tf.run_layers(x, cos, sin, mask, [history.layer(i) for i in range(layers)])
        _keep(new, name, history.new_cache())
        return tf.output_proj(tf.norm(x)).transpose(1, 2)

    # ---- the step -------------------------------------------------------------------------
    def forward(self, audio_codes, freqs_in, cache_valid, cache_in):
        voc, names = self.vocoder, self.state_names
        old = self._split(cache_in)
        new: dict[str, torch.Tensor] = {}  # new tails by segment name

        h = self._conv(voc.pre_conv, self.embed_codes(audio_codes), old, new)  # [1, latent, L]
        h = self._pre_transformer(h, freqs_in, cache_valid, old, new)

        for up, block in voc.upsample:
            h, tail = self._trans_conv(up, h, old.get(names[up]))
            _keep(new, names[up], tail)
            h = h + block.pointwise(self._conv(block.dwconv, h, old, new))

        h = self._conv(voc.decoder[0], h, old, new)
        for i, blk in enumerate(voc.decoder[1:-2]):
            snake, tconv, units = blk.block[0], blk.block[1], blk.block[2:]
            h, tail = self.block_upsample(i, tconv, self.snake(snake, h), old[names[tconv]])
            _keep(new, names[tconv], tail)
            for unit in units:
                y = self._conv(unit.conv1, self.snake(unit.act1, h), old, new)
                h = h + unit.conv2.conv(self.snake(unit.act2, y))
        h = self._conv(voc.decoder[-1], self.snake(voc.decoder[-2], h), old, new)
        audio = h.clamp(-1.0, 1.0).reshape(1, 1, -1)
        return audio, join_tails(self.contract.segments, new)
