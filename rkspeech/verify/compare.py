"""Comparators: SNR over the whole signal and per-frame cosine (numpy only).

The seed project's onnxruntime self-check compared only the first B samples (a reused loop
variable); ``snr_db`` refuses arrays of different lengths instead of truncating silently.
"""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError


def snr_db(reference, test) -> float:
    """10*log10(sum(ref^2) / sum((ref-test)^2)) over every sample; inf when identical."""
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    tst = np.asarray(test, dtype=np.float64).reshape(-1)
    if ref.shape != tst.shape:
        raise RkspeechError(f"cannot compare signals of {ref.size} and {tst.size} samples")
    noise = float(np.sum((ref - tst) ** 2))
    power = float(np.sum(ref**2))
    if noise == 0.0:
        return float("inf")
    if power == 0.0:
        return float("-inf")
    return 10.0 * np.log10(power / noise)


def segment_snr_db(reference, test, segment: int) -> list[float]:
    """SNR of consecutive segments (e.g. one per step) to locate where a stream goes wrong."""
    ref = np.asarray(reference).reshape(-1)
    tst = np.asarray(test).reshape(-1)
    return [snr_db(ref[i:i + segment], tst[i:i + segment]) for i in range(0, ref.size, segment)]


def cosine_per_row(a, b) -> np.ndarray:
    """Cosine similarity of matching rows (e.g. encoder frames) of two [..., D] arrays."""
    x = np.asarray(a, dtype=np.float64).reshape(-1, np.shape(a)[-1])
    y = np.asarray(b, dtype=np.float64).reshape(-1, np.shape(b)[-1])
    if x.shape != y.shape:
        raise RkspeechError(f"cannot compare arrays of shapes {list(np.shape(a))} and {list(np.shape(b))}")
    num = np.sum(x * y, axis=1)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return num / np.maximum(den, 1e-30)


def cosine(a, b) -> float:
    """Cosine similarity of two whole arrays, flattened."""
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise RkspeechError(f"cannot compare arrays of {x.size} and {y.size} values")
    den = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(np.dot(x, y) / max(den, 1e-30))


def compare_tensors(reference, test) -> dict:
    """Report numbers for one tensor comparison: whole cosine, worst row (frame) cosine, SNR, max |diff|."""
    rows = cosine_per_row(reference, test)
    diff = np.abs(np.asarray(reference, dtype=np.float64) - np.asarray(test, dtype=np.float64))
    return {
        "cosine": cosine(reference, test),
        "cosine_min_frame": float(rows.min()),
        "cosine_mean_frame": float(rows.mean()),
        "snr_db": snr_db(reference, test),
        "max_abs_diff": float(diff.max()),
    }
