"""Transcript files: txt, srt, vtt and json, written atomically (``rkspeech.core.atomic``).

Formats follow openai-whisper's writers: SRT ``HH:MM:SS,mmm`` with 1-based cue numbers, WebVTT
``HH:MM:SS.mmm`` after a ``WEBVTT`` header, one segment per cue, text stripped; txt one segment
a line; json the :meth:`Transcription.to_dict` report (segments with words and the time split).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Output formats the CLI accepts; "all" writes each of them.
FORMATS = ("txt", "srt", "vtt", "json")


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def format_txt(segments) -> str:
    return "".join(s.text.strip() + "\n" for s in segments)


def format_srt(segments) -> str:
    cues = [f"{i}\n{_stamp(s.start, ',')} --> {_stamp(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(segments, 1)]
    return "\n".join(cues)


def format_vtt(segments) -> str:
    cues = [f"{_stamp(s.start, '.')} --> {_stamp(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def render(transcription, fmt: str, extra: dict | None = None) -> str:
    """The file content of ``transcription`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "txt":
        return format_txt(transcription.segments)
    if fmt == "srt":
        return format_srt(transcription.segments)
    if fmt == "vtt":
        return format_vtt(transcription.segments)
    if fmt == "json":
        return json.dumps({**(extra or {}), **transcription.to_dict()}, indent=2, ensure_ascii=False) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def write_outputs(transcription, out_dir: str | Path, stem: str, formats, extra: dict | None = None) -> list[Path]:
    """Write ``stem.<fmt>`` in ``out_dir`` for each format, each file atomically; returns the paths."""
    from rkspeech.core.atomic import write_text

    out_dir = Path(out_dir)  # write_text makes it (a place that cannot be written: one line, core.atomic)
    return [write_text(out_dir / f"{stem}.{fmt}", render(transcription, fmt, extra)) for fmt in formats]
