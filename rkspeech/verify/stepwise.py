"""Checks that can fail: the step graph, stepped, against a full decode over the whole signal.

Each check decodes the same random codes twice: once with the full (non-streaming) decoder,
once through a ``StreamingVocoder`` over a runner (torch step, onnxruntime, simulator).  The
schedule starts with a different B when a ``first`` graph is given and always ends on a
partial step, so the cache hand-over, the position bookkeeping and the end padding are all
exercised.  Pass mark for float32 paths: ``thresholds.FP32_MIN_SNR_DB``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.streaming import Engine, StreamingVocoder
from rkspeech.core.compare import segment_snr_db, snr_db


def check_tokens(main_B: int, first_B: int | None) -> int:
    """Tokens for a check: the first step, two main steps, and a partial main step."""
    return (first_B or 0) + 2 * main_B + main_B // 2 + 1


def random_codes(tokens: int, num_quantizers: int, codebook_size: int, seed: int = 0) -> np.ndarray:
    """``[T, Q]`` int64 codes, uniform over the codebooks."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, codebook_size, size=(tokens, num_quantizers), dtype=np.int64)


def full_decode(model, codes_tq: np.ndarray) -> np.ndarray:
    """The non-streaming decode of our torch model, as a flat float32 array."""
    import torch

    with torch.no_grad():
        audio = model(torch.from_numpy(np.ascontiguousarray(codes_tq.T[None])))
    return audio.numpy().reshape(-1)


@dataclass
class StepwiseResult:
    snr_db: float
    per_step_snr_db: list[float]
    samples: int

    def passed(self, threshold: float) -> bool:
        return self.snr_db >= threshold


def stepwise_check(reference: np.ndarray, codes_tq: np.ndarray, main: Engine,
                   first: Engine | None = None) -> StepwiseResult:
    """Decode ``codes_tq`` stepwise and compare every sample with ``reference``."""
    audio = StreamingVocoder(main, first).decode(codes_tq)
    if audio.size != reference.size:
        raise RkspeechError(f"stepwise decode gave {audio.size} samples, the full decode {reference.size}")
    seg = main.contract.samples_per_step
    return StepwiseResult(snr_db(reference, audio), segment_snr_db(reference, audio, seg), int(audio.size))


def require(result: StepwiseResult, threshold: float, what: str) -> None:
    if not result.passed(threshold):
        worst = min(range(len(result.per_step_snr_db)), key=lambda i: result.per_step_snr_db[i])
        raise RkspeechError(
            f"{what}: stepwise decode is {result.snr_db:.1f} dB against the full decode, needs >= "
            f"{threshold:.0f} dB (worst main-B segment #{worst}: {result.per_step_snr_db[worst]:.1f} dB); "
            "the step graph does not reproduce the model"
        )
