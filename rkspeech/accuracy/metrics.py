"""Per-tensor figures of the accuracy map: SNR and cosine against fp32, and fp16's headroom.

JSON has no infinity: an SNR that is not finite is written as null, with ``identical`` (the
test equals the reference) or ``nonfinite`` (the test holds inf / NaN values: fp16 overflow)
saying why.
"""

from __future__ import annotations

import math

import numpy as np

from rkspeech.accuracy.fp16_model import FP16_MAX

#: The smallest normal fp16 value: below it fp16 keeps fewer than 11 significant bits.
FP16_MIN_NORMAL = 2.0 ** -14


def num(x, digits: int = 2):
    """``x`` rounded for JSON, None when not finite."""
    return round(float(x), digits) if x is not None and math.isfinite(x) else None


def compare(reference, test) -> dict:
    """SNR (dB) and cosine of ``test`` against ``reference`` over every value."""
    from rkspeech.verify.compare import cosine, snr_db

    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    tst = np.asarray(test, dtype=np.float64).reshape(-1)
    bad = int(ref.size - np.isfinite(tst).sum())
    if bad:
        return {"snr_db": None, "cosine": None, "nonfinite": bad}
    snr = snr_db(ref, tst)
    out = {"snr_db": num(snr), "cosine": num(cosine(ref, tst), 6)}
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
            "headroom_db": num(20 * math.log10(FP16_MAX / peak)) if peak > 0 else None,
            "subnormal_fraction": round(sub / nz, 6) if nz else 0.0}
