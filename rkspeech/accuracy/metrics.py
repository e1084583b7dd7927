"""Per-tensor figures of the accuracy map: SNR and cosine against fp32, and fp16's headroom.

Figures from ``core.compare``, written as its ``json_number`` writes them: an SNR that is not
finite is null, with ``identical`` (the test equals the reference) or ``nonfinite`` (the test
holds inf / NaN values: fp16 overflow) saying why.
"""

from __future__ import annotations

import math

import numpy as np

from rkspeech.accuracy.fp16_model import FP16_MAX
from rkspeech.core.compare import cosine, json_number, snr_db

#: The smallest normal fp16 value: below it fp16 keeps fewer than 11 significant bits.
FP16_MIN_NORMAL = 2.0 ** -14


def compare(reference, test) -> dict:
    """SNR (dB) and cosine of ``test`` against ``reference`` over every value."""
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    tst = np.asarray(test, dtype=np.float64).reshape(-1)
    bad = int(ref.size - np.isfinite(tst).sum())
    if bad:
        return {"snr_db": None, "cosine": None, "nonfinite": bad}
    snr = snr_db(ref, tst)
    out = {"snr_db": json_number(snr), "cosine": json_number(cosine(ref, tst), 6)}
    if snr == math.inf:
        out["identical"] = True
    return out


def activation(a) -> dict:
    """Largest |value|, its headroom to fp16's largest finite value (dB; negative: overflow) and
    the fraction of non-zero values below fp16's smallest normal (where it loses precision)."""
    x = np.abs(np.asarray(a, dtype=np.float32).reshape(-1))
    if x.size == 0:
        return {"max_abs": 0.0, "headroom_db": None, "subnormal_fraction": 0.0}
    peak = float(x.max())
    nz = int(np.count_nonzero(x))
    sub = int(np.count_nonzero((x > 0) & (x < FP16_MIN_NORMAL)))
    return {"max_abs": float(f"{peak:.6g}"),
            "headroom_db": json_number(20 * math.log10(FP16_MAX / peak)) if peak > 0 else None,
            "subnormal_fraction": round(sub / nz, 6) if nz else 0.0}


def snr_of(entry: dict | None, missing=None):
    """A map entry's ``snr_db`` (``compare``'s dict; ``missing`` where there is no entry or no
    finite figure: identical, overflow, not run)."""
    v = (entry or {}).get("snr_db")
    return missing if v is None else v
