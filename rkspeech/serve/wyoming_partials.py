"""Partial transcripts of a Wyoming audio stream (``--asr-partials``): the engine's ``partial``
steps (Qwen3-ASR: ``runtime.qwen3_asr.partials``) while the audio arrives, sent between the
handler's events (``serve.wyoming_server``)."""

from __future__ import annotations

import asyncio
import logging

from rkspeech.core.errors import RkspeechError
from rkspeech.serve.audio import pcm16_to_float
from rkspeech.serve.engines import TRANSCRIBE
from rkspeech.serve.errors import ServeError
from rkspeech.serve.options import SAMPLE_RATE

log = logging.getLogger("rkspeech.serve")


def open_partials(handler) -> PartialFeed | None:
    """A :class:`PartialFeed` for the audio ``handler`` (a ``WyomingHandler``) is about to receive,
    when partials are on and the engine makes them."""
    if not handler.options.asr_partials:
        return None
    model = handler.pool.first_model(TRANSCRIBE)
    if getattr(model, "partial", None) is None:
        return None
    from rkspeech.serve import biasing, transcription

    try:
        language = transcription.check_language(model, handler._language or handler.options.asr_language)
        state = model.partial_state(language=language,
                                    hotwords=biasing.hotwords(handler._bias or None, handler.options.hotwords_file))
    except (ServeError, RkspeechError):
        return None  # the transcription at audio-stop answers the error
    return PartialFeed(state, language)


class PartialFeed:
    """Partial transcripts of one Wyoming audio stream (``--asr-partials``; the engine's ``partial``:
    ``runtime.qwen3_asr.partials``).

    Each time another ``CHUNK_S`` of audio has arrived, a step over all the audio so far starts on
    an engine -- only when one is free and nobody waits (``ServePool.has_free``), and one at a
    time, so partials never hold up a transcription.  A finished step's new fixed text is sent
    as a ``transcript-chunk`` (``transcript-start`` before the first) from the handler's own
    task, between events: the writes never interleave.  At ``audio-stop`` a finished step is
    sent and a running one is dropped (its engine is freed when its call ends).  A step that
    fails (audio past the decoder's capacity) ends the partials of that stream, not the stream."""

    def __init__(self, state, language: str | None):
        from rkspeech.runtime.qwen3_asr.partials import CHUNK_S

        self.state, self.language = state, language
        self.chunk_bytes = int(CHUNK_S * SAMPLE_RATE) * 2
        self.next_at = self.chunk_bytes
        self.task = None
        self.sent, self.started, self.dead = "", False, False

    async def audio_arrived(self, handler) -> None:
        await self._send(handler)
        if self.dead or self.task is not None or handler._audio_bytes < self.next_at:
            return
        if not handler.pool.has_free(TRANSCRIBE):
            return
        chunks = handler._audio_bytes // self.chunk_bytes
        self.next_at = (chunks + 1) * self.chunk_bytes
        wave = pcm16_to_float(b"".join(handler._audio)[:chunks * self.chunk_bytes])
        self.task = asyncio.ensure_future(handler.pool.run(TRANSCRIBE, _partial_step, self.state, wave,
                                                           client=handler.client))

    async def _send(self, handler) -> None:
        """The finished step's new fixed text, if any."""
        from wyoming.asr import TranscriptChunk, TranscriptStart

        if self.task is None or not self.task.done():
            return
        task, self.task = self.task, None
        if task.cancelled() or task.exception() is not None:
            self.dead = True
            if not task.cancelled():
                log.info("wyoming partial transcripts stop: %s", task.exception())
            return
        fixed = task.result().fixed
        if fixed.startswith(self.sent) and len(fixed) > len(self.sent):
            if not self.started:
                await handler.write(TranscriptStart(language=self.language).event())
                self.started = True
            await handler.write(TranscriptChunk(text=fixed[len(self.sent):]).event())
            self.sent = fixed

    async def finish(self, handler) -> None:
        await self._send(handler)
        self.cancel()

    def cancel(self) -> None:
        task, self.task = self.task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()  # taken: nothing is logged when the task is collected


def _partial_step(model, state, wave):
    """In the engine's thread: one streaming step (the state is this stream's alone)."""
    return model.partial(state, wave)
