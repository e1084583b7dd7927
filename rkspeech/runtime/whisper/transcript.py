"""One transcription as data (segments, words, info, the time split) and the comparison of two.

:func:`transcribe_audio` runs any faster-whisper model (ours, stock, or a
``BatchedInferencePipeline`` over either) to the end of its segment generator and records
``total_s``; with :class:`rkspeech.runtime.whisper.model.WhisperModel` also ``encoder_s`` (inside
``encode``), ``decoder_s`` (inside CTranslate2's generate / align / detect_language) and
``host_s`` (the rest: features, VAD, faster-whisper's loop).

:func:`iter_transcription` is the same run yielding each segment as it is decoded (the server's
streamed transcripts).

:func:`compare_transcriptions` says whether two transcriptions are identical in text, segment
boundaries and word timings, and if not, how they differ (faster-whisper rounds times to 10 ms
for segments and words, so "identical" is exact equality of those numbers).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

#: One word timing step: Whisper's timestamp tokens and word alignment are 20 ms apart.
TIME_STEP_S = 0.02


@dataclass
class Transcription:
    segments: list  # faster_whisper Segment dataclasses (with .words when word_timestamps)
    language: str
    language_probability: float
    duration_s: float
    timing: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    @property
    def tokens(self) -> list[int]:
        return [t for s in self.segments for t in s.tokens]

    def words(self) -> list:
        return [w for s in self.segments for w in (s.words or [])]

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "language": self.language,
            "language_probability": round(float(self.language_probability), 4),
            "duration_s": round(float(self.duration_s), 3),
            "segments": [_segment_dict(s) for s in self.segments],
            "timing": {k: round(v, 4) for k, v in self.timing.items()},
        }


def _segment_dict(segment) -> dict:
    return dataclasses.asdict(segment)


def transcribe_audio(model, audio, *, batch_size: int | None = None, seed: int | None = None,
                     progress: str | None = None, **options) -> Transcription:
    """Run ``model.transcribe(audio, **options)`` to the end; ``model`` may be a
    ``BatchedInferencePipeline`` (then ``batch_size`` is passed on).  The timing split is read
    from the underlying rkspeech model when there is one.

    ``seed`` seeds CTranslate2's random generator first.  The temperature fallback (a window
    whose compression ratio or log probability fails its threshold is decoded again at 0.2,
    0.4, ... 1.0) *samples*; two runs compared without the same seed draw different samples
    (measured on base, German speech translated greedily: fallback to 1.0, two different texts
    from the same encoder output), so comparisons pass the same seed to both.

    ``progress``: a description for a line every few seconds with the position reached in the
    audio (``core.progress.periodic``; a 2 h file printed nothing for its whole run)."""
    from rkspeech.core.progress import periodic
    from rkspeech.models.whisper.window import SAMPLE_RATE

    tick = periodic(progress) if progress else None
    duration = len(audio) / SAMPLE_RATE if hasattr(audio, "__len__") else None
    for item in iter_transcription(model, audio, batch_size=batch_size, seed=seed, **options):
        if tick is not None and not isinstance(item, Transcription):
            tick(f"{item.end:.0f} s" + (f" of {duration:.0f} s" if duration else "") + " of audio transcribed")
    return item


def iter_transcription(model, audio, *, batch_size: int | None = None, seed: int | None = None, **options):
    """:func:`transcribe_audio` as it decodes: each faster-whisper segment when it is decoded, then
    the whole :class:`Transcription` (the same object ``transcribe_audio`` returns: one code path,
    so a streamed transcript is the plain one)."""
    owner = model if hasattr(model, "reset_timing") else getattr(model, "model", None)
    timed = owner.timing if hasattr(owner, "reset_timing") else None
    if timed is not None:
        owner.reset_timing()
    if batch_size:
        options["batch_size"] = batch_size
    if seed is not None:
        import ctranslate2

        ctranslate2.set_random_seed(seed)
    start = time.perf_counter()
    generator, info = model.transcribe(audio, **options)
    segments = []
    for segment in generator:
        segments.append(segment)
        yield segment
    total = time.perf_counter() - start
    timing = {"total_s": total}
    if timed is not None:
        enc, dec = timed["encoder_s"], timed["decoder_s"]
        timing = {"host_s": total - enc - dec, "encoder_s": enc, "decoder_s": dec, "total_s": total}
    yield Transcription(segments, info.language, info.language_probability, info.duration, timing)


def diff_text(reference: str, test: str) -> str | None:
    """None when identical; else a short word-level diff (``ref=`` stock, ``ours=`` offloaded)."""
    if reference == test:
        return None
    import difflib

    a, b = reference.split(), test.split()
    lines = [f"{op}: ref={' '.join(a[i1:i2])!r} ours={' '.join(b[j1:j2])!r}"
             for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes() if op != "equal"]
    return "; ".join(lines) or f"whitespace differs: ref={reference!r} ours={test!r}"


def compare_transcriptions(reference: Transcription, test: Transcription) -> dict:
    """``{"identical", "text_diff", "segments": {...}, "words": {...}}``.

    Segments: count in each, boundaries that differ (index, ref (start, end), ours (start, end)).
    Words: count in each, how many moved (same word, other start or end), by how many 20 ms steps
    at most, and how many moved by exactly one step (what fp16 on the NPU may do)."""
    text_diff = diff_text(reference.text, test.text)
    seg_moved = [
        {"index": i, "ref": [a.start, a.end], "ours": [b.start, b.end]}
        for i, (a, b) in enumerate(zip(reference.segments, test.segments))
        if (a.start, a.end) != (b.start, b.end)
    ]
    ref_words, test_words = reference.words(), test.words()
    moved, max_shift, one_step = [], 0.0, 0
    for i, (a, b) in enumerate(zip(ref_words, test_words)):
        # plain floats: word times may be numpy scalars, and this dict goes to JSON (--compare --json)
        shift = float(max(abs(a.start - b.start), abs(a.end - b.end)))
        if shift > 0 or a.word != b.word:
            moved.append({"index": i, "word": b.word, "ref": [a.start, a.end], "ours": [b.start, b.end]})
            max_shift = max(max_shift, shift)
            one_step += int(abs(shift - TIME_STEP_S) < 1e-6)
    segments = {"ref": len(reference.segments), "ours": len(test.segments), "moved": seg_moved[:20],
                "moved_count": len(seg_moved)}
    words = {"ref": len(ref_words), "ours": len(test_words), "moved_count": len(moved),
             "moved_one_step": one_step, "max_shift_s": round(max_shift, 3), "moved": moved[:20]}
    identical = (text_diff is None and not seg_moved and not moved
                 and segments["ref"] == segments["ours"] and words["ref"] == words["ours"])
    return {"identical": identical, "tokens_identical": reference.tokens == test.tokens,
            "text_diff": text_diff, "segments": segments, "words": words}


def describe_difference(cmp: dict) -> str:
    """One short paragraph for the terminal."""
    if cmp["identical"]:
        return "identical (text, segment boundaries, word timings)"
    parts = []
    if cmp["text_diff"]:
        parts.append(f"text: {cmp['text_diff']}")
    s, w = cmp["segments"], cmp["words"]
    if s["ref"] != s["ours"] or s["moved_count"]:
        parts.append(f"segments: {s['ours']} vs {s['ref']} in stock, {s['moved_count']} with other boundaries"
                     + (f" (first: #{s['moved'][0]['index']} ref {s['moved'][0]['ref']} ours "
                        f"{s['moved'][0]['ours']})" if s["moved"] else ""))
    if w["ref"] != w["ours"] or w["moved_count"]:
        parts.append(f"words: {w['ours']} vs {w['ref']} in stock, {w['moved_count']} moved "
                     f"({w['moved_one_step']} by one 20 ms step, max {w['max_shift_s']} s)")
    return "DIFFERS: " + " | ".join(parts)
