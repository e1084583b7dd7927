"""Speaking a long text in bounded memory: one utterance per sentence.

One prompt of a whole text grows the talker's context (and its cache) with the text: ``speak`` of
50,000 characters peaked at 4.85 GB (issue 30).  :func:`stream_sentences` cuts the text into
sentences (:func:`rkspeech.core.sentences.sentences`: sentence ends, and at most
``MAX_SENTENCE_CHARS`` per piece) and streams each through :meth:`Speaker.stream` in turn, so
what is held is one sentence's context and audio.  A text of one sentence is one utterance,
exactly as before.  ``max_frames`` bounds the frames of the whole text (each sentence gets what
is left).

On an engine that generates several streams at once (``Speaker.streams`` > 1: the plan's lanes
graphs, ``runtime.tts.batch``), the sentences after the first are generated ahead, up to
``streams`` sentences in flight, their audio held until their turn (:class:`_Ahead`).  The
schedule: the first sentence starts alone, so its first audio comes as it does one sentence at a
time; once that audio is out, the next ``streams - 1`` sentences join the batch, and each
sentence that ends lets the next one in.  Audio is written in order.  Playback does not stall
while a stream in the batch generates faster than real time (``rkspeech estimate --streams``
prices that rate on a board): sentence k + 1 has then been generating since sentence k began.
With ``max_frames`` (a bound on the whole text) the sentences run one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

import numpy as np


def stream_sentences(engine, text: str, *, options, timing, codes_out: list | None = None,
                     margins_out: list | None = None, max_frames: int | None = None,
                     **voice) -> Iterator[np.ndarray]:
    """PCM chunks of ``text`` spoken sentence by sentence by ``engine`` (a ``Speaker``; ``voice``:
    its ``speaker``, ``language``, ``instruct``, ``ref_audio`` ...); ``timing`` (a ``SpeechTiming``)
    sums the sentences' (time to first audio: the first sentence's).  ``codes_out`` receives one
    ``[T, 16]`` array per sentence: each sentence is its own utterance with a fresh vocoder state,
    so its codes are decoded apart too (``runtime.tts.codes.utterance_array`` / ``utterances``);
    ``margins_out`` one ``[T + 1, 16]`` array per sentence (``runtime.tts.codes.margin_rows``)."""
    from rkspeech.core.sentences import sentences

    pieces = list(sentences(text))
    streams = getattr(engine, "streams", 1)
    if streams > 1 and len(pieces) > 1 and max_frames is None:
        ahead = _Ahead(engine, pieces, streams, options=options, margins=margins_out is not None, voice=voice)
        with contextlib.closing(ahead.chunks(timing, codes_out, margins_out)) as chunks:
            yield from chunks
        return
    yield from _in_turn(engine, pieces, options=options, timing=timing, codes_out=codes_out,
                        margins_out=margins_out, max_frames=max_frames, voice=voice)


def _add(timing, part) -> None:
    """A sentence's ``SpeechTiming`` into the text's (time to first audio: the first sentence's)."""
    if timing.first_audio_s is None and part.first_audio_s is not None:
        timing.first_audio_s = part.first_audio_s
    timing.frames += part.frames
    timing.samples += part.samples
    timing.generate_s += part.generate_s
    timing.vocoder_s += part.vocoder_s
    timing.cuts += part.cuts
    for key, value in part.stages.items():
        timing.stages[key] = timing.stages.get(key, 0) + value


def _keep(engine, codes_out, margins_out, frames, margins) -> None:
    if frames and codes_out is not None:
        codes_out.append(np.stack(frames))
    if margins and margins_out is not None:
        from rkspeech.runtime.tts.codes import margin_rows

        margins_out.append(margin_rows(margins, engine.model.num_code_groups))


def _in_turn(engine, pieces, *, options, timing, codes_out, margins_out, max_frames, voice) -> Iterator[np.ndarray]:
    from rkspeech.runtime.tts.speak import SpeechTiming

    start = time.perf_counter()
    for piece in pieces:
        if max_frames is not None:
            left = max_frames - timing.frames
            if left <= 0:
                break
            # N frames of audio take N + 1 talker steps (speak's --max-frames)
            options = dataclasses.replace(options, max_new_tokens=left + 1)
        part, frames = SpeechTiming(), ([] if codes_out is not None else None)
        margins = [] if margins_out is not None else None
        yield from engine.stream(piece, options=options, codes_out=frames, margins_out=margins, timing=part,
                                 **voice)
        _keep(engine, codes_out, margins_out, frames, margins)
        _add(timing, part)
        timing.total_s = time.perf_counter() - start


class _Ahead:
    """The sentences of a text generated up to ``streams`` at once (the module docstring's
    schedule): each in a thread of its own that runs ``engine.stream`` into its own queue; the
    caller's :meth:`chunks` yields the queues in order.  A caller that stops early stops every
    sentence in flight; a sentence's error is raised when its turn comes."""

    _DONE = object()

    def __init__(self, engine, pieces, streams: int, *, options, margins: bool, voice: dict):
        import threading

        self.engine, self.pieces, self.streams = engine, pieces, streams
        self.options, self.margins, self.voice = options, margins, voice
        self.stop = threading.Event()
        self.threads: list = []
        self.queues: list = []
        self.parts: list = []  # per sentence: (SpeechTiming, frames, margins)

    def _start(self, k: int) -> None:
        import queue
        import threading

        from rkspeech.runtime.tts.speak import SpeechTiming

        q: queue.Queue = queue.Queue()  # unbounded: a sentence's audio waits for its turn in memory
        part = (SpeechTiming(), [], [] if self.margins else None)
        self.queues.append(q)
        self.parts.append(part)

        def run():
            try:
                it = self.engine.stream(self.pieces[k], options=self.options, codes_out=part[1],
                                        margins_out=part[2], timing=part[0], **self.voice)
                with contextlib.closing(it):
                    for pcm in it:
                        q.put(pcm)
                        if self.stop.is_set():
                            break
                q.put(self._DONE)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread at its turn
                q.put(exc)

        t = threading.Thread(target=run, name=f"rkspeech-sentence-{k}", daemon=True)
        self.threads.append(t)
        t.start()

    def chunks(self, timing, codes_out, margins_out) -> Iterator[np.ndarray]:
        start = time.perf_counter()
        try:
            self._start(0)
            for k in range(len(self.pieces)):
                q = self.queues[k]
                while True:
                    item = q.get()
                    if item is self._DONE:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    if timing.first_audio_s is None:
                        timing.first_audio_s = time.perf_counter() - start
                    yield item
                    # the first audio is out: the sentences ahead join the batch
                    while len(self.queues) < min(len(self.pieces), k + self.streams):
                        self._start(len(self.queues))
                part, frames, margins = self.parts[k]
                _keep(self.engine, codes_out, margins_out, frames, margins)
                part.first_audio_s = None  # the text's first audio is the caller's (above)
                _add(timing, part)
                timing.total_s = time.perf_counter() - start
                if len(self.queues) < len(self.pieces):  # a sentence ended: the next joins
                    self._start(len(self.queues))
        finally:
            self.stop.set()
            for t in self.threads:
                t.join()
