"""A Qwen3-ASR plan behind faster-whisper's call, so the server takes it where it takes Whisper.

The server's transcription path (``serve.transcription``, ``serve.transcript_stream``,
``runtime.whisper.transcript.iter_transcription``: the request's options, the streamed deltas,
the response bodies, the time split in the metrics) is written to faster-whisper's
``model.transcribe(audio, **options) -> (segments, info)`` and ``model.supported_languages``.
:class:`Qwen3ASRWhisperAPI` answers that call with an :class:`ASRTranscriber`; one Qwen3-ASR
transcription becomes:

* one :class:`Segment` per piece the official cuts the audio into (``iter_pieces``: a command is
  one segment, an hour-long file one per <= 1200 s piece), its start and end the piece's, so the
  streamed deltas and srt / vtt bodies need nothing of their own;
* ``language`` forced by an ISO code (what Wyoming and the OpenAI API send) or a name; the
  detected language reported as its ISO code, as faster-whisper reports one (``zh,en`` when the
  pieces differ);
* ``initial_prompt`` (OpenAI's ``prompt``) and ``hotwords`` (the server's phrases) joined into
  the official free-text ``context``, which is how Qwen3-ASR is biased;
* greedy decoding as the official does: ``beam_size`` and the temperature schedule do not apply
  and are ignored; word timestamps (Qwen3-ASR's separate forced aligner, which no plan carries),
  VAD and translation are refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.qwen3_asr.transcriber import DEFAULT_MAX_NEW_TOKENS, ASRTranscriber


@dataclass
class Segment:
    """faster-whisper's ``Segment`` fields (the server renders them); Qwen3-ASR fills the text,
    times and tokens: it has no log probabilities, compression ratio or no-speech probability."""
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0
    words: list | None = None


@dataclass
class Info:
    """faster-whisper's ``TranscriptionInfo``, the fields the server reads."""
    language: str
    language_probability: float
    duration: float
    all_language_probs: list = field(default_factory=list)


def language_code(names: str) -> str:
    """``'English'`` -> ``'en'``; ``'Chinese,English'`` -> ``'zh,en'``; ``''`` (nothing heard) -> ``''``."""
    from rkspeech.models.qwen3_asr.languages import CODES

    return ",".join(CODES.get(n, n) for n in names.split(",") if n)


class Qwen3ASRWhisperAPI:
    """``Qwen3ASRWhisperAPI(plan_path, backend=..., threads=..., core_mask=...)``; ``close()``."""

    #: the Wyoming ``asr`` program this engine is (``serve.wyoming_info``)
    program = ("rkspeech-qwen3-asr", "Qwen3-ASR with its audio encoder offloaded", "Qwen3-ASR",
               "Qwen3-ASR (Qwen)", "https://github.com/QwenLM/Qwen3-ASR")

    def __init__(self, plan_path, *, backend: str = "ort", threads: int | None = None, core_mask: str | None = None,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS):
        self.asr = ASRTranscriber(plan_path, backend=backend, threads=threads, core_mask=core_mask)
        self.max_new_tokens = max_new_tokens

    @property
    def supported_languages(self) -> list[str]:
        """ISO 639-1 codes (639-3 where there is none: ``yue``, ``fil``), the official list's order."""
        from rkspeech.models.qwen3_asr.languages import CODES, LANGUAGES

        return [CODES[name] for name in LANGUAGES]

    def check_language(self, language: str | None) -> str | None:
        """A code or name (``en``, ``en-US``, ``English``) as its code; None / "" / ``auto``: detect."""
        from rkspeech.models.qwen3_asr.languages import CODES, normalize_language

        if language in (None, "", "auto"):
            return None
        return CODES[normalize_language(language)]

    @staticmethod
    def check_options(*, word_timestamps: bool = False, vad_filter: bool = False, task: str = "transcribe") -> None:
        """One line for what Qwen3-ASR cannot do (the server asks before it queues a request)."""
        if word_timestamps:
            raise RkspeechError("Qwen3-ASR gives no word timestamps (they come from its separate forced aligner, "
                                "which a plan does not carry)")
        if vad_filter:
            raise RkspeechError("Qwen3-ASR takes the whole audio; VAD filtering is a Whisper option")
        if task != "transcribe":
            raise RkspeechError(f"Qwen3-ASR transcribes; task {task!r} is a Whisper option")

    @property
    def timing(self) -> dict:
        return self.asr.timing

    def reset_timing(self) -> None:
        self.asr.reset_timing()

    def transcribe(self, audio, *, language: str | None = None, initial_prompt: str | None = None,
                   hotwords: str | None = None, word_timestamps: bool = False, vad_filter: bool = False,
                   task: str = "transcribe", **_ignored):
        """``(segments, info)`` as faster-whisper returns them: the segments an iterator that
        transcribes piece by piece as it is consumed."""
        import numpy as np

        self.check_options(word_timestamps=word_timestamps, vad_filter=vad_filter, task=task)
        audio = np.asarray(audio, dtype=np.float32)
        context = _context(initial_prompt, hotwords)
        forced = self.check_language(language)
        pieces = self.asr.iter_pieces(audio, context=context, language=forced, max_new_tokens=self.max_new_tokens)
        first = next(pieces)  # the language of the first piece is the info's, as faster-whisper's first window
        info = Info(language_code(first.language), 1.0, audio.size / 16000)

        def segments():
            yield _segment(0, first)
            for i, piece in enumerate(pieces, start=1):
                yield _segment(i, piece)
        return segments(), info

    # -- partial transcripts while audio arrives (runtime.qwen3_asr.partials) -------------------

    def partial_state(self, *, language: str | None = None, initial_prompt: str | None = None,
                      hotwords: str | None = None):
        """A streaming state for one utterance, with the request's language and context as :meth:`transcribe` takes them."""
        from rkspeech.models.qwen3_asr.languages import normalize_language
        from rkspeech.runtime.qwen3_asr.partials import PartialState

        return PartialState(context=_context(initial_prompt, hotwords), language=normalize_language(language))

    def partial(self, state, audio):
        """One step of the official streaming mode over ``audio`` (all of it so far): ``state``, updated."""
        from rkspeech.runtime.qwen3_asr.partials import partial_step

        return partial_step(self.asr, state, audio, max_new_tokens=self.max_new_tokens)

    def close(self) -> None:
        self.asr.close()


def _context(initial_prompt: str | None, hotwords: str | None) -> str:
    """OpenAI's ``prompt`` and the server's phrases as the official's one free-text context."""
    return " ".join(t.strip() for t in (initial_prompt, hotwords) if t and t.strip())


def _segment(i: int, piece) -> Segment:
    return Segment(id=i, seek=int(round(piece.offset_s * 100)), start=round(piece.offset_s, 3),
                   end=round(piece.offset_s + piece.seconds, 3), text=piece.text, tokens=list(piece.token_ids))
