"""One transcription request: the faster-whisper call ``rkspeech transcribe`` makes, and the
response bodies.

:meth:`TranscribeRequest.options` builds the same keyword options as ``rkspeech.cli.transcribe``
(``beam_size``, ``language``, ``task``, ``word_timestamps``, ``vad_filter``, ``initial_prompt``;
and ``hotwords``, which the CLI does not set: :mod:`rkspeech.serve.biasing`) with the same
defaults (beam 5, language detected, no VAD, no word times, sampler seed 0), and the call is
:func:`rkspeech.runtime.whisper.transcript.transcribe_audio`; SRT and VTT bodies are
:func:`rkspeech.runtime.whisper.subtitles.render`, the writer of the CLI's files.  tests/serve/test_serve.py
checks a server response against the CLI's output on the same file.
"""

from __future__ import annotations

from dataclasses import dataclass

from rkspeech.serve.errors import ServeError

#: OpenAI ``response_format`` values for transcriptions.
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("segment", "word")


class BadRequest(ServeError):
    status = 400
    code = "bad-request"


@dataclass(frozen=True)
class TranscribeRequest:
    language: str | None = None
    prompt: str | None = None
    hotwords: str | None = None
    word_timestamps: bool = False
    beam_size: int = 5
    vad: bool = False
    task: str = "transcribe"
    seed: int = 0

    def logged(self) -> str:
        """The request log's line: the options that shape the decoding."""
        return (f"language={self.language or 'auto'} beam_size={self.beam_size} vad={self.vad} "
                f"prompt={self.prompt!r} hotwords={self.hotwords!r}")

    def options(self) -> dict:
        return {"beam_size": self.beam_size, "language": self.language, "task": self.task,
                "word_timestamps": self.word_timestamps, "vad_filter": self.vad, "initial_prompt": self.prompt,
                "hotwords": self.hotwords}


def check_language(model, language: str | None) -> str | None:
    """``language`` (None / "" / "auto" = detect) when ``model`` knows it, else :class:`BadRequest`.
    A model with its own ``check_language`` (Qwen3-ASR: codes and names, ``en-US``) answers itself."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.whisper.checks import check_language as check

    own = getattr(model, "check_language", None)
    try:
        if own is not None:
            return own(language)
        return check(language, multilingual=model_languages(model) != ["en"])
    except RkspeechError as exc:
        raise BadRequest(str(exc)) from None


def check_request(model, request: TranscribeRequest) -> TranscribeRequest:
    """``request`` when ``model`` can do what it asks, else :class:`BadRequest` before it is queued
    (a model's ``check_options``: Qwen3-ASR has no word timestamps, VAD or translation)."""
    from rkspeech.core.errors import RkspeechError

    own = getattr(model, "check_options", None)
    if own is not None:
        try:
            own(word_timestamps=request.word_timestamps, vad_filter=request.vad, task=request.task)
        except RkspeechError as exc:
            raise BadRequest(str(exc)) from None
    return request


def model_languages(model) -> list[str]:
    """Language codes the ``model`` transcribes: faster-whisper's ``supported_languages`` (["en"]
    for an .en model; Qwen3-ASR's 30), else from its multilingual flag."""
    listed = getattr(model, "supported_languages", None)
    if listed is not None:
        return list(listed)
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    multilingual = getattr(getattr(model, "model", None), "is_multilingual", True)
    return list(_LANGUAGE_CODES) if multilingual else ["en"]


def run(model, audio, request: TranscribeRequest):
    """In the engine's thread: the transcription (``Transcription``).

    CTranslate2's sampler is seeded with ``request.seed`` first, as ``rkspeech transcribe`` does
    (``--seed``, default 0): the temperature fallback samples, so without the same seed a window
    that falls back could decode differently from the CLI.  The seed is process-wide: with
    several engines transcribing at once, fallback windows are not reproducible run to run."""
    from rkspeech.runtime.whisper.transcript import transcribe_audio

    return transcribe_audio(model, audio, seed=request.seed, **request.options())


def render(result, response_format: str, *, words: bool = False) -> tuple[str | dict, str]:
    """(body, media type) in OpenAI's shapes: ``json`` {"text"}, ``text`` the text and a newline,
    ``srt`` / ``vtt`` the CLI's subtitle files, ``verbose_json`` task, language, duration, text,
    segments (and words with ``words``)."""
    from rkspeech.runtime.whisper.subtitles import render as render_file

    text = result.text.strip()
    if response_format == "json":
        return {"text": text, "usage": {"type": "duration", "seconds": round(result.duration_s, 3)}}, "json"
    if response_format == "text":
        return text + "\n", "text/plain; charset=utf-8"
    if response_format in ("srt", "vtt"):
        return render_file(result, response_format), "text/plain; charset=utf-8"
    if response_format == "verbose_json":
        body = {"task": "transcribe", "language": result.language, "duration": round(result.duration_s, 3),
                "text": text, "segments": [_segment(s) for s in result.segments]}
        if words:
            body["words"] = [{"word": w.word, "start": w.start, "end": w.end} for w in result.words()]
        return body, "json"
    raise BadRequest(f"response_format {response_format!r} is not one of {', '.join(RESPONSE_FORMATS)}")


def _segment(s) -> dict:
    return {"id": s.id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
            "temperature": s.temperature, "avg_logprob": s.avg_logprob,
            "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob}
