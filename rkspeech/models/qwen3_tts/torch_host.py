"""The generation loop's host backend in torch (``loop.HostOps``): the reference, and training.

:class:`TorchHost` runs the host's share of generation over the loaded ``talker`` module
(``models.qwen3_tts.talker.Talker``), each call with the shapes qwen-tts' own code uses, so the
floats are those of ``TTSModel`` before the loop was shared (greedy codes equal qwen-tts',
sampled codes too for the same seed: ``tests/models/test_tts_generate.py``).  Prompt rows keep their
autograd graph (``trained.py`` trains through ``TTSModel.build_prompt``).

:class:`TorchStack` is a decoder stack with its KV cache in the shape of a graph stack
(``start`` / ``forward`` over numpy), so the reference code predictor runs through the same
frame function as the graph backends (``loop.predict_frame``).
"""

from __future__ import annotations

import numpy as np
import torch


def choose_token(logits, opts_sample: bool, temperature: float, top_k: int, top_p: float, generator) -> int:
    """HF warpers (temperature, top-k, top-p) then multinomial, or argmax; ``logits [V]`` float32."""
    if not opts_sample:
        return int(torch.argmax(logits))
    scores = logits / temperature if temperature != 1.0 else logits.clone()
    if top_k:
        k = min(top_k, scores.shape[-1])
        kth = torch.topk(scores, k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum <= (1 - top_p)
        remove[-1] = False
        scores = scores.masked_fill(remove.scatter(0, sorted_idx, remove), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def penalize(logits, history: list[int], penalty: float):
    """HF's repetition penalty: logits of tokens seen so far divided (positive) or multiplied
    (negative) by ``penalty``."""
    if penalty == 1.0 or not history:
        return logits
    idx = torch.tensor(history, dtype=torch.long)
    score = logits.gather(0, idx)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(0, idx, score)


class TorchHost:
    """``loop.HostOps`` over ``talker`` (``Talker``: its text projection, embeddings, codec head
    and code predictor's projection, embeddings and heads).  Rows are ``[n, H]`` tensors, logits
    ``[V]`` float32 tensors."""

    name = "torch"
    #: the RoPE recipe of the stage graphs this host feeds (``runtime.tts.talker_backend``)
    rope = "torch"

    def __init__(self, talker):
        self.talker = talker
        self.cp = talker.code_predictor

    # -- embeddings and array ops ---------------------------------------------------------------
    def text(self, ids) -> torch.Tensor:
        return self.talker.text(torch.tensor([list(ids)], dtype=torch.long))[0]

    def codec(self, ids) -> torch.Tensor:
        return self.talker.codec(np.asarray(ids, dtype=np.int64).reshape(-1))[0]

    def cp_codec(self, j: int, ids) -> torch.Tensor:
        ids = torch.as_tensor(np.asarray(ids, dtype=np.int64).reshape(-1))
        return self.cp.model.codec_embedding[j - 1](ids)

    def array(self, x) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def row(self, vector) -> torch.Tensor:
        return vector.reshape(1, -1) if isinstance(vector, torch.Tensor) else self.array(vector).reshape(1, -1)

    def concat(self, parts) -> torch.Tensor:
        return torch.cat(list(parts), dim=0)

    def split(self, rows, n: int) -> list:
        return list(rows.chunk(n, dim=0))

    def repeat(self, row, n: int) -> torch.Tensor:
        return row.expand(n, -1)

    def sum_codebooks(self, parts) -> torch.Tensor:
        return torch.stack(list(parts), dim=1).sum(1)

    def numpy(self, x) -> np.ndarray:
        return x.detach().numpy()

    def inference(self):
        """``torch.no_grad()``: a code predictor's frame builds no autograd graph (one context a
        frame, not one a call: 33 calls a frame)."""
        return torch.no_grad()

    # -- heads, logit rules, sampling -----------------------------------------------------------
    def codec_logits(self, hidden: np.ndarray) -> torch.Tensor:
        return self.talker.codec_head(torch.from_numpy(hidden).view(1, 1, -1))[0, 0].float()

    def cp_project(self, x) -> np.ndarray:
        return self.cp.small_to_mtp_projection(x).detach().numpy()

    def cp_logits(self, j: int, hidden: np.ndarray) -> torch.Tensor:
        return self.cp.lm_head[j - 1](torch.from_numpy(hidden)).float().reshape(-1)

    def logits(self, x) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x, np.float32).reshape(-1))

    def penalize(self, logits, history: list[int], penalty: float) -> torch.Tensor:
        return penalize(logits, history, penalty)

    def ban(self, logits: torch.Tensor, ids) -> None:
        logits[torch.as_tensor(ids) if not isinstance(ids, int) else ids] = float("-inf")

    def rng(self, seed: int | None) -> torch.Generator:
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        return generator

    def choose(self, logits, sample: bool, temperature: float, top_k: int, top_p: float, rng) -> int:
        return choose_token(logits, sample, temperature, top_k, top_p, rng)


class TorchStack:
    """A decoder stack (``DecoderStack``: ``talker.model`` or ``code_predictor.model``) with a KV
    cache of ``capacity`` positions, as a graph stack: ``start(n)`` empties the cache,
    ``forward(x [t, H] numpy)`` appends ``t`` positions and returns the last one's hidden state
    ``[1, H]`` float32 numpy."""

    def __init__(self, stack, capacity: int):
        self.stack = stack
        self.cache = stack.new_cache(capacity)

    def start(self, capacity: int) -> None:
        self.cache.reset()

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(Run under ``TorchHost.inference``, as ``loop.predict_frame`` runs it.)"""
        return self.stack(torch.from_numpy(np.ascontiguousarray(x, np.float32)).unsqueeze(0),
                          self.cache)[0, -1:].numpy()
