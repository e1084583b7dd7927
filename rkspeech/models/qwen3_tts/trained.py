"""A confident synthetic Qwen3-TTS checkpoint: the reduced talker and code predictor trained for a
few CPU minutes on a deterministic text -> codes rule, so their top-1 margins are wide and the
talker stops by itself (issue 27, deliver 1).

The rule (``CodeRule``, fixed by the seed):

* codebook 0 of frame k is ``table[ids[k]]``, ``ids`` the text's own token ids as the prompt holds
  them (``TTSModel.prompt_ids(text)[3:-5]``) and ``table`` an injective map of the text vocabulary
  into codes 0..2047; after ``len(ids)`` frames the talker emits ``codec_eos`` (frame count =
  token count);
* codebook j >= 1 is ``perm[j][code of codebook j-1]`` (``perm[j]`` a permutation of 0..2047): a
  function of codebook 0 and the codebook index, one step of which the code predictor learns at
  each of its positions.

Training is teacher-forced next-token prediction on the inputs the generation loop builds: the
prompt from ``TTSModel.build_prompt`` itself (run with gradients), then one talker input per frame
made as ``TTSModel._loop`` makes it (the frame's 16 codebook embeddings summed, plus the frame's
text part); the code predictor sees the talker's hidden state (detached) and codebook 0's
embedding, then codebooks 1..14's embeddings, through ``small_to_mtp_projection``.  The talker's
``codec_head`` learns codebook 0 and ``codec_eos``; the code predictor's ``lm_head[j-1]`` learns
codebook j.  The stacks run batched (``stack_forward``: the same modules as ``DecoderStack.forward``,
causal attention over right-padded sequences; equal to it at batch 1, ``tests/models/test_trained_checkpoint.py``).

**The prompt form.** Training uses the streaming prompt (``text_in_prompt=False``, qwen-tts'
``non_streaming_mode=False``): the text is fed one token per frame, so frame k's decision sees
text token k (and ``tts_eos`` at the stop) at its own position.  Generation must use the same
form: the written ``config.json`` records it (``rkspeech_prompt_form: streaming``,
``tts_config.PROMPT_FORM_KEY``), so generation that leaves ``text_in_prompt`` None (speak, serve,
the build's accuracy gate) uses it.  The custom-voice default puts the whole text
in the prompt; there the talker would have to find "the token after the one just spoken" (an
induction-style copy across a text-length-dependent distance), which the reduced talker (2
layers, head_dim 16 with rope_theta 1e6) did not learn in 800 steps here, not even with an
auxiliary previous-token loss (docs/confident-checkpoint.md); ``streaming_fraction`` mixes such
prompts in.

Only the reduced custom-voice config is trained (the published one's text vocabulary does not fit
an injective table into 2048 codes, and its size would not train in minutes on a CPU).  The
speech tokenizer (vocoder) stays random.  Results are cached by (config, variant, seed, options)
when a cache folder is given.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rkspeech.core.capture import random_request
from rkspeech.core.errors import RkspeechError
from rkspeech.models.training import TrainSchedule, cache_key, cache_root, from_cache, optimizer_step, to_cache

CODES = 2048  # codebook 0's ordinary codes in the talker vocabulary; every code predictor codebook
RECIPE_VERSION = 2  # bump when train() changes what a given TrainOptions produces (the cache key)


@dataclass(frozen=True)
class TrainOptions(TrainSchedule):
    """How the reduced talker and code predictor are trained (all deterministic in ``seed``, which
    also seeds the rule; ``write_trained_tts_checkpoint`` defaults it to the checkpoint's seed)."""
    #: random token count per training text before re-encoding (the body's length ends up close)
    min_tokens: int = 3
    max_tokens: int = 32
    #: code predictor frames per step (drawn from the talker batch's frames)
    predictor_frames: int = 96
    #: share of training prompts in the streaming form (text fed one token per frame); the rest
    #: hold the whole text (the custom-voice default), which the reduced talker does not learn in
    #: minutes (module docstring)
    streaming_fraction: float = 1.0
    counts = ("steps", "batch", "predictor_frames", "threads")

    def check(self) -> None:
        super().check()
        if not 2 <= self.min_tokens <= self.max_tokens:
            raise RkspeechError(f"training text length must satisfy 2 <= min_tokens <= max_tokens, got "
                                f"{self.min_tokens}..{self.max_tokens}")
        if not 0 <= self.streaming_fraction <= 1:
            raise RkspeechError("training streaming_fraction must be in [0, 1]")

    def key(self, config: str, variant: str, seed: int) -> str:
        return cache_key({"config": config, "variant": variant, "seed": seed, "rule": CodeRule.VERSION,
                          "recipe": RECIPE_VERSION, **asdict(self)})


class CodeRule:
    """The fixed text -> codes rule (module docstring), seeded."""
    VERSION = 1

    def __init__(self, text_vocab: int, groups: int, seed: int):
        if text_vocab > CODES:
            raise RkspeechError(f"the text vocabulary ({text_vocab}) does not fit an injective table into {CODES} "
                                "codes; the trained checkpoint needs the reduced config")
        rng = np.random.default_rng(np.random.SeedSequence([27, seed]))
        self.table = rng.permutation(CODES)[:text_vocab].astype(np.int64)
        self.perm = np.stack([np.arange(CODES)] + [rng.permutation(CODES) for _ in range(groups - 1)]).astype(np.int64)
        self.groups = groups

    def codes(self, ids) -> np.ndarray:
        """``int64 [len(ids), groups]``: the frames the rule assigns to the text ids ``ids``."""
        out = np.empty((len(ids), self.groups), dtype=np.int64)
        out[:, 0] = self.table[np.asarray(ids, dtype=np.int64)]
        for j in range(1, self.groups):
            out[:, j] = self.perm[j][out[:, j - 1]]
        return out


def rule_for(tts, seed: int) -> CodeRule:
    return CodeRule(tts.cfg.talker.text_vocab_size, tts.num_code_groups, seed)


def expected_codes(tts, rule: CodeRule, text: str) -> np.ndarray:
    """What a perfectly trained talker + code predictor generate for ``text`` (then ``codec_eos``)."""
    return rule.codes(tts.prompt_ids(text)[3:-5])


# -- batched forward over the models' own modules -----------------------------------------------
def stack_forward(stack, x):
    """``DecoderStack.forward`` for a batch ``x [B, T, hidden]`` of sequences starting at position 0
    (causal; right padding is harmless for the real positions).  Returns the normed hidden states."""
    import torch
    from torch.nn import functional as F

    from rkspeech.models.qwen3_tts.vocoder_transformer import rotate_half

    b, t, _ = x.shape
    pos = torch.arange(t, dtype=torch.float32)
    freqs = pos[:, None] * stack.inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    h = x
    for layer in stack.layers:
        a = layer.self_attn
        hd = a.head_dim
        y = layer.input_layernorm(h)
        q = a.q_norm(a.q_proj(y).view(b, t, a.heads, hd)).transpose(1, 2)
        k = a.k_norm(a.k_proj(y).view(b, t, a.kv_heads, hd)).transpose(1, 2)
        v = a.v_proj(y).view(b, t, a.kv_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if a.heads != a.kv_heads:
            k = k.repeat_interleave(a.heads // a.kv_heads, dim=1)
            v = v.repeat_interleave(a.heads // a.kv_heads, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + a.o_proj(o.transpose(1, 2).reshape(b, t, a.heads * hd))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return stack.norm(h)


# -- training data ------------------------------------------------------------------------------
class TextSampler:
    """Random training texts: strings decoded from random ordinary tokens of the root's vocabulary
    (printable ASCII only), so every token id the tokenizer produces is seen in training."""

    def __init__(self, root: Path):
        from tokenizers import decoders

        vocab = json.loads((Path(root) / "vocab.json").read_text(encoding="utf-8"))
        dec = decoders.ByteLevel()
        self.pieces = []
        for tok in vocab:
            if tok.startswith("<|"):
                continue
            s = dec.decode([tok])
            if s and all(32 <= ord(c) < 127 for c in s) and "<" not in s:
                self.pieces.append(s)
        self.pieces.sort()

    def text(self, rng: np.random.Generator, n: int) -> str:
        s = "".join(self.pieces[i] for i in rng.integers(0, len(self.pieces), n)).strip()
        return s or "a"


def frame_inputs(tts, codes):
    """The summed codebook embeddings of frames ``codes [F, G]``: ``[F, 1, Ht]``, as the generation
    loop sums one frame's (codebook 0: the talker's ``codec_embedding``; j >= 1: the code
    predictor's ``codec_embedding[j-1]``).  One lookup per table for all frames (a batch's frames
    at once: each lookup's backward writes a whole-table gradient)."""
    import torch

    talker = tts.net.talker
    cp = talker.code_predictor
    c = torch.as_tensor(np.asarray(codes), dtype=torch.long)
    embeds = [talker.codec(c[:, 0]).transpose(0, 1)]  # [F, 1, Ht]
    embeds += [cp.model.codec_embedding[j - 1](c[:, j:j + 1]) for j in range(1, c.shape[1])]
    return torch.cat(embeds, dim=1).sum(1, keepdim=True)


def talker_sequence(tts, text: str, codes, request: dict, *, text_in_prompt: bool, frames=None):
    """One teacher-forced talker sequence as the generation loop feeds it: ``(inputs [1, L + F, Ht],
    first decision position)``: the prompt (``build_prompt``, gradients kept), then for each of
    the ``F`` frames of ``codes [F, G]`` the loop's next input (the frame's codebook embeddings
    summed, ``frame_inputs`` or the given ``frames [F, 1, Ht]``, plus the frame's text part).
    Position ``first + k`` decides frame k (``k = F``: the stop)."""
    import torch

    prompt, trailing, pad = tts.build_prompt(text, text_in_prompt=text_in_prompt, **request)
    f = len(codes)
    if f == 0:
        return prompt, prompt.shape[1] - 1
    x = frame_inputs(tts, codes) if frames is None else frames
    n_trailing = trailing.shape[1]
    text_in = torch.cat([trailing[:, k:k + 1] if k < n_trailing else pad for k in range(f)], dim=1)  # [1, F, Ht]
    return torch.cat((prompt, x.transpose(0, 1) + text_in), dim=1), prompt.shape[1] - 1


def predictor_sequence(tts, hidden, codes):
    """Code predictor inputs for frames ``codes [N, G]`` with the talker's hidden states
    ``hidden [N, Ht]``: ``[N, G, Hc]`` after ``small_to_mtp_projection``; position j predicts
    codebook j (``lm_head[j-1]``), as ``TorchCodePredictor.frame`` feeds it."""
    import torch

    talker = tts.net.talker
    cp = talker.code_predictor
    c = torch.as_tensor(np.asarray(codes), dtype=torch.long)
    parts = [hidden[:, None, :], talker.codec(c[:, 0]).transpose(0, 1)]
    parts += [cp.model.codec_embedding[j - 1](c[:, j:j + 1]) for j in range(1, c.shape[1] - 1)]
    return cp.small_to_mtp_projection(torch.cat(parts, dim=1))


# -- training -----------------------------------------------------------------------------------
def train(tts, options: TrainOptions, *, rule: CodeRule | None = None, log=None) -> dict:
    """Train ``tts``'s talker and code predictor in place; returns a record (losses, seconds)."""
    import torch
    from torch.nn import functional as F

    options.check()
    if tts.cfg.tts_model_type != "custom_voice":
        raise RkspeechError(f"the trained checkpoint is made for the custom-voice variant, not {tts.variant}")
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    rule = rule or rule_for(tts, options.seed)
    sampler = TextSampler(tts.files.root)
    rng = np.random.default_rng(np.random.SeedSequence([2027, options.seed]))
    talker = tts.net.talker
    cp = talker.code_predictor
    eos = tts.cfg.talker.codec_eos_token_id
    groups = tts.num_code_groups
    module = tts.net.module
    params = [p for n, p in module.named_parameters() if n.startswith("talker.")]
    opt = torch.optim.AdamW(params, lr=options.lr, weight_decay=0.0, betas=(0.9, 0.98))

    module.train()
    history = []
    t0 = time.perf_counter()
    try:
        for step in range(options.steps):
            seqs, targets, spans, frame_codes, texts = [], [], [], [], []
            for _ in range(options.batch):
                text = sampler.text(rng, int(rng.integers(options.min_tokens, options.max_tokens + 1)))
                ids = tts.prompt_ids(text)[3:-5]
                if len(ids) >= 2:
                    texts.append(text)
                    frame_codes.append(rule.codes(ids))
            sizes = [len(c) for c in frame_codes]
            frames = torch.split(frame_inputs(tts, np.concatenate(frame_codes)), sizes)
            for text, codes, x_frames in zip(texts, frame_codes, frames):
                streaming = bool(rng.random() < options.streaming_fraction)
                x, first = talker_sequence(tts, text, codes, random_request(tts, rng), text_in_prompt=not streaming,
                                           frames=x_frames)
                seqs.append(x[0])
                spans.append((first, len(codes) + 1))
                targets.append(torch.as_tensor(np.append(codes[:, 0], eos), dtype=torch.long))
            t_max = max(s.shape[0] for s in seqs)
            batch = torch.stack([F.pad(s, (0, 0, 0, t_max - s.shape[0])) for s in seqs])
            h = stack_forward(talker.model, batch)
            dec = torch.cat([h[i, first:first + n] for i, (first, n) in enumerate(spans)])
            talker_loss = F.cross_entropy(talker.codec_head(dec), torch.cat(targets))
            # code predictor: frames drawn from the batch, the talker's hidden state detached
            hid = torch.cat([h[i, first:first + n - 1] for i, (first, n) in enumerate(spans)]).detach()
            allc = np.concatenate(frame_codes)
            pick = rng.choice(len(allc), size=min(options.predictor_frames, len(allc)), replace=False)
            hc = stack_forward(cp.model, predictor_sequence(tts, hid[torch.as_tensor(pick)], allc[pick]))
            cp_loss = sum(F.cross_entropy(cp.lm_head[j - 1](hc[:, j]), torch.as_tensor(allc[pick, j]))
                          for j in range(1, groups)) / (groups - 1)
            loss = talker_loss + cp_loss
            optimizer_step(opt, params, loss, options, step)
            history.append((float(talker_loss.detach()), float(cp_loss.detach())))
            if log is not None and (step % 100 == 0 or step == options.steps - 1):
                log(f"step {step}: talker loss {history[-1][0]:.4f}, code predictor loss {history[-1][1]:.4f} "
                    f"({time.perf_counter() - t0:.0f} s)")
    finally:
        module.eval()
    tail = history[-max(1, min(50, len(history))):]
    return {"steps": options.steps, "seconds": round(time.perf_counter() - t0, 1),
            "talker_loss_first": round(history[0][0], 4), "code_predictor_loss_first": round(history[0][1], 4),
            "talker_loss_last50": round(float(np.mean([a for a, _ in tail])), 5),
            "code_predictor_loss_last50": round(float(np.mean([b for _, b in tail])), 5),
            "rule_version": CodeRule.VERSION, "options": asdict(options)}


# -- writing ------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """``$RKSPEECH_CACHE`` or ``~/.cache/rkspeech``, plus ``trained-tts``."""
    return cache_root() / "trained-tts"


def _save_weights(tts, path: Path, meta: dict) -> None:
    import torch

    from rkspeech.core.atomic import atomic_path
    from rkspeech.models.safetensors_file import save_file_stable

    tensors = {k: v.detach().to(torch.float32).contiguous() for k, v in tts.net.module.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file_stable(tensors, tmp, metadata={"format": "pt", **{k: str(v) for k, v in meta.items()}})


def write_trained_tts_checkpoint(out_dir: str | os.PathLike, config: str = "reduced", variant: str = "custom-voice",
                                 seed: int = 0, options: TrainOptions | None = None,
                                 cache_dir: str | os.PathLike | None = None, log=None) -> tuple[Path, dict]:
    """Write ``write_tts_checkpoint``'s root at ``out_dir`` with the talker and code predictor
    trained on the rule (seeded by ``seed``); returns ``(root, training record)``.  With
    ``cache_dir`` the trained ``model.safetensors`` is kept there under a key of (config, variant,
    seed, options) and reused."""
    from rkspeech.core.atomic import write_json
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.models.qwen3_tts.tts_config import PROMPT_FORM_KEY

    options = options or TrainOptions(seed=seed)
    options.check()
    if config != "reduced":
        raise RkspeechError("--trained trains the reduced config only (the published size does not train in "
                            "minutes on a CPU); use --config reduced")
    if variant != "custom-voice":
        raise RkspeechError("--trained makes a custom-voice root only; use --variant custom-voice")
    root = write_tts_checkpoint(out_dir, config, variant, seed)
    config_json = root / "config.json"
    raw = json.loads(config_json.read_text(encoding="utf-8"))
    key = options.key(config, variant, seed)
    config_json.unlink()  # the root is incomplete until the trained weights are in place
    record = from_cache(cache_dir, key, root / "model.safetensors")
    if record is None:
        write_json(config_json, raw)
        tts = TTSModel.load(root)
        config_json.unlink()
        record = train(tts, options, log=log)
        meta = {"rkspeech_synthetic": f"{config}/{variant}/seed={seed}", "rkspeech_trained": json.dumps(
            {"rule_version": CodeRule.VERSION, "key": key, **asdict(options)}, sort_keys=True)}
        _save_weights(tts, root / "model.safetensors", meta)
        record = to_cache(cache_dir, key, root / "model.safetensors", record)
    record["key"] = key
    if options.streaming_fraction == 1.0:  # trained (and confident) only in the streaming form
        raw[PROMPT_FORM_KEY] = "streaming"
    write_json(config_json, raw)  # last: a root with config.json is complete
    return root, record
