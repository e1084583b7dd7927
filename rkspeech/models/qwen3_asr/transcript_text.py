"""From the ids Qwen3-ASR generates to ``(language, text)``, as the official package does it.

The model answers ``language English<asr_text>the words`` (or only the words when the prompt
forced a language; ``language None<asr_text>`` for silence).  qwen-asr 0.0.6 decodes the new ids
with ``batch_decode(skip_special_tokens=True, clean_up_tokenization_spaces=False)``, parses them with
``parse_asr_output`` (which first collapses runaway repetitions: ``detect_and_fix_repetitions``),
and joins the chunks of a long recording (``merge_languages``, texts concatenated).  The functions
here reproduce each, quirks included (tested against the official functions on random strings):

* a run of more than ``threshold`` (20) equal characters becomes one character (a run of exactly
  20 is left to the next rule, which takes it to one unless it starts in the last 40 characters);
* then the first place (from the left, starting no later than 40 characters before the end) where
  a pattern of 1 to 20 characters repeats ``threshold`` times in a row is cut to one copy of the
  pattern, its further repeats dropped, and the search goes on after them;
* ``<asr_text>`` splits meta from text; "language none" anywhere in the meta means no language;
  else the first meta line starting with ``language `` names it, spelt as the official spells
  names (first letter upper) but not checked against the list.

The official cuts repeats recursively (Python's recursion limit stops it after ~1000 repeated
patterns in one string); this loops, with the same result where the official returns one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby

from rkspeech.models.qwen3_asr.languages import official_name

ASR_TEXT_TAG = "<asr_text>"
LANGUAGE_PREFIX = "language "
#: the official ``detect_and_fix_repetitions`` threshold and longest pattern
REPEAT_THRESHOLD = 20
MAX_PATTERN = 20


def _collapse_runs(text: str, threshold: int) -> str:
    return "".join(ch if len(run) > threshold else run
                   for ch, run in ((ch, "".join(g)) for ch, g in groupby(text)))


def _first_repeat(text: str, start: int, threshold: int, max_pattern: int) -> tuple[int, int] | None:
    """The first ``(position, pattern length)`` at or after ``start`` where a pattern repeats
    ``threshold`` times; positions stop ``2 * threshold`` characters before the end, as there."""
    n = len(text)
    for pos in range(start, n - 2 * threshold + 1):
        for size in range(1, max_pattern + 1):
            span = size * threshold
            if pos + span > n:
                break
            if text[pos:pos + span] == text[pos:pos + size] * threshold:
                return pos, size
    return None


def fix_repetitions(text: str, threshold: int = REPEAT_THRESHOLD, max_pattern: int = MAX_PATTERN) -> str:
    """The official ``detect_and_fix_repetitions``: runaway character runs, then repeated patterns."""
    text = _collapse_runs(text, threshold)
    pieces, done = [], 0
    while len(text) - done >= 2 * threshold:
        hit = _first_repeat(text, done, threshold, max_pattern)
        if hit is None:
            break
        pos, size = hit
        pattern = text[pos:pos + size]
        end = pos + size * threshold
        while text.startswith(pattern, end) and end + size <= len(text):
            end += size
        pieces.append(text[done:pos + size])
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def parse_output(raw: str | None, forced_language: str | None) -> tuple[str, str]:
    """The decoded answer -> ``(language, text)``, the official ``parse_asr_output``.

    ``forced_language``: the canonical name the prompt forced (the answer is then all text), or None."""
    if raw is None:
        return "", ""
    answer = str(raw).strip()
    if not answer:
        return "", ""
    answer = fix_repetitions(answer)
    if forced_language:
        return forced_language, answer
    meta, tag, text = answer.partition(ASR_TEXT_TAG)
    if not tag:
        return "", answer.strip()
    text = text.strip()
    if "language none" in meta.lower():
        return "", text
    for line in meta.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.lower().startswith(LANGUAGE_PREFIX):
            value = line[len(LANGUAGE_PREFIX):].strip()
            return (official_name(value) if value else ""), text
    return "", text


def merge_languages(languages: Iterable[str | None]) -> str:
    """The chunks' languages -> ``"Chinese,English"``: blanks dropped, a repeat of the previous kept one dropped."""
    kept: list[str] = []
    for lang in languages:
        lang = (lang or "").strip()
        if lang and (not kept or kept[-1] != lang):
            kept.append(lang)
    return ",".join(kept)


def decode_text(tokenizer, ids: Sequence[int]) -> str:
    """Generated ids -> text, special tokens skipped (``<asr_text>`` is not special and stays), no
    clean-up of tokenization spaces: the official ``batch_decode`` of one sequence.  ``tokenizer``
    is a ``qwen3_tts.text_tokenizer.TextTokenizer`` of the model root."""
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
