"""Window buckets: one encoder graph per window length; each transcription runs the smallest that
holds its audio.

Whisper's encoder reads 30 s windows; a 3 s command pays for 30 s of attention (the tiny.en
encoder on onnxruntime here: 0.71 s for the 30 s window, 0.09 s for 10 s; CTranslate2's own
encoder on the same host, one thread).  ``rkspeech build whisper-encoder --windows 10,30`` also
builds shorter windows (``export.whisper_onnx``: the first ``n / 2`` positional rows, as
whisper.cpp's ``audio_ctx``) and lists them in its plan (``plan.whisper``); given that
``plan.json`` as the encoder, :class:`WindowRunners` holds one runner per window and
:func:`transcribe_in_window` picks, from the audio's length, the smallest window that holds it
(:func:`rkspeech.models.whisper.window.holds`); every encoder call of that transcription (its
windows, language detection) runs there on the window's first frames -- the frames after them
are faster-whisper's zero padding, since the audio fits -- and CTranslate2's decoder attends to
the shorter encoder output (``Whisper.generate`` takes any number of encoder frames).  Audio
longer than every bucket, the batched pipeline and direct ``encode`` calls run the 30 s graph,
as without buckets.

Whisper was trained on 30 s windows: a shorter one changes some transcripts (measured in
docs/whisper-buckets.md), so the build makes buckets only when asked.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import (
    FRAMES_PER_SECOND,
    SAMPLE_RATE,
    WINDOW_FRAMES,
    holds,
)


class WindowRunners:
    """The encoder graphs of every window behind one runner's interface: the 30 s graph's names
    and shapes; :meth:`infer` runs the active window's graph (:meth:`using`) on the first frames
    of the 30 s window faster-whisper passes."""

    def __init__(self, runners: dict[int, object]):
        self.runners = dict(sorted(runners.items()))
        self.full = self.runners[WINDOW_FRAMES]
        names = (list(self.full.input_specs()), list(self.full.output_specs()))
        for frames, r in self.runners.items():
            if (list(r.input_specs()), list(r.output_specs())) != names:
                raise RkspeechError(f"the {frames // FRAMES_PER_SECOND} s encoder graph's inputs/outputs "
                                    f"{list(r.input_specs())} -> {list(r.output_specs())} are not the 30 s graph's "
                                    f"{names[0]} -> {names[1]}; rebuild the plan")
        self.active: int | None = None
        #: the window of the last encoder call (seconds)
        self.last_seconds: int | None = None

    @property
    def windows(self) -> tuple[int, ...]:
        """Every window, in mel frames, shortest first (the last is 3000)."""
        return tuple(self.runners)

    def window_for(self, samples: int) -> int:
        """The smallest window (mel frames) that holds ``samples`` of audio; 3000 when none does."""
        return next((f for f in self.runners if holds(f, samples)), WINDOW_FRAMES)

    @contextlib.contextmanager
    def using(self, frames: int):
        """Encoder calls inside run the ``frames`` window's graph (nested uses restore the outer)."""
        before, self.active = self.active, frames
        try:
            yield
        finally:
            self.active = before

    def input_specs(self):
        return self.full.input_specs()

    def output_specs(self):
        return self.full.output_specs()

    def infer(self, feeds: dict) -> dict:
        frames = self.active or WINDOW_FRAMES
        self.last_seconds = frames // FRAMES_PER_SECOND
        if frames == WINDOW_FRAMES:
            return self.full.infer(feeds)
        return self.runners[frames].infer({n: np.ascontiguousarray(v[..., :frames]) for n, v in feeds.items()})

    def close(self) -> None:
        for r in self.runners.values():
            r.close()


def open_windows(backend: str, paths: dict[int, Path], **options) -> WindowRunners:
    """One runner per window (``paths``: mel frames -> checked file), all open; ``options`` as
    ``runners.open_runner`` takes them."""
    from rkspeech.runtime.runners import open_runner

    runners: dict = {}
    try:
        for frames, path in paths.items():
            runners[frames] = open_runner(backend, path, **options)
        return WindowRunners(runners)
    except BaseException:
        for r in runners.values():
            r.close()
        raise


def transcribe_in_window(transcribe, windows: WindowRunners, audio, *args, **kwargs):
    """faster-whisper's ``transcribe`` (bound, ``transcribe``) with every encoder call of it --
    those before it returns (language detection) and those while its segments are read -- in the
    smallest window of ``windows`` that holds ``audio``."""
    if not isinstance(audio, np.ndarray):  # a path or file: decoded as faster-whisper would
        from faster_whisper.audio import decode_audio

        audio = decode_audio(audio, sampling_rate=SAMPLE_RATE)
    frames = windows.window_for(len(audio))
    with windows.using(frames):
        segments, info = transcribe(audio, *args, **kwargs)
    return _in_window(segments, windows, frames), info


def _in_window(segments, windows: WindowRunners, frames: int):
    """``segments`` (a generator that encodes as it is read) with each step in ``frames``."""
    while True:
        with windows.using(frames):
            try:
                segment = next(segments)
            except StopIteration:
                return
        yield segment
