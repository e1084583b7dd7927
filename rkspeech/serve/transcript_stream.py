"""Streamed transcripts: each segment's text as faster-whisper decodes it, then the whole text.

One decoding path: the engine runs :func:`rkspeech.runtime.whisper.transcript.iter_transcription`,
which yields each segment and then the same ``Transcription`` the unstreamed path returns, so
the final text is the unstreamed text.  :class:`DeltaText` cuts the segment texts into deltas
whose concatenation is exactly that final text (stripped, as the plain answers are): leading
spaces are dropped until the first word, and a delta's trailing spaces are held back and sent
in front of the next one.  A short command is one segment (Whisper decodes 30 s windows), so
its one delta comes just before the final text; long audio gets a delta per segment.

Front ends: HTTP ``stream=true`` -> server-sent events ``transcript.text.delta`` /
``transcript.text.done`` (the OpenAI API's shapes; an error after the first event is an
``{"type": "error", "error": {...}}`` event, which the openai client raises); Wyoming ->
``transcript-start``, ``transcript-chunk`` per delta, ``transcript-stop``, then ``transcript``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from rkspeech.serve.engines import TRANSCRIBE


class DeltaText:
    """Segment texts -> deltas that join to ``"".join(texts).strip()``."""

    def __init__(self):
        self.started = False
        self.pending = ""

    def add(self, text: str) -> str:
        text = self.pending + text
        if not self.started:
            text = text.lstrip()
        kept = text.rstrip()
        self.pending = text[len(kept):]
        self.started = self.started or bool(kept)
        return kept


def open_segments(model, audio, request):
    """In the engine's thread: the segments as decoded, then the ``Transcription``."""
    from rkspeech.runtime.whisper.transcript import iter_transcription

    return iter_transcription(model, audio, seed=request.seed, **request.options())


async def transcript_events(pool, audio, request, *, deadline: float | None = None,
                            client=None, gone=None) -> AsyncIterator[tuple]:
    """``("delta", text)`` per decoded segment with text, then ``("done", Transcription)``;
    ``gone()`` True (the client left) stops the decoding at the next segment (``ClientGone``)."""
    from rkspeech.runtime.whisper.transcript import Transcription

    deltas = DeltaText()
    stream = pool.stream(TRANSCRIBE, open_segments, audio, request, deadline=deadline, client=client,
                         gone=gone)
    try:
        async for item in stream:
            if isinstance(item, Transcription):
                yield "done", item
            else:
                delta = deltas.add(item.text)
                if delta:
                    yield "delta", delta
    finally:
        await stream.aclose()


def sse(event: dict) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def sse_body(events: AsyncIterator[tuple], first: tuple | None, *, on_done=None):
    """The HTTP body of ``stream=true``: ``first`` (an event already taken) and the rest."""
    from rkspeech.serve.errors import ServeError

    try:
        item = first
        while item is not None:
            kind, value = item
            if kind == "delta":
                yield sse({"type": "transcript.text.delta", "delta": value})
            else:
                if on_done is not None:
                    on_done(value)
                yield sse({"type": "transcript.text.done", "text": value.text.strip()})
            item = await anext(events, None)
    except ServeError as exc:  # after the status line: the error goes in the stream
        yield sse({"type": "error", "error": {"message": str(exc), "type": "server_error", "code": exc.code}})
    finally:
        await events.aclose()
