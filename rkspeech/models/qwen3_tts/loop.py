"""Text to codec frames, written once: the talker's logit rules, sampling, the frame loop and the
code predictor's frame, over a host backend.

The shape is openai/whisper's ``DecodingTask._main_loop`` over ``Inference`` / ``LogitFilter`` /
``TokenDecoder``: :func:`run_frames` is the one frame loop; the decoder stacks are the stage
backends (``backends.TalkerBackend`` / ``CodePredictorBackend``: torch modules or graphs); the
talker's logit rules are :class:`TalkerLogitRules`; the choices (argmax or a draw, and the code
predictor's own penalty history) are :class:`FrameSampler`; :func:`predict_frame` is the one
frame of a code predictor whose host runs the heads (the torch reference and the step graphs).
All the arithmetic goes through a :class:`HostOps`: ``numpy_host.NumpyHost`` (``speak``, the
board; torch-free) or ``torch_host.TorchHost`` (the reference that matches qwen-tts, training).

What the loop does (qwen-tts 0.1.1 ``Qwen3TTSForConditionalGeneration.generate`` and the HF
``generate`` it drives, for one sequence):

* talker logits: repetition penalty over the codebook-0 tokens generated so far, the top 1024 ids
  except ``codec_eos`` suppressed, ``codec_eos`` banned for the first 2 frames
  (``min_new_tokens``); sampling applies temperature, top-k, top-p in that order.
* ``codec_eos`` ends generation; so does the last of ``steps`` talker steps, where, as in
  qwen-tts, the token sampled at the last step gets no frame (its code predictor would run in the
  next step).
* code predictor: positions 0-1 are the talker's last hidden state and codebook 0's embedding;
  ``lm_head[j-1]`` gives codebook j; no suppression (qwen-tts passes none), its own repetition
  penalty (1.0 in qwen-tts) over the frame's codes so far.
* the next talker input: the frame's 16 codebook embeddings summed, plus the frame's text part.

Nothing here imports torch (the board runs this module).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

#: ``codec_eos`` is banned for this many frames (qwen-tts' ``min_new_tokens``)
MIN_NEW_TOKENS = 2
#: the talker's top ids suppressed (all but ``codec_eos``): control tokens, never a frame's code
SUPPRESSED_TAIL = 1024


class HostOps(Protocol):
    """The host's arithmetic in one array library.  ``Rows``: ``[n, H]`` arrays of that library;
    ``Logits``: ``[V]`` float32; hidden states cross to and from the stage backends as numpy."""

    name: str
    rope: str  # the RoPE recipe of graph stages this host feeds (``runtime.tts.talker_backend``)

    # embeddings and array ops (prompt assembly, the next talker input)
    def text(self, ids) -> Any: ...  # projected text embeddings
    def codec(self, ids) -> Any: ...  # the talker's codec embeddings
    def cp_codec(self, j: int, ids) -> Any: ...  # the code predictor's ``codec_embedding[j-1]``
    def array(self, x: np.ndarray) -> Any: ...
    def row(self, vector) -> Any: ...  # a vector as ``[1, H]``
    def concat(self, parts) -> Any: ...
    def split(self, rows, n: int) -> list: ...
    def repeat(self, row, n: int) -> Any: ...
    def sum_codebooks(self, parts) -> Any: ...  # parts ``[n, H]`` each, summed as qwen-tts sums them
    def numpy(self, x) -> np.ndarray: ...
    def inference(self): ...  # a context for a code predictor's frame (torch: no autograd graph)

    # heads, logit rules, sampling
    def codec_logits(self, hidden: np.ndarray) -> Any: ...
    def cp_project(self, rows) -> np.ndarray: ...  # ``small_to_mtp_projection``
    def cp_logits(self, j: int, hidden: np.ndarray) -> Any: ...  # ``lm_head[j-1]``
    def logits(self, x: np.ndarray) -> Any: ...  # a head graph's output as this host's logits
    def penalize(self, logits, history: list[int], penalty: float) -> Any: ...
    def ban(self, logits, ids) -> None: ...  # in place: -inf
    def rng(self, seed: int | None) -> Any: ...
    def choose(self, logits, sample: bool, temperature: float, top_k: int, top_p: float, rng) -> int: ...


@dataclass(frozen=True)
class TalkerLogitRules:
    """The talker's logit rules (whisper's ``LogitFilter``s): the repetition penalty, ``codec_eos``
    banned for the first ``MIN_NEW_TOKENS`` frames, the tail suppressed.  Shared by the loop and
    the accuracy gate's teacher-forced talker decisions."""

    eos: int
    suppress: np.ndarray  # int64 ids
    penalty: float

    @classmethod
    def of(cls, talker_cfg, penalty: float) -> TalkerLogitRules:
        """The rules of a ``TalkerConfig`` (``vocab_size``, ``codec_eos_token_id``)."""
        v, eos = talker_cfg.vocab_size, talker_cfg.codec_eos_token_id
        return cls(eos, np.array([i for i in range(v - SUPPRESSED_TAIL, v) if i != eos], dtype=np.int64), penalty)

    def apply(self, ops: HostOps, logits, history: list[int], step: int):
        """``logits`` of frame ``step`` after ``history`` (codebook-0 tokens so far), ruled."""
        logits = ops.penalize(logits, history, self.penalty)
        if step < MIN_NEW_TOKENS:
            ops.ban(logits, self.eos)
        ops.ban(logits, self.suppress)
        return logits


