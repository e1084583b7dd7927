"""Greedy codes of two machines: identical, or the first differing decision and whether the
measured error explains it (``rkspeech.board.compare``; the rehearsal's verdict, issue 40)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rkspeech.board.compare import explain, first_difference, stage_snr
from rkspeech.core.thresholds import TIE_ERRORS
from rkspeech.models.qwen3_tts.loop import decision_margin


def test_decision_margin_is_the_top_two_gap_over_the_finite_logits_rms():
    x = np.array([3.0, 1.0, 2.5, -np.inf, 0.0], np.float32)  # -inf: a banned id, not a logit
    rms = math.sqrt((9 + 1 + 6.25 + 0) / 4)
    assert decision_margin(x) == pytest.approx(0.5 / rms)
    assert decision_margin(np.array([1.0, 1.0])) == 0.0  # a tie
    assert decision_margin(np.array([1.0, -np.inf])) == math.inf  # one choice: nothing to flip


def _codes(t=6, g=4, seed=0):
    return np.random.default_rng(seed).integers(0, 100, (t, g))


def test_first_difference_finds_the_decision_in_row_order():
    a = _codes()
    assert first_difference(a, a.copy()) is None
    b = a.copy()
    b[3, 2] += 1
    b[4, 0] += 1
    assert first_difference(a, b) == (3, 2)
    assert first_difference(a, a[:4]) == (4, 0)  # one stopped: the decision that ended it


REPORT = {"graphs": [
    {"graph": "vocoder main", "steps": [{"outputs": [{"graded": True, "snr_db": 48.3}]}]},
    {"graph": "talker prefill", "steps": [{"outputs": [{"graded": True, "snr_db": 36.0},
                                                       {"graded": False, "snr_db": 1.0}]}]},
    {"graph": "talker decode", "steps": [{"outputs": [{"graded": True, "snr_db": 46.0}]}]},
    {"graph": "code predictor step", "steps": [{"outputs": [{"graded": True, "snr_db": None}]}]},
]}


def test_stage_snr_takes_each_stages_worst_graded_output():
    assert stage_snr(REPORT) == {"talker": 36.0, "code_predictor": math.inf}


def test_a_near_tie_is_explained_and_a_decided_flip_is_not():
    snr = stage_snr(REPORT)
    bound = TIE_ERRORS * 10 ** (-36.0 / 20)
    a = _codes()
    b = a.copy()
    b[2, 0] += 1  # codebook 0: the talker's decision
    m = np.full((7, 4), 1.0, np.float32)
    tie = m.copy()
    tie[2, 0] = bound / 3
    e = explain(a, b, tie, tie, snr)
    assert not e["identical"] and (e["frame"], e["codebook"], e["stage"]) == (2, 0, "talker")
    assert e["near_tie"] and e["bound"] == pytest.approx(bound) and "near-tie" in e["why"]
    decided = tie.copy()
    decided[2, 0] = bound * 2  # the same flip at a margin the error cannot reach: a bug
    e = explain(a, b, decided, tie, snr)
    assert not e["near_tie"] and "not explained" in e["why"]
    # no margins recorded, or a stage check-board did not measure: nothing explained
    assert not explain(a, b, None, tie, snr)["near_tie"]
    assert not explain(a, b, tie, tie, {"code_predictor": 130.0})["near_tie"]
    # a code predictor decision carries the talker's error too (its input is the talker's hidden state)
    c = a.copy()
    c[1, 3] += 1
    tie_c = m.copy()
    tie_c[1, 3] = bound / 3
    e = explain(a, c, tie_c, tie_c, snr)
    assert e["stage"] == "code_predictor" and e["near_tie"] and e["bound"] == pytest.approx(bound)
    e = explain(a, c, tie_c, tie_c, {"talker": math.inf, "code_predictor": math.inf})
    assert not e["near_tie"] and e["bound"] == 0.0  # identical outputs both sides explain no flip
    assert explain(a, a.copy(), None, None, snr) == {"identical": True, "frames": 6}
