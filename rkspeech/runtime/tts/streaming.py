"""StreamingVocoder: push codec tokens in any amounts, get 24 kHz PCM as soon as a step is ready.

The engine is any *runner* (``infer(feed) -> outputs``): onnxruntime, the rknn-toolkit2
simulator, rknn-toolkit-lite2 on a board, or the torch step for checks.  The host computes
``freqs_in`` and ``cache_valid`` (``rkspeech.stepgraph.host``) and threads the one flat cache
from step to step.  An optional small-B ``first`` graph shortens the time to first audio;
its cache feeds the ``main`` graph (N does not depend on B).  ``flush()`` pads the last
partial step with code 0 and trims exactly the padding: the graph is causal, so the padded
tokens cannot change the samples before them.

``eager``: with a ``first`` graph, fewer tokens pending than the main B run in small steps as
soon as a small step's worth is there, instead of waiting for a main step's worth; a push of a
main step's worth or more still takes main steps.  ``Speaker`` pushes frame by frame, so every
step after the first is small and the utterance ends one small step after its last frame, not
one main step after it (16 frames vocoded after generation ended at B=16).  The steps share one
cache and the graph is causal: the samples are those of any other cut, to float rounding.

Each instance owns its cache and position: streams never share state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.vocoder import VocoderContract
from rkspeech.stepgraph.host import cache_valid, inverse_frequencies, rope_angles
from rkspeech.runtime.tts.codes import normalize_codes


@dataclass
class StepTiming:
    """Per-step wall time and the part of it spent inside the engine call."""

    tokens: int
    total_s: float
    engine_s: float

    @property
    def host_s(self) -> float:
        return self.total_s - self.engine_s


@dataclass
class Engine:
    """A runner with the contract of the graph it runs."""

    runner: object
    contract: VocoderContract

    @property
    def B(self) -> int:
        return self.contract.codes_length


class StreamingVocoder:
    def __init__(self, main: Engine, first: Engine | None = None, *, eager: bool = False):
        if first is not None and not main.contract.compatible_cache(first.contract):
            raise RkspeechError(
                f"first (B={first.B}, N={first.contract.cache_numel}) and main (B={main.B}, "
                f"N={main.contract.cache_numel}) graphs do not share one cache layout"
            )
        self.main, self.first = main, first
        self.eager = eager and first is not None
        c = main.contract
        self.contract = c
        self._inv_freq = inverse_frequencies(c.head_dim, c.rope_theta)
        self.timings: list[StepTiming] = []
        self.reset()

    # ---- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        self._cache = np.zeros(self.contract.cache_numel, dtype=np.float32)
        self._position = 0  # tokens already decoded
        self._pending = np.zeros((0, self.contract.num_quantizers), dtype=np.int64)
        self._finished = False
        self._padded = False
        self.timings = []

    @property
    def position(self) -> int:
        return self._position

    def _next_engine(self) -> Engine:
        if self._position == 0 and self.first is not None:
            return self.first
        if self.eager and self._pending.shape[0] < self.main.B:
            return self.first
        return self.main

    # ---- one step ------------------------------------------------------------------------
    def _run_step(self, engine: Engine, codes_tq: np.ndarray) -> np.ndarray:
        """Run ``len(codes_tq) <= B`` tokens through one step; returns their PCM."""
        B, L = engine.B, codes_tq.shape[0]
        start = time.perf_counter()
        if L < B:
            codes_tq = np.concatenate([codes_tq, np.zeros((B - L, codes_tq.shape[1]), dtype=np.int64)])
        feed = {
            "audio_codes": np.ascontiguousarray(codes_tq.T[None]),
            "freqs_in": rope_angles(self._position, B, self._inv_freq),
            "cache_valid": cache_valid(self._position, self.contract.kv_slots),
            "cache_in": self._cache,
        }
        t0 = time.perf_counter()
        out = engine.runner.infer(feed)
        engine_s = time.perf_counter() - t0
        audio = np.asarray(out["audio_values"], dtype=np.float32).reshape(-1)
        cache = np.asarray(out["cache_out"], dtype=np.float32).reshape(-1)
        if audio.size != engine.contract.samples_per_step or cache.size != self.contract.cache_numel:
            raise RkspeechError(
                f"engine returned {audio.size} samples and a cache of {cache.size}; the contract says "
                f"{engine.contract.samples_per_step} and {self.contract.cache_numel}"
            )
        self._cache = cache
        self._position += L
        pcm = audio[: L * self.contract.samples_per_token]
        self.timings.append(StepTiming(L, time.perf_counter() - start, engine_s))
        return pcm

    # ---- streaming API -------------------------------------------------------------------
    def push(self, codes) -> np.ndarray:
        """Add tokens (``[T, Q]`` or ``[Q, T]``); return the PCM of every step now complete.

        Trailing ``-1`` rows are end padding (as in the official decode): they are dropped, and
        the stream then accepts only ``flush()`` (further tokens raise instead of being appended
        after what the caller marked as the end)."""
        if self._finished:
            raise RkspeechError("stream already flushed; call reset() to start a new one")
        c = self.contract
        new = normalize_codes(codes, c.num_quantizers, c.codebook_size)
        if self._padded and new.shape[0]:
            raise RkspeechError("tokens pushed after -1 end padding: -1 marks the end of the stream; "
                                "call flush() (or reset() for a new stream)")
        if np.asarray(codes).size // c.num_quantizers > new.shape[0]:
            self._padded = True  # this push ended with -1 padding: only flush() may follow
        self._pending = np.concatenate([self._pending, new]) if self._pending.size else new
        out = []
        while True:
            engine = self._next_engine()
            if self._pending.shape[0] < engine.B:
                break
            out.append(self._run_step(engine, self._pending[: engine.B]))
            self._pending = self._pending[engine.B:]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def flush(self) -> np.ndarray:
        """Decode what is left (padding the last step) and end the stream."""
        out = []
        while self._pending.shape[0]:
            engine = self._next_engine()
            take = self._pending[: engine.B]
            out.append(self._run_step(engine, take))
            self._pending = self._pending[take.shape[0]:]
        self._finished = True
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def decode(self, codes) -> np.ndarray:
        """A whole stream in one call: ``reset``, ``push``, ``flush``."""
        self.reset()
        head = self.push(codes)
        return np.concatenate([head, self.flush()])
