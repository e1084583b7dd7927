"""Transcribing a long file in bounded memory.

faster-whisper's ``transcribe`` takes the whole waveform and computes the whole file's features
at once; ``rkspeech transcribe`` of 2 h of audio peaked at 6.9 GB that way (issue 30).  Here the
file is decoded block by block (:func:`rkspeech.runtime.audio.iter_audio`), the features are
computed block by block as it comes (:func:`rkspeech.runtime.whisper.features.stream_features`),
and faster-whisper's own window loop (seek, beam search, temperature fallback, timestamps, word
timestamps, language detection) then runs over those features: the waveform is never held whole,
only the features (115 MB per hour; twice that for a moment at the end).  The features equal
the whole-file ones up to the last float32 bit (see runtime.whisper.features), so the transcript
is the whole-file one -- on the test's 2.5 min recording (tests/runtime/test_long_inputs.py) and a 60 min
file, segment for segment -- except where a window's temperature fallback sits on its threshold:
a 30 min file of speech in noise matched for 1,625 s, then one noise window fell back where the
whole-file run did not, and the last 2 of 53 segments differ (docs/long-inputs.md).

Not for VAD (Silero runs over the whole waveform) or the batched pipeline: those take the
decoded waveform (:func:`whole_file_needed`).
"""

from __future__ import annotations

import numpy as np


def whole_file_needed(*, vad: bool, batch_size: int | None) -> bool:
    """True when the options need the whole waveform (VAD, the batched pipeline)."""
    return bool(vad or batch_size)


class _Precomputed:
    """A feature extractor that gives ``features`` for the stand-in waveform ``audio`` (and runs
    the real one for anything else, e.g. language detection on a waveform)."""

    def __init__(self, inner, audio, features):
        self.inner, self.audio, self.features = inner, audio, features

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, waveform, padding=160, chunk_length=None):
        if waveform is self.audio and chunk_length is None:
            return self.features
        return self.inner(waveform, padding=padding, chunk_length=chunk_length)


def transcribe_file(model, path, *, sample_rate: int, seed: int | None = None, what: str = "audio file",
                    **options):
    """``transcribe_audio`` of the file at ``path`` without holding its waveform: a
    :class:`rkspeech.runtime.whisper.transcript.Transcription` (the timing's ``host_s`` includes
    decoding and the features)."""
    import time

    from rkspeech.runtime.audio import iter_audio
    from rkspeech.runtime.whisper.features import stream_features
    from rkspeech.runtime.whisper.transcript import transcribe_audio

    owner = model
    start = time.perf_counter()
    features, samples = stream_features(iter_audio(path, sample_rate=sample_rate, what=what, allow_empty=True),
                                        owner.feature_extractor)
    features_s = time.perf_counter() - start
    # faster-whisper reads the waveform's length (duration) and hands it to the feature
    # extractor: a stand-in of that length that takes no memory (every sample is one zero)
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (samples,), (0,))
    real = owner.feature_extractor
    owner.feature_extractor = _Precomputed(real, stand_in, features)
    try:
        result = transcribe_audio(model, stand_in, seed=seed, **options)
    finally:
        owner.feature_extractor = real
    result.timing["total_s"] += features_s
    if "host_s" in result.timing:
        result.timing["host_s"] += features_s
    return result
