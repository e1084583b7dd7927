"""The generation loop's host backend in numpy (``loop.HostOps``): the product's and the board's.

:class:`NumpyHost` runs the host's share of generation (text projection, embedding lookups, the
codec head, the code predictor's input projection and heads, the logit rules' arithmetic and
sampling) in float32 numpy over ``runtime.tts.host_weights.HostWeights`` (any object with its
attributes).  Nothing here imports torch.

Bit for bit it differs from the torch backend where numpy and torch round differently: matrix
products (BLAS summation order: 50-90 % of a projection's outputs differ in the last bits) and
softmax; greedy codes agree (``tests/runtime/test_numpy_loop.py``; docs/numpy-runtime.md has the
measured effect).

Sampling (:func:`choose_token`) applies qwen-tts' controls in the torch sampler's order
(temperature, top-k, top-p; the repetition penalty before, in :func:`penalize`) and draws from a
``numpy.random.Generator`` (PCG64, seeded by ``GenerationOptions.seed``).  torch.multinomial's
stream cannot be reproduced from numpy, so sampled codes for a seed differ from the torch
backend's; their distribution is the same (a statistical test compares the two samplers).
"""

from __future__ import annotations

import contextlib

import numpy as np

NEG_INF = np.float32(-np.inf)


# -- numerics (float32, in the torch code's order) ----------------------------------------------
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = np.matmul(x, w.T)
    return y + b if b is not None else y


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def penalize(logits: np.ndarray, history: list[int], penalty: float) -> np.ndarray:
    """``torch_host.penalize`` in numpy: logits of tokens seen so far divided (positive) or
    multiplied (negative) by ``penalty``."""
    if penalty == 1.0 or not history:
        return logits
    idx = np.asarray(history, dtype=np.int64)
    score = logits[idx]
    out = logits.copy()
    out[idx] = np.where(score < 0, score * np.float32(penalty), score / np.float32(penalty))
    return out


def warped_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The distribution ``choose_token`` samples from: HF's temperature, top-k, top-p warpers
    (``torch_host.choose_token``'s order), then softmax; float32 ``[V]``."""
    scores = logits / np.float32(temperature) if temperature != 1.0 else logits.copy()
    if top_k:
        k = min(top_k, scores.shape[-1])
        kth = np.partition(scores, scores.shape[-1] - k)[scores.shape[-1] - k]
        scores = np.where(scores < kth, NEG_INF, scores)
    if top_p < 1.0:
        order = np.argsort(scores, kind="stable")
        cum = np.cumsum(softmax(scores[order]))
        remove = cum <= (1 - top_p)
        remove[-1] = False
        drop = np.zeros_like(remove)
        drop[order] = remove
        scores = np.where(drop, NEG_INF, scores)
    return softmax(scores)


def choose_token(logits: np.ndarray, sample: bool, temperature: float, top_k: int, top_p: float,
                 rng: np.random.Generator) -> int:
    """Argmax, or one draw from ``warped_probs`` by inverse CDF (one ``rng.random()`` a draw)."""
    if not sample:
        return int(np.argmax(logits))
    probs = warped_probs(logits, temperature, top_k, top_p).astype(np.float64)
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))


class NumpyHost:
    """``loop.HostOps`` over numpy weights ``w`` (``HostWeights``) of the model whose ``TTSConfig``
    is ``cfg``.  Rows are ``[n, H]`` float32 arrays, logits ``[V]``."""

    name = "numpy"
    #: the RoPE recipe of the stage graphs this host feeds (``runtime.tts.talker_backend``)
    rope = "numpy"

    def __init__(self, weights, cfg):
        self.w, self.cfg = weights, cfg

    # -- embeddings and array ops ---------------------------------------------------------------
    def text(self, ids) -> np.ndarray:
        w = self.w
        x = w.text_embedding.rows(ids)
        return linear(silu(linear(x, w.fc1_w, w.fc1_b)), w.fc2_w, w.fc2_b)

    def codec(self, ids) -> np.ndarray:
        return self.w.codec_embedding[np.asarray(ids, dtype=np.int64).reshape(-1)]

    def cp_codec(self, j: int, ids) -> np.ndarray:
        return self.w.cp_embedding[j - 1][np.asarray(ids, dtype=np.int64).reshape(-1)]

    def array(self, x) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)

    def row(self, vector) -> np.ndarray:
        return np.asarray(vector, np.float32).reshape(1, -1)

    def concat(self, parts) -> np.ndarray:
        return np.concatenate(parts)

    def split(self, rows, n: int) -> list:
        return np.split(rows, n)

    def repeat(self, row, n: int) -> np.ndarray:
        return np.repeat(row, n, axis=0)

    def sum_codebooks(self, parts) -> np.ndarray:
        return np.stack(parts, axis=1).sum(1)

    def numpy(self, x) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)

    def inference(self):
        return contextlib.nullcontext()

    # -- heads, logit rules, sampling -----------------------------------------------------------
    def codec_logits(self, hidden: np.ndarray) -> np.ndarray:
        return linear(hidden, self.w.codec_head)

    def cp_project(self, x) -> np.ndarray:
        return x if self.w.cp_proj_w is None else linear(x, self.w.cp_proj_w, self.w.cp_proj_b)

    def cp_logits(self, j: int, hidden: np.ndarray) -> np.ndarray:
        return linear(hidden, self.w.cp_head[j - 1])

    def logits(self, x) -> np.ndarray:
        return np.asarray(x, np.float32)

    def penalize(self, logits, history: list[int], penalty: float) -> np.ndarray:
        return penalize(np.asarray(logits, np.float32), history, penalty)

    def ban(self, logits: np.ndarray, ids) -> None:
        logits[ids] = NEG_INF

    def rng(self, seed: int | None) -> np.random.Generator:
        return np.random.default_rng(seed)

    def choose(self, logits, sample: bool, temperature: float, top_k: int, top_p: float, rng) -> int:
        return choose_token(logits, sample, temperature, top_k, top_p, rng)
