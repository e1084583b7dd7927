"""core.compare: one SNR / cosine, one answer for "identical", one way to write it in JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rkspeech.core.compare import (
    compare_tensors,
    cosine,
    cosine_per_row,
    db_text,
    db_value,
    energies,
    json_number,
    max_abs_diff,
    report_tensors,
    segment_snr_db,
    snr_db,
    snr_db_of_energy,
)
from rkspeech.core.errors import RkspeechError


def test_identical_is_math_inf_everywhere():
    x = np.linspace(-1, 1, 97, dtype=np.float32).reshape(1, 97)
    assert snr_db(x, x) == math.inf and snr_db_of_energy(*energies(x, x)) == math.inf
    assert snr_db(np.zeros(5), np.zeros(5)) == math.inf  # two silent signals are identical too
    assert segment_snr_db(x, x, 10) == [math.inf] * 10
    c = compare_tensors(x, x)
    assert c["snr_db"] == math.inf and c["cosine"] == pytest.approx(1.0) and c["max_abs_diff"] == 0.0
    assert type(snr_db(x, x * 0.5)) is float  # a plain float (not numpy's), like every other answer


def test_zero_reference_with_an_error_is_minus_inf():
    assert snr_db(np.zeros(4), np.ones(4)) == -math.inf
    assert snr_db_of_energy(0.0, 3.0) == -math.inf
    assert cosine(np.zeros(4), np.ones(4)) == 0.0


def test_a_known_snr():
    ref = np.ones(100)
    assert snr_db(ref, ref * 1.1) == pytest.approx(20.0)  # error 0.1 of the amplitude: 20 dB
    s, n = energies(ref, ref * 1.1)
    assert (s, n) == pytest.approx((100.0, 1.0)) and snr_db_of_energy(2 * s, 2 * n) == pytest.approx(20.0)


def test_sizes_that_differ_are_refused():
    for f in (snr_db, energies, cosine, max_abs_diff):
        with pytest.raises(RkspeechError, match="cannot compare .* 4 and 5 values"):
            f(np.zeros(4), np.zeros(5))
    with pytest.raises(RkspeechError, match=r"shapes \[2, 3\] and \[3, 2\]"):
        cosine_per_row(np.ones((2, 3)), np.ones((3, 2)))


def test_json_writes_identical_as_null_and_readers_take_old_infinity():
    assert json_number(math.inf) is None and json_number(None) is None
    # a NaN (an fp16 overflow's SNR) is written so that it never reads as identical
    assert json_number(math.nan) == "NaN" and json_number(-math.inf) == "-Infinity"
    assert math.isnan(db_value(json_number(math.nan))) and db_text(json_number(math.nan)) == "NaN"
    assert db_value(json_number(-math.inf)) == -math.inf
    assert json_number(12.3456) == 12.35 and json_number(12.3456, None) == 12.3456 and json_number(None) is None
    x = np.arange(6.0).reshape(2, 3)
    rep = report_tensors(x, x)
    text = json.dumps(rep, allow_nan=False)  # valid JSON: no Infinity
    assert json.loads(text)["snr_db"] is None
    old = json.loads('{"snr_db": Infinity}')  # what check-board / the talker check wrote before
    for v in (None, old["snr_db"], math.inf):
        assert db_value(v) == math.inf and db_text(v) == "identical"
    assert db_text(41.234) == "41.2" and db_text(41.234, 2) == "41.23" and db_value(7) == 7.0


def test_top1_rows_excuses_near_ties_only():
    """A flipped argmax fails only where the reference's top-1 margin is not a near-tie."""
    from rkspeech.core.compare import top1_rows

    ref = np.array([[0.0, 1.0, 5.0, 4.99], [0.0, 1.0, 5.0, 2.0], [3.0, 0.0, 0.0, 0.0]], np.float32)
    same = top1_rows(ref, ref.copy(), tie=0.1)
    assert same == {"rows": 3, "agreement": 1.0, "decided_flips": 0, "worst_margin": None}
    out = ref.copy()
    out[0, 3] = 5.01  # row 0: a near-tie flips (margin 0.01, rms ~3.6)
    tie = top1_rows(ref, out, tie=0.1)
    assert tie["decided_flips"] == 0 and tie["agreement"] == pytest.approx(2 / 3) and tie["worst_margin"] < 0.1
    out[1, 3] = 6.0  # row 1: a decided row (margin 3) flips
    bad = top1_rows(ref, out, tie=0.1)
    assert bad["decided_flips"] == 1 and bad["agreement"] == pytest.approx(1 / 3) and bad["worst_margin"] > 0.5
