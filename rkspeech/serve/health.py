"""Is a Wyoming server healthy?  A real ``describe`` -> ``info`` round trip, not a port probe.

A connected socket says nothing: the kernel completes a TCP handshake into the listen backlog
even when the server's event loop is wedged and will never read it.  So :func:`check` sends ``describe`` and wants the
``info`` answer, with the programs the caller expects (``asr``, ``tts``: present, installed, with
a model or a voice), all within one time limit that covers connecting, writing and reading.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlparse

from rkspeech.core.errors import RkspeechError

#: what a program kind must offer to count: its list of models / voices, by kind
PROGRAMS = {"asr": "models", "tts": "voices"}


class Unhealthy(Exception):
    """The server did not answer as a healthy one does (one line: why)."""


def split_uri(uri: str) -> tuple[str, str, int | None]:
    """``tcp://HOST:PORT`` -> ("tcp", host, port); ``unix://PATH`` -> ("unix", path, None)."""
    parsed = urlparse(uri)
    if parsed.scheme == "unix" and (parsed.path or parsed.netloc):
        return "unix", parsed.netloc + parsed.path, None
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "tcp" or not parsed.hostname or not port:
        raise RkspeechError(f"{uri!r}: use tcp://HOST:PORT or unix://PATH")
    return "tcp", parsed.hostname, port


async def describe(uri: str):
    """The server's ``info`` (a ``wyoming.info.Info``) for one ``describe``; no time limit here."""
    from wyoming.event import async_write_event
    from wyoming.info import Describe, Info

    from rkspeech.serve.wyoming_events import MAX_LINE, read_event

    scheme, where, port = split_uri(uri)
    if scheme == "unix":
        reader, writer = await asyncio.open_unix_connection(where, limit=MAX_LINE)
    else:
        reader, writer = await asyncio.open_connection(where, port, limit=MAX_LINE)
    try:
        await async_write_event(Describe().event(), writer)
        while True:
            try:
                event = await read_event(reader)
            except ValueError as exc:
                raise Unhealthy(f"a malformed event came back ({exc})") from None
            if event is None:
                raise Unhealthy("the server closed the connection without answering describe")
            if Info.is_type(event.type):
                return Info.from_event(event)
            if event.type == "error":
                raise Unhealthy(f"the server answered describe with an error: {event.data.get('text')}")
    finally:
        writer.close()


def missing(info, expect) -> list[str]:
    """The expected program kinds ``info`` does not offer (installed, with a model / voice)."""
    out = []
    for kind in expect:
        offered = [p for p in getattr(info, kind) or [] if p.installed and getattr(p, PROGRAMS[kind], None)]
        if not offered:
            out.append(kind)
    return out


def summary(info) -> str:
    """``asr rkspeech-whisper (base), tts rkspeech-speech (2 voices)``."""
    parts = [f"asr {p.name} ({', '.join(m.name for m in p.models)})" for p in info.asr or []]
    parts += [f"tts {p.name} ({len(p.voices)} voice{'s' * (len(p.voices) != 1)})" for p in info.tts or []]
    return ", ".join(parts) or "no programs"


async def check(uri: str, *, expect=(), timeout_s: float = 5.0) -> str:
    """One line about a healthy server; :class:`Unhealthy` otherwise.  ``expect``: program kinds
    that must be offered (empty: at least one of asr / tts).  ``timeout_s`` bounds the whole
    round trip: a server that accepts and never answers is unhealthy by then."""
    split_uri(uri)  # a bad URI is the caller's mistake (RkspeechError), not an unhealthy server
    start = time.monotonic()
    try:
        info = await asyncio.wait_for(describe(uri), timeout_s)
    except asyncio.TimeoutError:
        raise Unhealthy(f"{uri}: no info within {timeout_s:g} s of connecting (the server is wedged or overloaded)") \
            from None
    except OSError as exc:
        import os

        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise Unhealthy(f"{uri}: cannot connect ({why})") from None
    except Unhealthy as exc:
        raise Unhealthy(f"{uri}: {exc}") from None
    lost = missing(info, expect) if expect else ([] if missing(info, PROGRAMS) != list(PROGRAMS) else ["asr or tts"])
    if lost:
        raise Unhealthy(f"{uri}: no {' and no '.join(lost)} program in its info (it offers: {summary(info)})")
    return f"{uri}: {summary(info)}; info in {1000 * (time.monotonic() - start):.0f} ms"
