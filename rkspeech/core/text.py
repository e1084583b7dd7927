"""Text a user gives to speak: one check shared by the CLI, HTTP and Wyoming."""

from __future__ import annotations

from rkspeech.core.errors import RkspeechError


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be spoken as Unicode (a lone surrogate: what a shell passes for bytes
    that are not UTF-8, or a JSON ``"\\ud800"``), or None.  The tokenizer raises a TypeError on it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        return (f"is not valid Unicode: {'byte' if 0xDC80 <= ord(bad) <= 0xDCFF else 'lone surrogate'} "
                f"{hex(ord(bad) - 0xDC00) if 0xDC80 <= ord(bad) <= 0xDCFF else hex(ord(bad))} at character "
                f"{exc.start} (give UTF-8 text)")
    return None


def check_text(text, what: str = "the text") -> str:
    """``text`` when it is a non-empty, valid Unicode string; one-line RkspeechError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise RkspeechError(f"{what} is empty; give a sentence to speak")
    problem = unicode_problem(text)
    if problem:
        raise RkspeechError(f"{what} {problem}")
    return text
