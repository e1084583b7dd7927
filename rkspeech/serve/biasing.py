"""Biasing a transcription toward the words a home uses: faster-whisper's ``hotwords`` (phrases
put in the decoder's prompt; with ``prefix`` unset, as here) and ``initial_prompt``.

Sources, joined with ", " into one ``hotwords`` string: ``--asr-hotwords-file`` (one phrase per
line, blank lines and ``#`` comments skipped; re-read when its modification time or size
changes, checked at each request: a Home Assistant install can rewrite it with its entity
names while the server runs), then the request's own (HTTP form field ``hotwords``, Wyoming
``transcribe``'s ``transcript_names`` and ``transcript_terms``, wyoming 1.10).  What a request
adds, and its ``prompt``, are bounded by :data:`MAX_BIAS_CHARS` (faster-whisper cuts the prompt
to half of Whisper's 448-token context anyway).
"""

from __future__ import annotations

import logging
import os
import threading

from rkspeech.serve.errors import ServeError

MAX_BIAS_CHARS = 2000
log = logging.getLogger("rkspeech.serve")

_lock = threading.Lock()
_cache: dict[str, tuple[tuple[int, int], tuple[str, ...]]] = {}



def read_phrases(path: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as f:
        lines = (line.strip() for line in f)
        return tuple(line for line in lines if line and not line.startswith("#"))


def file_phrases(path: str | None) -> tuple[str, ...]:
    """The phrases of ``path``, re-read when it changed; the last good ones when it cannot be read
    now (a rewrite in progress, a removed file: logged)."""
    if not path:
        return ()
    try:
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size)
        with _lock:
            cached = _cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        phrases = read_phrases(path)
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("hotwords file %s: %s; keeping the last phrases read", path, exc)
        with _lock:
            return _cache.get(path, ((0, 0), ()))[1]
    with _lock:
        _cache[path] = (key, phrases)
    log.info("hotwords file %s: %d phrase(s)", path, len(phrases))
    return phrases


def _text(value, what: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ServeError(f"{what} must be text or a list of text")
        value = ", ".join(v.strip() for v in value if v.strip())
    if not isinstance(value, str):
        raise ServeError(f"{what} must be text or a list of text")
    if len(value) > MAX_BIAS_CHARS:
        raise ServeError(f"{what} has {len(value)} characters, the limit is {MAX_BIAS_CHARS}")
    return value.strip() or None


def hotwords(requested, file: str | None) -> str | None:
    """The ``hotwords`` string for one request: the file's phrases, then the request's."""
    mine = _text(requested, "hotwords")
    phrases = list(file_phrases(file)) + ([mine] if mine else [])
    return ", ".join(phrases) or None


def prompt(value) -> str | None:
    """A request's ``prompt`` (faster-whisper's ``initial_prompt``), checked."""
    return _text(value, "prompt")
