"""A speech model's language names (Qwen3-TTS: ``english``, ``german``, ...; ``TTSConfig.languages``)
as the ISO 639-1 codes Wyoming clients match, and back.

Home Assistant's Wyoming TTS entity takes each voice's ``languages`` as they are and offers the
service to a pipeline only in a language listed (``en``); with the model's names it found none
(seen in wyoming-bench's ``info`` of ``rkspeech serve``, docs/serve.md)."""

from __future__ import annotations

#: Qwen3-TTS's language names -> ISO 639-1 (the ten languages of its model card)
CODES = {"chinese": "zh", "english": "en", "german": "de", "french": "fr", "italian": "it", "japanese": "ja",
         "korean": "ko", "portuguese": "pt", "russian": "ru", "spanish": "es"}
#: a model's "let the model choose": no language to match a pipeline against
AUTO = "auto"


def advertised(languages) -> list[str]:
    """The codes a Wyoming voice lists for the model's ``languages``: a known name as its code, an
    unknown one as it is, ``auto`` left out unless it is all there is."""
    codes = [CODES.get(name, name) for name in languages if name != AUTO]
    return codes or list(languages)


def model_language(requested: str | None, languages) -> str | None:
    """A request's language -- a code (``en``, ``en_US``, ``en-GB``) or the model's own name -- as the
    model's name; a language the model does not speak is returned as it is (the request's check
    refuses it with the list)."""
    if requested is None or requested in languages:
        return requested
    code = requested.replace("-", "_").split("_")[0].lower()
    for name in languages:
        if CODES.get(name) == code:
            return name
    return requested
