"""Long inputs in bounded memory (issue 30): ``rkspeech transcribe`` decodes a file and computes its
features block by block (runtime.whisper.long_audio), with the transcript of faster-whisper on the
whole waveform."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import wave

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("av")

from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402 - after the importorskips


def _write(path, pcm: np.ndarray, rate: int = 16000) -> str:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(np.clip(pcm, -32768, 32767).astype(np.int16).tobytes())
    return str(path)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """~2.5 min at 16 kHz: ~25 s of quiet noise (-60 dBFS), then a sentence spoken, five times."""
    from faster_whisper.audio import decode_audio

    root = tmp_path_factory.mktemp("long_audio")
    rng = np.random.default_rng(1)
    parts = []
    for i, text in enumerate(SENTENCES):
        speech = decode_audio(espeak(text, root / f"s{i}.wav")) * 32768
        parts += [rng.standard_normal(16000 * 25 + 977 * i) * 32, speech]  # noise first: the reflection matters
    return _write(root / "long.wav", np.concatenate(parts))


def test_streamed_features_equal_the_whole_file_ones(recording):
    from faster_whisper.audio import decode_audio
    from faster_whisper.feature_extractor import FeatureExtractor

    from rkspeech.runtime.audio import iter_audio
    from rkspeech.runtime.whisper.features import stream_features

    extractor = FeatureExtractor()
    whole = extractor(decode_audio(recording))
    streamed, samples = stream_features(iter_audio(recording, sample_rate=16000), extractor)
    assert samples == len(decode_audio(recording)) and streamed.shape == whole.shape
    # the last float32 bit may differ: OpenBLAS rounds the Mel product per column count
    assert np.abs(streamed - whole).max() <= 2.5e-7


def test_transcribe_streams_a_long_file_with_the_whole_file_transcript(recording):
    """The CLI (streamed: no --vad / --batch-size / --compare) against stock faster-whisper on the
    whole waveform: the same text and segment times, first window to last."""
    import faster_whisper

    from rkspeech.cli import main
    from rkspeech.runtime.whisper.transcript import transcribe_audio

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["transcribe", recording, "--model-dir", str(TINY_EN), "--beam-size", "1", "--json"]) == 0
    ours = json.loads(out.getvalue())["files"][0]
    stock = faster_whisper.WhisperModel(str(TINY_EN), device="cpu", cpu_threads=1)
    ref = transcribe_audio(stock, faster_whisper.audio.decode_audio(recording), seed=0, beam_size=1)
    assert [(s["start"], s["end"], s["text"]) for s in ours["segments"]] == \
        [(s.start, s.end, s.text) for s in ref.segments]
    assert ours["segments"][-1]["end"] > 120 and "number has changed" in ours["segments"][-1]["text"]


_PEAK = textwrap.dedent("""
    import resource, sys
    from faster_whisper.feature_extractor import FeatureExtractor
    from rkspeech.runtime.audio import iter_audio
    from rkspeech.runtime.whisper.features import stream_features
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    features, _ = stream_features(iter_audio(sys.argv[1], sample_rate=16000), FeatureExtractor())
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, features.nbytes / 2**20)
""")


def test_feature_memory_grows_only_by_the_features(tmp_path):
    """5 min and 20 min of noise, each in a fresh process: the peak grows by twice the features'
    size (80 x 100 frames per second, float32: 32 MB per 1000 s; the blocks and the assembled
    array meet once, at the end) plus at most 40 MB; the whole-file computation grows by ~1 GB
    per 20 min (6.9 GB for 2 h, issue 30)."""
    rng = np.random.default_rng(0)
    peaks = {}
    for minutes in (5, 20):
        path = tmp_path / f"{minutes}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
            for _ in range(minutes):
                w.writeframes((rng.standard_normal(16000 * 60) * 1000).astype(np.int16).tobytes())
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path)], check=True, capture_output=True, text=True)
        peaks[minutes] = [float(v) for v in out.stdout.split()]
    grown = peaks[20][0] - peaks[5][0]
    features_grown = peaks[20][1] - peaks[5][1]
    assert features_grown == pytest.approx(15 * 60 * 100 * 80 * 4 / 2**20, rel=0.01)
    assert grown < 2 * features_grown + 40, peaks


class _Frames:
    """TEST DOUBLE of ``Speaker``: ``frames`` frames per utterance (fewer when ``max_new_tokens``
    says so), 10 samples each; records each utterance's text."""

    def __init__(self, frames: int = 3):
        self.frames, self.texts = frames, []

    def stream(self, text, *, options, codes_out=None, timing, **voice):
        self.texts.append(text)
        for _ in range(min(self.frames, options.max_new_tokens - 1)):
            timing.frames += 1
            timing.samples += 10
            yield np.zeros(10, np.float32)


def test_a_long_text_is_spoken_one_sentence_at_a_time():
    """50,000 characters: no utterance longer than MAX_SENTENCE_CHARS (one prompt of the whole
    text peaked at 4.85 GB); every word spoken, in order; --max-frames bounds the whole text."""
    from rkspeech.core.sentences import MAX_SENTENCE_CHARS
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.long_text import stream_sentences
    from rkspeech.runtime.tts.speak import SpeechTiming

    text = " ".join(f"Sentence number {i} is here." for i in range(1500)) + " " + "word " * 2000
    assert len(text) > 50_000
    engine, timing = _Frames(), SpeechTiming()
    chunks = list(stream_sentences(engine, text, options=GenerationOptions(), timing=timing, speaker="ryan"))
    assert MAX_SENTENCE_CHARS == 400 and max(map(len, engine.texts)) <= 400
    assert " ".join(engine.texts).split() == text.split()
    assert len(chunks) == timing.frames == 3 * len(engine.texts) and timing.samples == 10 * timing.frames
    one = _Frames()
    assert len(list(stream_sentences(one, "Just one sentence, spoken as before.", options=GenerationOptions(),
                                     timing=SpeechTiming()))) == 3 and one.texts == ["Just one sentence, spoken as before."]
    capped, t = _Frames(), SpeechTiming()
    list(stream_sentences(capped, text, options=GenerationOptions(), timing=t, max_frames=7))
    assert t.frames == 7 and len(capped.texts) == 3  # 3 + 3 + 1
