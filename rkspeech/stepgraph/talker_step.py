"""The Qwen3-TTS talker's decoder stack as one fixed-shape step graph.

One graph per chunk length ``B`` serves every step of an utterance: ``B = 32`` (say) for the
prompt's prefill in chunks, ``B = 1`` for the one-position-per-frame decode.  The KV cache is a
fixed-capacity buffer that the host keeps and passes in; the graph returns only the ``B`` new
keys/values, which the host writes at the chunk's positions (``runtime.tts.talker_backend``).  The
positions enter as their RoPE cos/sin, and which cache slots a position may see as an additive
mask, so nothing in the graph depends on where in the utterance the step is.

Graph I/O (``TalkerStep``; contract ``TalkerContract`` under the metadata key ``rkspeech.contract``,
format ``rkspeech-talker/1``).  ``Hc`` is the cache's head count: ``heads`` (``kv_layout="heads"``,
k/v projections row-repeated per query head) or ``kv_heads`` (``"grouped"``, queries grouped per kv
head); ``R = B * heads / Hc`` mask rows.

==========  =========================  ===========================================================
name        shape / dtype              meaning
==========  =========================  ===========================================================
embeds      [B, Ht] fp32               the B positions' input embeddings (padding rows: zeros)
cos, sin    [B, head_dim] fp32         RoPE of the B positions (``rope_cos_sin``; host computed)
mask        [R, cap + B] fp32          additive: 0 where a row may attend, ``MASK_VALUE`` elsewhere;
                                       columns 0..cap-1 the cache slots, cap..cap+B-1 the chunk
cache       [2L, Hc, cap, hd] fp32     keys (even rows) and values (odd) of every layer (``flat``);
                                       ``cache_io="layers"``: ``cache_k{i}`` / ``cache_v{i}``
                                       ``[1, Hc, cap, hd]``
hidden      [B, Ht] fp32               final-normed hidden states of the B positions
kv_new      [2L, Hc, B, hd] fp32       the B positions' keys (after k_norm and RoPE) and values
==========  =========================  ===========================================================

NPU formulation (the code predictor's, ``docs/code-predictor-step.md``): 4-D multi-head matmuls,
finite mask (``-30000``: fp16-safe, exp underflows to 0), no Sin/Cos (cos/sin are inputs), no
runtime Gather/Scatter (the cache write happens on the host: an in-graph write at a runtime
position needs a ScatterND or a cap x B selection matmul, and returning the whole cache copies
``cap / B`` times more per call), GQA without ``repeat_interleave`` (Shape/Tile).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn

from rkspeech.contracts.talker import CACHE_IO, KV_LAYOUTS, MASK_VALUE, MODEL_NAME, TalkerContract
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_transformer import rotate_half
from rkspeech.stepgraph.code_predictor_step import _repeat_heads
from rkspeech.stepgraph.host import rope_cos_sin, step_mask


def weights_fingerprint(model) -> str:
    """16 hex digits over the final norm and layer 0's q_proj (fp32 bytes): a graph exported
    from another checkpoint of the same shape is refused by the backend."""
    h = hashlib.sha256()
    for t in (model.norm.weight, model.layers[0].self_attn.q_proj.weight):
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def contract_for(model, *, capacity: int, B: int, kv_layout: str = "heads", cache_io: str = "flat",
                 name: str = MODEL_NAME, mask_value: float = MASK_VALUE) -> TalkerContract:
    """The contract of a step over ``model`` (a ``DecoderStack``: ``talker.model``, or the code
    predictor's, ``name`` then saying which)."""
    cfg = model.cfg
    return TalkerContract(hidden=cfg.hidden_size, layers=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
                          kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, capacity=capacity, B=B,
                          rope_theta=float(cfg.rope_theta), rms_norm_eps=float(cfg.rms_norm_eps),
                          kv_layout=kv_layout, cache_io=cache_io, fingerprint=weights_fingerprint(model),
                          model=name, mask_value=float(mask_value))


def check_contract_matches(contract: TalkerContract, model, where: str = "talker graph") -> None:
    """One-line RkspeechError when ``contract`` was not exported from ``model``'s stack."""
    want = contract_for(model, capacity=contract.capacity, B=contract.B, kv_layout=contract.kv_layout,
                        cache_io=contract.cache_io, name=contract.model)
    for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "rope_theta", "rms_norm_eps", "fingerprint"):
        have, need = getattr(contract, key), getattr(want, key)
        if have != need:
            raise RkspeechError(f"{where} does not match this model: its contract has {key}={have!r}, the model "
                                f"{need!r}; export the graphs from this checkpoint")


