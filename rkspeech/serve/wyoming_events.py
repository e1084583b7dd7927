"""Reading Wyoming events off a stream, and the audio formats the server accepts.

The events are read here rather than by ``wyoming.event.async_read_event``, which returns None
(= end of stream) for a malformed line, so a client would see a silent disconnect.
"""

from __future__ import annotations

import asyncio
import json

from rkspeech.runtime.audio import MIN_INPUT_RATE
from rkspeech.serve.errors import ServeError

#: Bytes of one event header line or data block at most.
MAX_LINE = 1024 * 1024
#: Wyoming audio the server converts (``AudioChunkConverter`` takes 1-4 byte samples, mono or
#: stereo); rates outside this range are refused rather than resampled (the files' floor).
AUDIO_RATES = (MIN_INPUT_RATE, 192000)
AUDIO_WIDTHS = (1, 2, 3, 4)
AUDIO_CHANNELS = (1, 2)


def check_audio_format(rate, width, channels) -> int:
    """Bytes per frame of an audio format the server converts; ``ServeError`` (one line) else."""
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (rate, width, channels))
    ok = whole and AUDIO_RATES[0] <= rate <= AUDIO_RATES[1] and width in AUDIO_WIDTHS and channels in AUDIO_CHANNELS
    if not ok:
        raise ServeError(f"audio format not supported: rate {rate!r} (give {AUDIO_RATES[0]}-{AUDIO_RATES[1]} Hz), "
                         f"width {width!r} (1-4 bytes), channels {channels!r} (1 or 2)")
    return width * channels


class Framing(Exception):
    """The stream can no longer be parsed: answer and close."""


async def read_event(reader: asyncio.StreamReader):
    """The next event, None at end of stream; ValueError for a bad line (framing intact),
    :class:`Framing` when framing is lost."""
    from wyoming.event import Event

    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        line = exc.partial
    except asyncio.LimitOverrunError:
        raise Framing(f"event header longer than {MAX_LINE} bytes") from None
    if not line.strip():
        raise ValueError("empty event line")
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        raise ValueError("event header is not JSON (or nested too deep)") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ValueError("event header has no type")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise ValueError("event data is not an object")
    try:
        data_length = int(header.get("data_length") or 0)
        payload_length = int(header.get("payload_length") or 0)
    except (TypeError, ValueError):
        raise Framing("data_length / payload_length are not numbers") from None
    if not (0 <= data_length <= MAX_LINE) or not (0 <= payload_length <= 16 * MAX_LINE):
        raise Framing("data_length / payload_length out of range")
    try:
        if data_length:
            try:
                extra = json.loads(await reader.readexactly(data_length))
            except (ValueError, RecursionError):  # its payload still follows: the framing is lost
                raise Framing("event data is not JSON (or nested too deep)") from None
            if not isinstance(extra, dict):
                raise ValueError("event data is not an object")
            data.update(extra)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        raise Framing("connection closed inside an event") from None
    return Event(type=header["type"], data=data, payload=payload)
