"""Comparison: how far a test array is from its reference, written once (numpy only).

Every SNR, cosine and max-abs figure of verify, the accuracy map and gate, check-board, the
builds' checks and the benchmarks comes from here, with one answer for "identical":

* :func:`snr_db` (and :func:`snr_db_of_energy`, from energies summed over several arrays)
  returns ``math.inf`` when the test equals the reference (also two all-zero signals) and
  ``-math.inf`` when the reference is all zeros and the test is not; never None.  Before
  (2026-12) four formulas gave ``inf``, ``math.inf`` or ``None`` for the same identical input,
  and two of them raised ``ValueError`` on a zero reference.
* In a JSON report an SNR is written through :func:`json_number`: rounded (2 decimals), and a
  figure that is not finite is ``null``.  JSON has no infinity: Python's ``json`` writes the
  non-standard ``Infinity``, which jq and JavaScript's ``JSON.parse`` refuse.  So in a report,
  ``null`` for a figure that was measured means identical (the gate, the code predictor's and the
  talker's checks, check-board); the accuracy map says which (``identical`` or ``nonfinite``)
  beside it.  Reports written before hold ``Infinity`` in some places (check-board, the talker's
  check, the Whisper encoder's checks): Python reads that back as ``inf``, and
  :func:`db_value` / :func:`db_text` take ``None``, ``inf`` and numbers alike.

Arrays of different sizes are refused (``RkspeechError``), never truncated: the seed project's
onnxruntime self-check compared only the first B samples (a reused loop variable).
"""

from __future__ import annotations

import math

import numpy as np

from rkspeech.core.errors import RkspeechError


def _flat_pair(reference, test, what: str = "signals") -> tuple[np.ndarray, np.ndarray]:
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    tst = np.asarray(test, dtype=np.float64).reshape(-1)
    if ref.shape != tst.shape:
        raise RkspeechError(f"cannot compare {what} of {ref.size} and {tst.size} values")
    return ref, tst


def snr_db_of_energy(signal: float, noise: float) -> float:
    """``10 log10(signal / noise)`` from energies (sums of squares) already summed, e.g. over the
    frames of several runs: ``math.inf`` when ``noise`` is 0 (identical), ``-math.inf`` when only
    ``signal`` is 0.  ``np.log10``, not ``math.log10``: they differ in the last bit for ~6 % of
    values (measured, numpy 1.26), and verify's figures were always numpy's."""
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return float(10.0 * np.log10(signal / noise))


def snr_db(reference, test) -> float:
    """10*log10(sum(ref^2) / sum((ref-test)^2)) over every value (flattened, float64);
    ``math.inf`` when identical."""
    ref, tst = _flat_pair(reference, test)
    return snr_db_of_energy(float(np.sum(ref**2)), float(np.sum((ref - tst) ** 2)))


def energies(reference, test) -> tuple[float, float]:
    """``(sum(ref^2), sum((test-ref)^2))`` in float64, to pool several comparisons into one
    :func:`snr_db_of_energy`."""
    ref, tst = _flat_pair(reference, test)
    return float(np.sum(ref**2)), float(np.sum((tst - ref) ** 2))


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
    """Cosine similarity of two whole arrays, flattened (0 where either is all zeros)."""
    x, y = _flat_pair(a, b, "arrays")
    den = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(np.dot(x, y) / max(den, 1e-30))


def max_abs_diff(reference, test) -> float:
    """The largest ``|reference - test|`` (0.0 for empty arrays)."""
    ref, tst = _flat_pair(reference, test, "arrays")
    return float(np.abs(ref - tst).max()) if ref.size else 0.0


def compare_tensors(reference, test) -> dict:
    """Report numbers for one tensor comparison: whole cosine, worst row (frame) cosine, SNR, max |diff|
    (in memory: an identical SNR is ``math.inf``; write it through :func:`json_number`)."""
    rows = cosine_per_row(reference, test)
    return {
        "cosine": cosine(reference, test),
        "cosine_min_frame": float(rows.min()),
        "cosine_mean_frame": float(rows.mean()),
        "snr_db": snr_db(reference, test),
        "max_abs_diff": max_abs_diff(reference, test),
    }


def top1_rows(reference, test, tie: float) -> dict:
    """Top-1 agreement of two logit tensors row by row (the last axis is the vocabulary):
    ``rows``, ``agreement`` (share of rows whose argmax is the reference's), and ``decided_flips``:
    rows whose argmax differs although the reference's top-1 margin (top-1 minus top-2) is at least
    ``tie`` times the row's rms (a near-tie may flip under any rounding; a decided row may not);
    ``worst_margin``: the largest such margin, in units of the row's rms (None without a flip)."""
    ref = np.asarray(reference, dtype=np.float32)
    out = np.asarray(test, dtype=np.float32).reshape(ref.shape)
    ref, out = ref.reshape(-1, ref.shape[-1]), out.reshape(-1, ref.shape[-1])
    top = np.sort(ref, axis=-1)
    rms = np.sqrt(np.mean(ref.astype(np.float64) ** 2, axis=-1)) + 1e-30
    margin = (top[:, -1] - top[:, -2]) / rms if ref.shape[-1] > 1 else np.full(len(ref), np.inf)
    flip = ref.argmax(-1) != out.argmax(-1)
    decided = flip & (margin >= tie)
    return {"rows": int(len(ref)), "agreement": float(1.0 - flip.mean()) if len(ref) else 1.0,
            "decided_flips": int(decided.sum()),
            "worst_margin": round(float(margin[flip].max()), 4) if flip.any() else None}


def json_number(x, digits: int | None = 2):
    """``x`` as a report writes it: rounded to ``digits`` (None: as it is); None (JSON ``null``)
    when it is None or ``math.inf`` (for an SNR: identical); NaN and ``-inf`` as the strings
    ``"NaN"`` / ``"-Infinity"`` (JSON has no such numbers, and a NaN output must never read as
    identical: an fp16 overflow's SNR is NaN)."""
    if x is None or x == math.inf:
        return None
    if math.isnan(x):
        return "NaN"
    if x == -math.inf:
        return "-Infinity"
    return float(x) if digits is None else round(float(x), digits)


def report_tensors(reference, test) -> dict:
    """:func:`compare_tensors`' figures as a report writes them: unrounded, the SNR through
    :func:`json_number` (null: identical)."""
    c = compare_tensors(reference, test)
    return {**c, "snr_db": json_number(c["snr_db"], None)}


def db_value(v) -> float:
    """A report's measured SNR back as a float: ``None`` (identical, :func:`json_number`) and an
    older report's ``Infinity`` are ``math.inf``; ``"NaN"`` is NaN."""
    return math.inf if v is None else float(v)


def db_text(v, digits: int = 1) -> str:
    """A measured SNR (in memory, or from a report: ``None`` is identical) for people: the number
    to ``digits``, or ``identical``."""
    x = db_value(v)
    if math.isnan(x):
        return "NaN"
    return "identical" if x == math.inf else f"{x:.{digits}f}"
