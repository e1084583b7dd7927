"""The speech check's verdict (``accuracy.speech_judge``, issue 39 deliverable 4): the CER it counts
and the three outcomes (pass, fail, not judged).  Standard library only, no speech here
(tests/pipelines/test_speech_check.py runs real speech through Whisper)."""

from __future__ import annotations

import pytest

from rkspeech.accuracy.speech_judge import (
    FAIL,
    cannot_speak,
    NOT_JUDGED,
    PASS,
    cer,
    corpus_cer,
    edit_distance,
    judge_speech,
    normalize_text,
)
from rkspeech.core.thresholds import SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER


def test_edit_distance_is_levenshtein():
    assert edit_distance("", "") == 0
    assert edit_distance("abc", "") == edit_distance("", "abc") == 3
    assert edit_distance("kitten", "sitting") == edit_distance("sitting", "kitten") == 3
    assert edit_distance("flaw", "lawn") == 2
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("abcd", "acbd") == 2  # a transposition is two edits (plain Levenshtein)


def test_normalization_drops_case_and_punctuation_keeps_digits():
    assert normalize_text("Hello, World!") == "hello world"
    assert normalize_text("  It's 2026:\tnine o'clock.  ") == "it s 2026 nine o clock"
    assert normalize_text("ÉTÉ — déjà vu…") == "été déjà vu"
    assert normalize_text("ＡＢＣ") == "abc"  # NFKC: full-width letters
    assert normalize_text("...!?") == ""


def test_cer_counts_characters_of_the_normalized_text():
    assert cer("Good evening, world!", "good evening world") == 0.0
    # "hello world" (11 characters) -> "hello word": one deletion
    assert cer("Hello world.", "Hello word") == pytest.approx(1 / 11)
    assert cer("abc", "") == 1.0
    assert cer("", "") == 0.0 and cer("", "x") == 1.0
    assert cer("two", "2") == 1.0  # digits kept: a number written as digits is an error
    # several sentences: edits and characters summed, the long sentence weighs more
    assert corpus_cer(["abcdefghij", "ab"], ["abcdefghij", "xy"]) == pytest.approx(2 / 12)
    with pytest.raises(ValueError):
        corpus_cer(["a", "b"], ["a"])


TEXTS = ["The quick brown fox jumps over the lazy dog.", "Good morning and good evening to every user."]


def test_judge_passes_equal_transcripts_and_fails_a_worse_plan():
    v = judge_speech(TEXTS, TEXTS, [t.upper() for t in TEXTS])
    assert v.status == PASS and v.passed and v.judged
    assert (v.reference_cer, v.plan_cer, v.delta) == (0.0, 0.0, 0.0)
    assert v.message.startswith("pass: CER fp32 0.000, plan 0.000, delta +0.000")
    assert (v.max_cer_delta, v.max_reference_cer) == (SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER)
    # the plan garbles the second sentence's words: its CER rises, the delta passes the mark
    worse = [TEXTS[0], "Good morning and could even into every loser."]
    v = judge_speech(TEXTS, TEXTS, worse)
    assert v.status == FAIL and not v.passed and v.judged
    assert v.delta == pytest.approx(corpus_cer(TEXTS, worse), abs=1e-4) and v.delta > SPEECH_MAX_CER_DELTA
    assert v.message.startswith("FAIL: ") and f"> {SPEECH_MAX_CER_DELTA:g}" in v.message
    assert v.sentences[1]["plan_transcript"] == worse[1] and v.sentences[1]["plan_cer"] > 0
    assert v.to_dict()["status"] == FAIL


def test_the_delta_is_against_fp32_not_the_text():
    """Whisper's own errors on this voice are on both sides: the same misheard word on both is
    no delta; a plan that hears better than fp32 passes."""
    misheard = ["The quick brown fox jumps over the lazy doc.", TEXTS[1]]
    v = judge_speech(TEXTS, misheard, misheard)
    assert v.status == PASS and v.reference_cer > 0 and v.delta == 0.0
    v = judge_speech(TEXTS, misheard, TEXTS)
    assert v.status == PASS and v.delta < 0
    # exactly at the mark passes, just past it fails
    v = judge_speech(TEXTS, TEXTS, misheard, max_cer_delta=corpus_cer(TEXTS, misheard))
    assert v.status == PASS
    v = judge_speech(TEXTS, TEXTS, misheard, max_cer_delta=corpus_cer(TEXTS, misheard) - 0.001)
    assert v.status == FAIL


def test_a_reference_that_does_not_speak_is_not_judged():
    """A synthetic root's fp32 side makes noise: Whisper writes nothing or a few stray words;
    nothing is judged, in one line, and the plan's transcripts are not needed."""
    noise = ["", "Thank you."]
    v = judge_speech(TEXTS, noise)
    assert v.status == NOT_JUDGED and not v.judged and not v.passed
    assert v.reference_cer > SPEECH_MAX_REFERENCE_CER and v.plan_cer is None and v.delta is None
    assert "\n" not in v.message and "does not speak" in v.message and "nothing was judged" in v.message
    # even a plan that speaks perfectly is not judged against a reference that does not
    assert judge_speech(TEXTS, noise, TEXTS).status == NOT_JUDGED
    # the mark is the caller's: a looser one judges
    assert judge_speech(TEXTS, noise, noise, max_reference_cer=1.0).status == PASS
    with pytest.raises(ValueError, match="needs the plan's transcripts"):
        judge_speech(TEXTS, TEXTS)


def test_noise_is_known_early():
    """``cannot_speak``: once the edits of the sentences heard exceed the mark over *all* the
    sentences' characters, the rest cannot rescue fp32, and those heard are not judged either."""
    texts = ["abcdefghij"] * 5  # 50 characters; the mark 0.5: more than 25 edits cannot be rescued
    assert not cannot_speak(texts, ["", ""])  # 20 edits: three perfect sentences would give 0.4
    assert cannot_speak(texts, ["", "", ""])  # 30 edits > 25
    assert judge_speech(texts[:3], ["", "", ""]).status == NOT_JUDGED
    assert not cannot_speak(texts, ["abcdefghij"] * 5) and not cannot_speak(texts, [])
    assert not cannot_speak(texts, ["", "", ""], max_reference_cer=0.7)  # 30 edits <= 35
