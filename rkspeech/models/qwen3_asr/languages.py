"""The languages Qwen3-ASR can be told to transcribe in, by name or by ISO code.

``LANGUAGES`` is the official list (qwen-asr 0.0.6 ``SUPPORTED_LANGUAGES``, same order).  The
official accepts a name in any letter case (``normalize_language_name``: first letter upper, the
rest lower) and refuses anything else; Home Assistant and Wyoming send ISO codes, so
:func:`normalize_language` also takes, in any case and with a region or script after ``-`` or
``_`` (``en-US``, ``pt_BR``, ``zh-Hans``):

* ISO 639-1 codes: zh en ar de fr es pt id it ko ru th vi ja tr hi ms nl sv da fi pl cs fa el ro
  hu mk, and tl (Tagalog) for Filipino;
* ISO 639-2/T and 639-3 codes: zho cmn eng yue ara deu fra spa por ind ita kor rus tha vie jpn tur
  hin msa zsm nld swe dan fin pol ces fil tgl fas ell ron hun mkd;
* one region changes the language: Chinese of Hong Kong or Macau (``zh-HK``, ``zh-MO``,
  ``zh-Hant-HK``) is taken as Cantonese, the speech there; every other ``zh-*`` is Chinese.

``tests/models/test_qwen3_asr_host.py`` checks the names against the official list and functions.
"""

from __future__ import annotations

from rkspeech.core.errors import RkspeechError

#: the official list, in its order
LANGUAGES: tuple[str, ...] = (
    "Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese", "Indonesian",
    "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish", "Hindi", "Malay", "Dutch",
    "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino", "Persian", "Greek", "Romanian", "Hungarian",
    "Macedonian",
)

_CODES: dict[str, tuple[str, ...]] = {
    "Chinese": ("zh", "zho", "cmn"), "English": ("en", "eng"), "Cantonese": ("yue",), "Arabic": ("ar", "ara"),
    "German": ("de", "deu"), "French": ("fr", "fra"), "Spanish": ("es", "spa"), "Portuguese": ("pt", "por"),
    "Indonesian": ("id", "ind"), "Italian": ("it", "ita"), "Korean": ("ko", "kor"), "Russian": ("ru", "rus"),
    "Thai": ("th", "tha"), "Vietnamese": ("vi", "vie"), "Japanese": ("ja", "jpn"), "Turkish": ("tr", "tur"),
    "Hindi": ("hi", "hin"), "Malay": ("ms", "msa", "zsm"), "Dutch": ("nl", "nld"), "Swedish": ("sv", "swe"),
    "Danish": ("da", "dan"), "Finnish": ("fi", "fin"), "Polish": ("pl", "pol"), "Czech": ("cs", "ces"),
    "Filipino": ("fil", "tl", "tgl"), "Persian": ("fa", "fas"), "Greek": ("el", "ell"), "Romanian": ("ro", "ron"),
    "Hungarian": ("hu", "hun"), "Macedonian": ("mk", "mkd"),
}
#: canonical name -> its ISO code (639-1 where there is one: ``yue`` for Cantonese, ``fil`` for Filipino)
CODES: dict[str, str] = {name: codes[0] for name, codes in _CODES.items()}
#: ISO code (lower case) -> canonical name
ISO_CODES: dict[str, str] = {code: name for name, codes in _CODES.items() for code in codes}
_CANTONESE_REGIONS = ("hk", "mo")


def official_name(name: str) -> str:
    """The official spelling of a name: first letter upper, the rest lower (``'cHINese'`` -> ``'Chinese'``)."""
    s = str(name).strip()
    return s[:1].upper() + s[1:].lower()


def normalize_language(name: str | None) -> str | None:
    """A language name or ISO code -> its canonical name; ``None`` or blank -> ``None`` (detect the
    language).  Anything else is a one-line :class:`RkspeechError` that lists what is supported."""
    if name is None or not str(name).strip():
        return None
    text = str(name).strip()
    canonical = official_name(text)
    if canonical in LANGUAGES:
        return canonical
    tag = text.lower().replace("_", "-")
    primary, _, rest = tag.partition("-")
    if primary == "zh" and rest.split("-")[-1] in _CANTONESE_REGIONS:
        return "Cantonese"
    if primary in ISO_CODES:
        return ISO_CODES[primary]
    raise RkspeechError(f"unsupported language {text!r}; supported: {', '.join(LANGUAGES)} "
                        "(or an ISO code such as en, zh, de, yue)")