class TalkerStep(nn.Module):
    """``B`` new positions of ``talker.model`` over a fixed-capacity cache (module docstring).

    Shares the model's weights (plus row-repeated k/v projections for ``kv_layout="heads"``);
    traces the ops of ``models.qwen3_tts.talker`` in the same order."""

    def __init__(self, model, *, capacity: int, B: int, kv_layout: str = "heads", cache_io: str = "flat",
                 name: str = MODEL_NAME, mask_value: float = MASK_VALUE):
        super().__init__()
        if kv_layout not in KV_LAYOUTS:
            raise RkspeechError(f"kv_layout must be one of {KV_LAYOUTS}, got {kv_layout!r}")
        if cache_io not in CACHE_IO:
            raise RkspeechError(f"cache_io must be one of {CACHE_IO}, got {cache_io!r}")
        if B < 1 or capacity < 1:
            raise RkspeechError(f"B and capacity must be >= 1, got B={B}, capacity={capacity}")
        self.model = model
        self.capacity, self.B, self.kv_layout, self.cache_io = capacity, B, kv_layout, cache_io
        if kv_layout == "heads":
            self.k_rep = nn.ModuleList(_repeat_heads(la.self_attn, la.self_attn.k_proj) for la in model.layers)
            self.v_rep = nn.ModuleList(_repeat_heads(la.self_attn, la.self_attn.v_proj) for la in model.layers)
        self._contract = contract_for(model, capacity=capacity, B=B, kv_layout=kv_layout, cache_io=cache_io,
                                      name=name, mask_value=mask_value)

    def contract(self) -> TalkerContract:
        return self._contract

    def _attention(self, i: int, attn, x, cos, sin, mask, k_cache, v_cache):
        B, H, hd = self.B, attn.heads, attn.head_dim
        hc = self._contract.cache_heads
        q = attn.q_norm(attn.q_proj(x).view(B, H, hd)).transpose(0, 1).unsqueeze(0)  # [1, H, B, hd]
        if self.kv_layout == "heads":
            k, v = self.k_rep[i](x), self.v_rep[i](x)
        else:
            k, v = attn.k_proj(x), attn.v_proj(x)
        k = attn.k_norm(k.view(B, hc, hd)).transpose(0, 1).unsqueeze(0)  # [1, Hc, B, hd]
        v = v.view(B, hc, hd).transpose(0, 1).unsqueeze(0)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys = torch.cat((k_cache, k), dim=2)  # [1, Hc, cap + B, hd]
        values = torch.cat((v_cache, v), dim=2)
        if self.kv_layout == "grouped":
            q = q.reshape(1, hc, H // hc * B, hd)  # query head g*rep + r -> group g (repeat_interleave order)
        scores = q @ keys.transpose(2, 3) * hd**-0.5 + mask
        o = torch.softmax(scores, dim=-1) @ values  # [1, Hc, R, hd]
        o = o.reshape(1, H, B, hd).transpose(1, 2).reshape(1, B, H * hd)
        return attn.o_proj(o), k, v

    def forward(self, embeds, cos, sin, mask, *cache):
        model = self.model
        h = embeds.unsqueeze(0)  # [1, B, Ht]
        new = []
        for i, layer in enumerate(model.layers):
            if self.cache_io == "flat":
                k_cache, v_cache = cache[0][2 * i:2 * i + 1], cache[0][2 * i + 1:2 * i + 2]
            else:
                k_cache, v_cache = cache[2 * i], cache[2 * i + 1]
            a, k, v = self._attention(i, layer.self_attn, layer.input_layernorm(h), cos, sin, mask, k_cache, v_cache)
            h = h + a
            h = h + layer.mlp(layer.post_attention_layernorm(h))
            new += [k, v]
        return model.norm(h).view(self.B, -1), torch.cat(new, dim=0)

    def dummy_inputs(self, start: int | None = None) -> tuple[torch.Tensor, ...]:
        """Example inputs for tracing: random embeds and cache, a mid-capacity start."""
        c = self._contract
        start = c.capacity // 2 if start is None else start
        gen = torch.Generator().manual_seed(0)
        cos, sin = rope_cos_sin(np.arange(start, start + c.B), self.model.inv_freq)
        shapes = c.input_shapes()
        cache = [torch.randn(*shapes[n], generator=gen) * 0.5 for n in c.input_names[4:]]
        return (torch.randn(c.B, c.hidden, generator=gen), torch.from_numpy(cos), torch.from_numpy(sin),
                torch.from_numpy(step_mask(c, start)), *cache)
