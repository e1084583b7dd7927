"""One speech request: checked against the engine (text length, voice, language) before an engine
is leased; :meth:`SpeakRequest.open` runs in the engine's thread."""

from __future__ import annotations

from dataclasses import dataclass

from rkspeech.core.text import unicode_problem
from rkspeech.serve.errors import ServeError

class BadSpeechRequest(ServeError):
    status = 400
    code = "bad-request"


@dataclass(frozen=True)
class SpeakRequest:
    text: str
    speaker: str | None = None
    language: str | None = None
    instruct: str | None = None

    @classmethod
    def checked(cls, engine, text, *, speaker=None, language=None, instruct=None, max_chars: int) -> SpeakRequest:
        if not isinstance(text, str) or not text.strip():
            raise BadSpeechRequest("no text to speak")
        if len(text) > max_chars:
            raise BadSpeechRequest(f"the text has {len(text)} characters, the server's limit is {max_chars}")
        for what, value in (("the text", text), ("the instructions", instruct)):
            problem = unicode_problem(value) if isinstance(value, str) else None
            if problem:
                raise BadSpeechRequest(f"{what} {problem}")
        speakers = list(engine.speakers or [])
        if speaker is not None and speakers and speaker not in speakers and speaker != "default":
            raise BadSpeechRequest(f"unknown voice {speaker!r}; this server has: {', '.join(speakers)}")
        if speaker == "default":
            # the engine's first voice: a custom-voice model has no voice without a speaker
            # (None failed there: "needs a speaker"); a base model has none to name
            speaker = speakers[0] if speakers else None
        languages = list(engine.languages or [])
        if language is not None and languages and language not in languages:
            raise BadSpeechRequest(f"unknown language {language!r}; this server speaks: {', '.join(languages)}")
        if instruct is not None and len(instruct) > max_chars:
            raise BadSpeechRequest(f"the instructions have {len(instruct)} characters, the limit is {max_chars}")
        return cls(text, speaker, language, instruct)

    def open(self, engine):
        """In the engine's thread: the engine's chunk iterator."""
        return engine.stream(self.text, speaker=self.speaker, language=self.language, instruct=self.instruct)