def decision_margin(logits: np.ndarray) -> float:
    """How far a greedy pick is from its runner-up: the top-two gap of ``logits`` (finite values)
    over their rms.  In the unit an SNR speaks of: a logit error of SNR ``s`` dB is
    ``10 ** (-s / 20)`` of the rms, so a margin within a few of those is a near-tie another
    machine's arithmetic may flip (``board.compare``)."""
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("inf")
    top = np.partition(x, x.size - 2)[-2:]
    rms = float(np.sqrt(np.mean(x * x)))
    return float(top[1] - top[0]) / rms if rms > 0 else float("inf")


class FrameSampler:
    """One utterance's choices (whisper's ``TokenDecoder``): the talker's token and, as the
    code predictor's ``choose(j, logits)``, each codebook (its penalty history restarts at j = 1).
    One random stream for both, seeded by ``opts.seed``.  ``margins``: one row per talker step,
    each greedy decision's ``decision_margin`` (codebook 0, then each codebook this sampler
    chose; NaN for a sampled one).  Always kept: ~15 us a decision on x86, 16 a frame, 0.3 % of a
    frame's 80 ms at real time."""

    def __init__(self, ops: HostOps, opts):
        self.ops, self.opts = ops, opts
        self.rng = ops.rng(opts.seed)
        self.codebook_history: list[int] = []
        self.margins: list[list[float]] = []

    def _margin(self, logits, sampled: bool) -> float:
        return float("nan") if sampled else decision_margin(self.ops.numpy(logits))

    def token(self, logits) -> int:
        o = self.opts
        self.margins.append([self._margin(logits, o.do_sample)])
        return self.ops.choose(logits, o.do_sample, o.temperature, o.top_k, o.top_p, self.rng)

    def codebook(self, j: int, logits) -> int:
        o, ops = self.opts, self.ops
        if j == 1:
            self.codebook_history.clear()
        logits = ops.penalize(logits, self.codebook_history, o.subtalker_repetition_penalty)
        if self.margins:
            self.margins[-1].append(self._margin(logits, o.subtalker_dosample))
        code = ops.choose(logits, o.subtalker_dosample, o.subtalker_temperature, o.subtalker_top_k,
                          o.subtalker_top_p, self.rng)
        self.codebook_history.append(code)
        return code


def predict_frame(stack, ops: HostOps, groups: int, hidden: np.ndarray, first_embed: np.ndarray, choose,
                  heads=None) -> list[int]:
    """Codebooks 1..``groups``-1 of one frame, the heads on the host: ``stack`` (``start`` /
    ``forward`` over numpy: a step graph or ``torch_host.TorchStack``) gets the projected talker
    hidden state and codebook 0's embedding, then each chosen code's embedding; ``heads``: head
    graphs (``runtime.tts.heads.HeadGraphs``) in place of ``ops.cp_logits``; ``choose(j, logits)``
    picks codebook j."""
    x = ops.array(np.stack([np.asarray(hidden, np.float32).reshape(-1),
                            np.asarray(first_embed, np.float32).reshape(-1)]))
    codes: list[int] = []
    with ops.inference():
        stack.start(groups)
        h = stack.forward(ops.cp_project(x))
        for j in range(1, groups):
            logits = ops.logits(heads.logits(j, h)) if heads is not None else ops.cp_logits(j, h)
            code = int(choose(j, logits))
            codes.append(code)
            if j < groups - 1:
                h = stack.forward(ops.cp_project(ops.cp_codec(j, [code])))
    return codes


def new_timing() -> dict:
    """``last_timing`` of a generation: seconds and calls of the two stages."""
    return {"talker_s": 0.0, "talker_calls": 0, "code_predictor_s": 0.0, "code_predictor_calls": 0}


def run_frames(ops: HostOps, talker, predictor, rules: TalkerLogitRules, sampler: FrameSampler,
               prompt, trailing, pad, steps: int, timing: dict) -> Generator[np.ndarray, None, tuple[int, bool]]:
    """The frame loop: yield frames ``int64 [G]`` (codebook 0 from the talker, 1..G-1 from
    ``predictor``) for ``prompt [L, Ht]``, feeding ``trailing [n, Ht]`` one row a frame, then
    ``pad [1, Ht]``; at most ``steps`` talker steps.  ``timing`` (``new_timing()``) is filled as
    the frames go.  Returns ``(frames, ended by codec_eos)`` when it ends by itself (``yield
    from``'s value: ``HostModel`` says when the positions ran out)."""
    clock = time.perf_counter

    def talk(x) -> np.ndarray:
        t0 = clock()
        out = np.asarray(talker.forward(ops.numpy(x)), np.float32).reshape(-1)
        timing["talker_s"] += clock() - t0
        timing["talker_calls"] += 1
        return out

    history: list[int] = []
    talker.start(prompt.shape[0] + steps)
    hidden = talk(prompt)
    for step in range(steps):
        token = sampler.token(rules.apply(ops, ops.codec_logits(hidden), history, step))
        if token == rules.eos or step == steps - 1:
            return step, token == rules.eos
        history.append(token)
        first = ops.codec([token])
        t0 = clock()
        codes = predictor.frame(hidden, ops.numpy(first)[0], sampler.codebook)
        timing["code_predictor_s"] += clock() - t0
        timing["code_predictor_calls"] += 1
        yield np.asarray([token, *codes], dtype=np.int64)
        embeds = [first] + [ops.cp_codec(j, [c]) for j, c in enumerate(codes, start=1)]
        text_in = trailing[step:step + 1] if step < trailing.shape[0] else pad
        hidden = talk(ops.sum_codebooks(embeds) + text_in)
    return steps, False  # no step at all (steps < 1)
