"""The vocoder as a fixed-shape stateful step: B tokens + one flat cache in, B*1920 samples out.

A stream of steps equals a full decode (torch fp32: >= 100 dB over the whole signal, tested),
because every piece of state the full decode would see travels through the flat cache:

* each causal conv keeps its last ``(k-1)*dilation`` input samples,
* each k=2s ConvTranspose keeps its last input frame (k=s upsamplers keep nothing),
* the pre-transformer keeps ``sliding_window - 1`` rotated keys and values per layer.

``N`` (the cache size) does not depend on B, so the cache of a small-B first step feeds a
large-B main step.  The layout is ``cache_segments(cfg)``, and it lives in the
``StepContract``; the graph reads and writes it through static slices.

Choices that look odd and are load-bearing on the NPU (seed measurements, on a board):

* history and current keys are joined with constant selection matmuls, not ``Concat``: the
  RKNN Concat path corrupted sliding-window attention (step audio 9.5 dB vs 56.8 dB);
* the causal mask lives on the step's RELATIVE grid as a constant at -100 (``exp(-100)`` is 0
  in fp16; -3e4 leaked through the NPU softmax), and never-written history slots get -100
  from a bias built elementwise from the host's slot count ``cache_valid``;
* attention is 4-D multi-head (a 3-D single-head MatMul attention crashes the converter,
  field notes).
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.qwen3_tts_vocoder import (
    RESIDUAL_DILATIONS,
    CausalConv,
    CausalTransConv,
    Vocoder,
    VocoderConfig,
    apply_rope,
)
from .contract import StepContract, make_segments

MASK_VALUE = -100.0


def cache_segments(cfg: VocoderConfig):
    """The named segments of the flat cache, in graph order."""
    conv = lambda dim, k=7, d=1: (dim, (k - 1) * d)  # noqa: E731
    named = [("pre_conv", conv(cfg.codebook_dim, 3))]
    named.append(("kv", (cfg.num_hidden_layers, 2, cfg.num_key_value_heads, cfg.sliding_window - 1, cfg.head_dim)))
    for i, r in enumerate(cfg.upsampling_ratios):
        named.append((f"up{i}_convT", (cfg.latent_dim, -(-(r - r) // r))))  # k = s: no context
        named.append((f"up{i}_dw", conv(cfg.latent_dim)))
    named.append(("dec0", conv(cfg.latent_dim)))
    for i, ((cin, cout), r) in enumerate(zip(cfg.decoder_block_dims, cfg.upsample_rates)):
        named.append((f"b{i}_convT", (cin, 1)))  # k = 2s: one input frame of context
        for d in RESIDUAL_DILATIONS:
            named.append((f"b{i}_r{d}", conv(cout, 7, d)))
    named.append(("final", conv(cfg.output_dim)))
    return make_segments(named)


def step_contract(cfg: VocoderConfig, codes_length: int, formulation: str = "seed",
                  codes_dtype: str = "int64") -> StepContract:
    return StepContract(
        codes_length=int(codes_length),
        num_quantizers=cfg.num_quantizers,
        codebook_size=cfg.codebook_size,
        head_dim=cfg.head_dim,
        sliding_window=cfg.sliding_window,
        rope_theta=float(cfg.rope_theta),
        samples_per_token=cfg.samples_per_token,
        sample_rate=cfg.sample_rate,
        segments=cache_segments(cfg),
        formulation=formulation,
        codes_dtype=codes_dtype,
    )


class VocoderStep(nn.Module):
    """``forward(audio_codes, freqs_in, cache_valid, cache_in) -> (audio_values, cache_out)``.

    Torch accepts any number of tokens L <= B in eager mode (the stepwise check uses it for
    a final partial step); the exported graph is fixed at B.
    """

    def __init__(self, vocoder: Vocoder, codes_length: int):
        super().__init__()
        cfg = vocoder.cfg
        self.vocoder = vocoder
        self.cfg = cfg
        self.contract = step_contract(cfg, codes_length)
        B, lc = codes_length, cfg.sliding_window - 1
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

    # ---- hooks a formulation may replace (rkspeech.streaming.step_npu) -------------------
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

    def _attention(self, h: torch.Tensor, cos, sin, kv: torch.Tensor, cache_valid, parts: list) -> torch.Tensor:
        cfg, lc = self.cfg, self.lc
        L = h.shape[1]
        heads, kv_heads, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        sel_hist, sel_cur = self.sel_hist[: lc + L], self.sel_cur[: lc + L, :L]
        mask = self.attn_mask[:, :, :L, : lc + L] + self._slot_bias(cache_valid, L)
        tf = self.vocoder.pre_transformer
        for i, layer in enumerate(tf.layers):
            a = layer.self_attn
            hs = layer.input_layernorm(h)
            q = a.q_proj(hs).view(L, heads, hd).transpose(0, 1)  # [H, L, hd]
            k = a.k_proj(hs).view(L, kv_heads, hd).transpose(0, 1)
            v = a.v_proj(hs).view(L, kv_heads, hd).transpose(0, 1)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            k_all = sel_hist @ kv[i, 0] + sel_cur @ k  # [Hkv, lc+L, hd]
            v_all = sel_hist @ kv[i, 1] + sel_cur @ v
            parts.append(k_all[:, -lc:])
            parts.append(v_all[:, -lc:])
            if heads != kv_heads:
                k_all = k_all.repeat_interleave(heads // kv_heads, dim=0)
                v_all = v_all.repeat_interleave(heads // kv_heads, dim=0)
            scores = q.unsqueeze(0) @ k_all.unsqueeze(0).transpose(2, 3) * hd**-0.5 + mask
            o = (torch.softmax(scores, dim=-1) @ v_all.unsqueeze(0)).transpose(1, 2).reshape(1, L, heads * hd)
            h = h + layer.self_attn_layer_scale(a.o_proj(o))
            h = h + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(h)))
        return tf.output_proj(tf.norm(h))

    # ---- the step -------------------------------------------------------------------------
    def forward(self, audio_codes, freqs_in, cache_valid, cache_in):
        voc, cfg = self.vocoder, self.cfg
        c = self._split(cache_in)
        parts: list[torch.Tensor] = []  # new cache pieces, in segment order

        h = self.embed_codes(audio_codes)  # [1, codebook_dim, L]
        h, tail = self.conv_step(voc.pre_conv, h, c["pre_conv"], "pre_conv")
        parts.append(tail)

        cos, sin = self.rope(torch.cat([freqs_in, freqs_in], dim=-1))
        kv_parts: list[torch.Tensor] = []
        tf = voc.pre_transformer
        h = self._attention(tf.input_proj(h.transpose(1, 2)), cos, sin, c["kv"], cache_valid, kv_parts)
        parts.append(torch.stack([torch.stack(kv_parts[i:i + 2]) for i in range(0, len(kv_parts), 2)]))
        h = h.transpose(1, 2)

        for i, (up, block) in enumerate(voc.upsample):
            h, tail = self._trans_conv(up, h, c.get(f"up{i}_convT"))
            if tail is not None:
                parts.append(tail)
            res = h
            h, tail = self.conv_step(block.dwconv, h, c[f"up{i}_dw"], f"up{i}_dw")
            parts.append(tail)
            h = res + block.pointwise(h)

        h, tail = self.conv_step(voc.decoder[0], h, c["dec0"], "dec0")
        parts.append(tail)
        for i in range(len(cfg.upsample_rates)):
            blk = voc.decoder[1 + i].block
            h, tail = self.block_upsample(i, blk[1], self.snake(blk[0], h), c[f"b{i}_convT"])
            parts.append(tail)
            for unit, d in zip(blk[2:], RESIDUAL_DILATIONS):
                res = h
                name = f"b{i}_r{d}"
                y, tail = self.conv_step(unit.conv1, self.snake(unit.act1, h), c[name], name)
                parts.append(tail)
                h = res + unit.conv2.conv(self.snake(unit.act2, y))
        h = self.snake(voc.decoder[-2], h)
        h, tail = self.conv_step(voc.decoder[-1], h, c["final"], "final")
        parts.append(tail)
        audio = h.clamp(-1.0, 1.0).reshape(1, 1, -1)
        return audio, torch.cat([p.reshape(-1) for p in parts])
