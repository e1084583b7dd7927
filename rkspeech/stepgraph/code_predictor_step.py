"""The Qwen3-TTS code predictor as one fixed-shape graph per frame.

Per frame ``loop.predict_frame`` resets the code predictor's cache, feeds positions 0-1 (the
talker's last hidden state and codebook 0's embedding, one 2-token pass), and then 14 single
positions (codebook j's embedding, ``codec_embedding[j-1]``), reading codebook j from
``lm_head[j-1]`` of the last hidden state: at most 16 positions, and nothing carries over to the
next frame.  So the whole frame is one graph with the loop unrolled and the KV history kept
*inside* it (concatenated keys/values of static length): no cache I/O, no RoPE input (the 16
positions' cos/sin are constants), one NPU call per frame instead of 15.

Graph I/O (``CodePredictorFrame``; contract ``CodePredictorContract`` in the ONNX metadata under
the same key as the vocoder's, ``rkspeech.contract``, with its own format string):

==============  =================  ==========================================================
name            shape / dtype      meaning
==============  =================  ==========================================================
talker_hidden   [1, Ht] fp32       the talker's last (normed) hidden state for this frame
first_embed     [1, Ht] fp32       codebook 0's embedding (``talker.codec([code0])``; the host
                                   has it anyway for the talker's next input)
logits          [G-1, V] fp32      ``lm_head[j-1]`` logits of codebooks 1..G-1
codes           [G-1] int64        greedy codes (``embed="gather"`` only; with ``onehot`` the
                                   host takes ``argmax(logits, -1)``: ``greedy_codes``)
==============  =================  ==========================================================

Two ways to feed the greedy code back in the graph (``embed``):

* ``gather`` - ArgMax + the embedding table's Gather (the model's own ops).  rk3588 fp16
  (reduced config): ArgMax x15 and Gather x14 on the CPU.
* ``onehot`` (the NPU formulation) - the max by one global MaxPool over the logits viewed
  ``[1, 1, rows, cols]``, ``onehot = 1 - clip(clip((max - logits) * 65504, 0, 1) * 65504, 0, 1)``
  (two stages: ``ONEHOT_STAGES``), and ``onehot @ table``: every op on the NPU.  ReduceMax and Equal ran on the CPU; so did the
  Reshape of any small ``codes`` output (measured with 1-2 codebook graphs), hence no ``codes``
  output: the host's argmax of 15 x V logits is cheap.  An exact tie of the maximum (fp16
  logits tie where fp32 ones do not) keeps the first index, as argmax does: a second MaxPool
  over ``onehot * (V - id)`` (integers, exact in fp16 for V <= 2048).  Without it a tie summed
  two embedding rows (simulator: 30 dB logit SNR instead of 59; docs/code-predictor-step.md).

``int16_ready=True`` (onehot only): the same codes with int16-legal constants, for the
``int16-hybrid`` conversion (``convert.hybrid_int16``): rknn-toolkit2 2.5.0 refuses any tensor
beyond +-16384 in ``w16a16i_dfp`` (a Mul by 16383 builds, 16385 is refused; measured), so the
prefill mask is ``INT16_MASK`` (-20: exp(-20) = 2e-9, as masked as -30000 for softmax) and the
one-hot gain is clamped stages ``INT16_GAINS`` (1024, 64, 16383: the third added for the fp32
near-tie of ``ONEHOT_STAGES``, which the int16 graph had too: 12 of 750 decisions on the seed-5
root with (1024, 64); its simulator figures below predate it); and the ``[G-1, V]`` output is a
sum of ``lg_j * e_j`` instead of a Concat (every int16 Concat runs on the rk3588 CPU, an fp16
one rounds the logits to fp16 again).  Measured (benchmarks/bench_code_predictor_int16.py,
reduced checkpoint, 720 frames): same torch codes as the fp16 graph, logits within 1.4e-6.

Greedy only: sampling needs the host between codebooks (per-codebook calls), not built here.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.contracts.code_predictor import EMBED_MODES, CodePredictorContract
from rkspeech.contracts.talker import MASK_VALUE
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_transformer import rotate_half

#: One-hot sharpness of ``embed="onehot"``: fp16's largest finite value, applied in two clamped
#: stages (``ONEHOT_STAGES``; 65504**2 in all, every product still finite in fp16).  One stage left a
#: fractional one-hot in fp32 wherever the top two logits were closer than 1/65504: the reduced
#: custom-voice root of seed 5, frame 17, codebook 3: gap 9.5e-7 (3.3331127 for code 1782,
#: 3.3331118 for code 166) gave code 166 a one-hot of 0.94, its tie-break score 0.94 * (V - 166) =
#: 1764 beat code 1782's 266, the graph fed back code 166's embedding and the next 12 codebooks
#: differed from ``TTSModel``'s (the build's ``code_predictor_verify`` "export bug").  Two stages make
#: it exactly 0/1 for any fp32 gap >= 1/65504**2 = 2.3e-10, i.e. for every pair of distinct fp32
#: logits when the maximum's magnitude is >= 2**-7 (their spacing is >= 2**-31 there); in fp16 the
#: first stage alone is already 0/1 (spacing >= 2**-15 above 2**-5), so the NPU's codes do not change.
ONEHOT_GAIN = 65504.0
ONEHOT_STAGES = 2
#: ``int16_ready`` graph constants (see the module docstring): the prefill mask and the one-hot
#: gain as two clamped stages (65536 in all, each product <= 16384)
INT16_MASK = -20.0
INT16_GAINS = (1024.0, 64.0, 16383.0)


def _pool_shape(v: int) -> tuple[int, int]:
    """``(rows, cols)`` with ``rows * cols == v``, rows the largest divisor <= sqrt(v)."""
    rows = max(d for d in range(1, int(v**0.5) + 1) if v % d == 0)
    return rows, v // rows


def _repeat_heads(attn, proj: nn.Linear) -> nn.Linear:
    """``proj`` (kv heads) with each head's rows repeated for its ``heads // kv_heads`` query heads."""
    rep = attn.heads // attn.kv_heads
    hd = attn.head_dim
    w = proj.weight.detach().view(attn.kv_heads, 1, hd, -1).expand(-1, rep, -1, -1).reshape(attn.heads * hd, -1)
    out = nn.Linear(w.shape[1], w.shape[0], bias=proj.bias is not None)
    out.weight = nn.Parameter(w.clone(), requires_grad=False)
    if proj.bias is not None:
        b = proj.bias.detach().view(attn.kv_heads, 1, hd).expand(-1, rep, -1).reshape(-1)
        out.bias = nn.Parameter(b.clone(), requires_grad=False)
    return out


