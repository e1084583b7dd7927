"""core.capture: the recorders pass through and keep copies; the sample requests per variant."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rkspeech.core.capture import (
    CALM_VOICE,
    RecordingCodePredictor,
    RecordingRunner,
    RecordingTalker,
    cycled_requests,
    sample_request,
    step_sine_clip,
    teacher,
    tone_clip,
)
from rkspeech.core.errors import RkspeechError


class _Talker:
    name = "fake"

    def __init__(self):
        self.started = None

    def start(self, capacity):
        self.started = capacity

    def forward(self, embeds):
        return np.asarray(embeds, np.float32).sum(0)

    def close(self):
        raise AssertionError("the recorder must not close the caller's backend")


class _CodePredictor:
    name = "fake-cp"

    def frame(self, hidden, first, choose):
        return [choose(j, np.full(4, float(j), np.float32)) for j in (1, 2)]


def test_recording_talker_passes_through_and_copies():
    inner, calls = _Talker(), []
    rec = RecordingTalker(inner, calls)
    rec.start(7)
    x = np.ones((2, 3), np.float32)
    out = rec.forward(x)
    x[:] = 5  # the caller reuses its buffer: the record keeps what was fed
    rec.close()
    assert inner.started == 7 and rec.name == "recording fake"
    assert np.array_equal(out, [2, 2, 2]) and np.array_equal(calls[0][0], np.ones((2, 3)))
    assert np.array_equal(calls[0][1], out)


def test_recording_code_predictor_and_teacher():
    inputs, logits = [], []
    rec = RecordingCodePredictor(_CodePredictor(), inputs, logits)
    codes = rec.frame(np.ones((1, 3)), np.zeros((1, 3)), lambda j, lg: int(lg.argmax()) + 10 * j)
    assert codes == [10, 20] and inputs[0][0].shape == (3,) and logits[0].shape == (2, 4)
    rows = []
    assert _CodePredictor().frame(None, None, teacher([7, 8], rows)) == [7, 8] and len(rows) == 2


def test_recording_runner_copies_feeds():
    feeds = []
    runner = RecordingRunner(SimpleNamespace(infer=lambda feed: {"y": feed["x"] * 2}), feeds)
    x = np.ones(3)
    assert np.array_equal(runner.infer({"x": x})["y"], [2, 2, 2])
    x[:] = 0
    assert np.array_equal(feeds[0]["x"], [1, 1, 1])


def _tts(kind):
    return SimpleNamespace(cfg=SimpleNamespace(tts_model_type=kind), speakers=["a", "b"], languages=["en", "de", "fr"])


def test_sample_requests_by_variant():
    assert sample_request(_tts("custom_voice"), 3) == {"speaker": "b", "language": "english"}
    assert sample_request(_tts("voice_design"), language=None) == {"instruct": CALM_VOICE}
    clip = tone_clip((220, 0.3))
    assert sample_request(_tts("base"), ref_audio=clip)["ref_audio"] is clip
    with pytest.raises(RkspeechError, match=r"^the gate runs custom-voice or voice-design models, not 'base'; x$"):
        sample_request(_tts("base"), what="the gate", hint="; x")
    got = cycled_requests(_tts("custom_voice"), 7)
    assert len({tuple(r.values()) for r in got[:6]}) == 6 and got[6] == got[0]  # 2 x 3 distinct pairs first
    assert [r["language"] for r in cycled_requests(_tts("voice_design"), 4)] == ["en", "de", "fr", "en"]
    # a base model: the held-out voices cloned in turn, languages cycled
    base = cycled_requests(_tts("base"), 7)
    assert [r["language"] for r in base[:4]] == ["en", "de", "fr", "en"]
    assert len({r["ref_audio"].tobytes() for r in base[:5]}) == 5 and np.array_equal(base[5]["ref_audio"], base[0]["ref_audio"])


def test_clips_are_the_checks_own():
    t = np.arange(24000, dtype=np.float32) / 24000
    two = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1330 * t)).astype(np.float32)
    assert np.array_equal(tone_clip((220, 0.3), (1330, 0.1)), two) and tone_clip((220, 0.3)).dtype == np.float32
    assert np.array_equal(step_sine_clip(), np.sin(np.arange(24000, dtype=np.float32) * 0.05) * 0.3)