class CodePredictorFrame(nn.Module):
    """One frame of the code predictor (all G-1 codebooks, greedy), fixed shapes, no cache I/O.

    Shares the weights of a ``CodePredictor`` (``talker.code_predictor``); traces to the ops of
    ``models.qwen3_tts.talker`` in the same order, so greedy codes equal ``TTSModel``'s.
    """

    def __init__(self, cp, embed: str = "gather", int16_ready: bool = False):
        super().__init__()
        if embed not in EMBED_MODES:
            raise RkspeechError(f"embed must be one of {EMBED_MODES}, got {embed!r}")
        if int16_ready and embed != "onehot":
            raise RkspeechError("int16_ready needs embed='onehot' (the gather graph's ArgMax / Gather are CPU ops)")
        self.cp = cp
        self.embed = embed
        self.int16_ready = bool(int16_ready)
        model = cp.model
        cfg = model.cfg
        self.groups = cfg.num_code_groups
        self.vocab = cfg.vocab_size
        # RoPE of positions 0..G-1, computed as DecoderStack.forward does (float32 product)
        pos = torch.arange(0, self.groups, dtype=torch.float32)
        freqs = pos[:, None] * model.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = INT16_MASK if self.int16_ready else MASK_VALUE
        self.register_buffer("prefill_mask", torch.tensor([[0.0, mask], [0.0, 0.0]]), persistent=False)
        self.k_rep = nn.ModuleList(_repeat_heads(layer.self_attn, layer.self_attn.k_proj) for layer in model.layers)
        self.v_rep = nn.ModuleList(_repeat_heads(layer.self_attn, layer.self_attn.v_proj) for layer in model.layers)
        if embed == "onehot" and self.vocab > 2048:
            raise RkspeechError(f"embed='onehot' needs a vocabulary of at most 2048 codes (fp16-exact ranks), "
                                f"got {self.vocab}; use embed='gather'")
        self._pool = _pool_shape(self.vocab)
        self.register_buffer("rank", torch.arange(self.vocab, 0, -1, dtype=torch.float32).view(1, self.vocab),
                             persistent=False)

    def contract(self) -> CodePredictorContract:
        cfg = self.cp.model.cfg
        ht = self.cp.model.codec_embedding[0].embedding_dim
        return CodePredictorContract(talker_hidden=ht, hidden=cfg.hidden_size, vocab_size=cfg.vocab_size,
                                     num_code_groups=cfg.num_code_groups, layers=cfg.num_hidden_layers,
                                     embed=self.embed)

    # -- one pass of the stack over t new positions -------------------------------------------
    def _attention(self, i: int, attn, x, start: int, kv):
        t = x.shape[1]
        heads, hd = attn.heads, attn.head_dim
        k_rep, v_rep = self.k_rep[i], self.v_rep[i]
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        q = attn.q_norm(attn.q_proj(x).view(t, heads, hd)).transpose(0, 1)  # [H, t, hd]
        # keys/values of every query head straight from row-repeated projections: no
        # repeat_interleave (it traces to Shape/Tile), no grouped view of q (its Reshapes ran on
        # the rk3588 CPU; measured); the cache holds H heads (16 positions: small)
        k = attn.k_norm(k_rep(x).view(t, heads, hd)).transpose(0, 1)
        v = v_rep(x).view(t, heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if kv is not None:
            k = torch.cat((kv[0], k), dim=1)
            v = torch.cat((kv[1], v), dim=1)
        end = start + t
        scores = q.unsqueeze(0) @ k.unsqueeze(0).transpose(2, 3) * hd**-0.5  # [1, H, t, end]
        if t > 1:
            scores = scores + self.prefill_mask[:t, :end]
        o = (torch.softmax(scores, dim=-1) @ v.unsqueeze(0)).transpose(1, 2)  # [1, t, H, hd]
        return attn.o_proj(o.reshape(1, t, heads * hd)), (k, v)

    def _stack(self, x, start: int, caches):
        model = self.cp.model
        new = []
        h = x
        for i, layer in enumerate(model.layers):
            a, kv = self._attention(i, layer.self_attn, layer.input_layernorm(h), start, caches[i] if caches else None)
            h = h + a
            h = h + layer.mlp(layer.post_attention_layernorm(h))
            new.append(kv)
        return model.norm(h), new

    def _pick(self, logits, j: int):
        """(code, embedding [1, 1, Ht]) of the greedy code of codebook j from ``logits [1, V]``."""
        table = self.cp.model.codec_embedding[j - 1]
        if self.embed == "gather":
            code = torch.argmax(logits, dim=-1)  # [1]
            return code, table(code.view(1, 1))
        # max over the vocabulary as one global MaxPool (ReduceMax and Equal ran on the rk3588
        # CPU; measured), then 1 at the max and 0 wherever the gap is >= 1/65504 (fp16-safe:
        # an overflow to inf is clamped to 1 before the subtraction)
        rows, cols = self._pool
        m = F.max_pool2d(logits.view(1, 1, rows, cols), (rows, cols)).view(1, 1)
        if self.int16_ready:  # the same 0/1 with every product <= 16384 (w16a16i_dfp's limit)
            a = m - logits
            for gain in INT16_GAINS:
                a = torch.clamp(a * gain, 0.0, 1.0)
            onehot = 1.0 - a
        else:
            a = m - logits
            for _ in range(ONEHOT_STAGES):
                a = torch.clamp(a * ONEHOT_GAIN, 0.0, 1.0)
            onehot = 1.0 - a  # [1, V]
        # ties (fp16 logits tie the top two in ~0.3% of codebooks; measured on the simulator)
        # would sum two rows: keep the first, as argmax does, with integer scores V - id
        # (exact in fp16 up to 2048) and a second MaxPool
        first = onehot * self.rank
        top = F.max_pool2d(first.view(1, 1, rows, cols), (rows, cols)).view(1, 1)
        onehot = torch.relu(1.0 - torch.abs(first - top))
        return None, (onehot @ table.weight).view(1, 1, -1)

    def forward(self, talker_hidden: torch.Tensor, first_embed: torch.Tensor):
        cp = self.cp
        x = cp.small_to_mtp_projection(torch.cat((talker_hidden, first_embed), dim=0).unsqueeze(0))  # [1, 2, H]
        h, caches = self._stack(x, 0, None)
        h = h[:, -1:]
        all_logits, codes = [], []
        for j in range(1, self.groups):
            lg = cp.lm_head[j - 1](h).view(1, self.vocab)
            all_logits.append(lg)
            if j == self.groups - 1 and self.embed == "onehot":
                break
            code, emb = self._pick(lg, j)
            codes.append(code)
            if j < self.groups - 1:
                h, caches = self._stack(cp.small_to_mtp_projection(emb), j + 1, caches)
        if self.int16_ready:  # [G-1, V] as a sum of row-placed terms: no Concat (CPU in int16)
            eye = torch.eye(self.groups - 1)
            logits = None
            for j, lg in enumerate(all_logits):
                term = lg * eye[:, j:j + 1]
                logits = term if logits is None else logits + term
            return logits
        logits = torch.cat(all_logits, dim=0)
        if self.embed == "onehot":
            return logits
        return logits, torch.cat(codes, dim=0)


def greedy_frames_with_inputs(tts, text: str, frames: int, **kw):
    """Run ``tts`` (a ``TTSModel``) greedily for up to ``frames`` frames and capture, per frame,
    the code predictor's inputs: ``[(talker_hidden [1, Ht], first_embed [1, Ht], frame codes [G])]``.

    Wraps ``talker.code_predictor.small_to_mtp_projection`` for the duration: its first call in a
    frame receives ``stack(hidden, first)`` ``[2, Ht]`` (``loop.predict_frame``).
    """
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    cp = tts.net.talker.code_predictor
    proj = cp.small_to_mtp_projection
    seen: list[torch.Tensor] = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = proj

        def forward(self, x):
            if x.shape[-2] == 2:  # positions 0-1 of a frame (``loop.predict_frame``: ``[2, Ht]``)
                seen.append(x.detach().reshape(2, -1).clone())
            return self.inner(x)

    cp.small_to_mtp_projection = Spy()
    try:
        opts = GenerationOptions.greedy(max_new_tokens=frames + 1)
        out = []
        for frame in tts.generate_frames(text, options=opts, **kw):
            x = seen[-1]
            out.append((x[0:1].clone(), x[1:2].clone(), frame))
            if len(out) >= frames:
                break
        return out
    finally:
        cp.small_to_mtp_projection = proj
