"""The prompt ids of one Qwen3-ASR request, as the official package builds them (no jinja, no transformers).

qwen-asr 0.0.6 renders the chat template for ``[system: context, user: one audio]`` with the
generation prompt (``_build_text_prompt``), appends ``language {Language}<asr_text>`` when the
language is forced, replaces the one ``<|audio_pad|>`` by as many as the encoder gives tokens
(``encoder_tokens(frames)``) and tokenizes the string.  For this one message shape the template
(the published one as third-party code quotes it, and the one ``synthetic_asr`` writes) renders::

    <|im_start|>system\\n{context}<|im_end|>\\n<|im_start|>user\\n<|audio_start|><|audio_pad|>...<|audio_end|><|im_end|>\\n<|im_start|>assistant\\n

(the system turn is there also for an empty context).  :class:`PromptBuilder` writes that string
and encodes it once with the root's tokenizer through ``tokenizers``
(``qwen3_tts.text_tokenizer.TextTokenizer``): text that looks like a special token in the context
becomes that token, as in the official.  The ids equal the official processor's on test roots with
either template (``tests/models/test_qwen3_asr_host.py``).  A context holding ``<|audio_pad|>`` is
refused (the official's processor fails on it: it expands every pad, one audio's worth).

The split regex: the official loads the processor with ``fix_mistral_regex=True``.  transformers
4.57 (qwen-asr pins 4.57.6) then replaces the Qwen2 split regex by the Mistral one
(:data:`MISTRAL_SPLIT`: it cuts CamelCase words apart and keeps ``/`` with the punctuation before
it) when the BPE vocabulary has more than 100,000 entries and the root's ``config.json``
says nothing else: no ``transformers_version``, or one above 4.57.2 and below 5.0.0, or a Mistral
``model_type`` (``_patch_mistral_regex``).  The published Qwen3-ASR roots make transformers print
the warning that goes with that case (QwenLM/Qwen3-ASR issue 20), so the official transformers
backend splits the context that way; :func:`official_split` repeats the rule.  Only the context is
touched: the template's own words ("system", "user", "assistant", "language X") split the same
under both regexes.  (The official vLLM backend passes the prompt as text to vLLM, whose tokenizer
is loaded without the flag: there the Qwen2 regex stays.)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>"
ASR_TEXT = "<asr_text>"
#: what a Qwen3-ASR chat template holds (a chat turn and the audio's place); a root whose template
#: lacks them is not Qwen3-ASR's, and the prompt written here would not be its rendering
TEMPLATE_PIECES = (IM_START, AUDIO_START + AUDIO_PAD + AUDIO_END)
#: transformers 4.57's ``fix_mistral_regex`` split (``tokenization_utils_base._patch_mistral_regex``)
MISTRAL_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
MISTRAL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")
#: transformers patches only tokenizers with more BPE entries than this
PATCHED_VOCAB = 100000


def _version(text: str) -> tuple:
    """A PEP 440 version as far as ordering against 4.57.2 and 5.0.0 goes: release, then -1 for a
    pre-release or dev build, +1 for a post release, 0 else."""
    m = re.fullmatch(r"\s*v?(\d+(?:\.\d+)*)(.*?)\s*", str(text))
    if not m:
        raise RkspeechError(f"config.json: transformers_version {text!r} is not a version")
    release = tuple(int(x) for x in m.group(1).split("."))
    release = release + (0,) * (3 - len(release))
    rest = m.group(2).lower().lstrip(".-_")
    if not rest or rest.startswith("+"):
        stage = 0
    elif rest.startswith(("post", "rev")) or (rest.startswith("r") and not rest.startswith("rc")):
        stage = 1
    else:  # a, b, c, rc, alpha, beta, pre, preview, dev
        stage = -1
    return release, stage


def official_split(root: str | Path, vocab_size: int) -> str | None:
    """The split regex the official loader ends up with for ``root``: :data:`MISTRAL_SPLIT`, or
    None when it keeps the tokenizer's own (see the module docstring)."""
    if vocab_size <= PATCHED_VOCAB:
        return None
    path = Path(root) / "config.json"
    if not path.is_file():
        return None
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RkspeechError(f"{path}: not readable JSON ({exc})") from None
    version, model_type = cfg.get("transformers_version"), cfg.get("model_type")
    if version and _version(version) <= ((4, 57, 2), 0):
        if model_type is not None and model_type not in MISTRAL_TYPES:
            return None
    elif version and _version(version) >= ((5, 0, 0), 0):
        return None
    return MISTRAL_SPLIT


def chat_template(root: str | Path) -> str:
    """The root's chat template (``chat_template.jinja``, ``chat_template.json`` or
    ``tokenizer_config.json``'s ``chat_template``)."""
    root = Path(root)
    try:
        if (root / "chat_template.jinja").is_file():
            return (root / "chat_template.jinja").read_text(encoding="utf-8")
        for name in ("chat_template.json", "tokenizer_config.json"):
            if (root / name).is_file():
                template = json.loads((root / name).read_text(encoding="utf-8")).get("chat_template")
                if isinstance(template, str):
                    return template
    except (OSError, ValueError) as exc:
        raise RkspeechError(f"{root}: cannot read the chat template ({exc})") from None
    raise RkspeechError(f"{root}: no chat template (chat_template.json, chat_template.jinja or tokenizer_config.json "
                        "'chat_template'); a Qwen3-ASR model root has one")


@dataclass(frozen=True)
class Prompt:
    """The ids of one request; ``ids[audio_start:audio_stop]`` are the ``<|audio_pad|>`` the
    encoder's tokens replace."""
    ids: np.ndarray  # int64 [n]
    audio_start: int
    audio_stop: int

    @property
    def audio(self) -> slice:
        return slice(self.audio_start, self.audio_stop)


def render(context: str, pads: int, language: str | None, prefix: str = "") -> str:
    """The official prompt string with ``pads`` audio pads (and, in the streaming mode, the text
    already fixed, ``prefix``, after the assistant's turn starts)."""
    text = (f"{IM_START}system\n{context}{IM_END}\n{IM_START}user\n{AUDIO_START}{AUDIO_PAD * pads}{AUDIO_END}"
            f"{IM_END}\n{IM_START}assistant\n")
    return ((text + f"language {language}{ASR_TEXT}") if language else text) + prefix


class PromptBuilder:
    """Prompt ids for a model root's tokenizer and chat template."""

    def __init__(self, root: str | Path):
        from rkspeech.models.qwen3_tts.text_tokenizer import TextTokenizer

        template = chat_template(root)
        absent = [piece for piece in TEMPLATE_PIECES if piece not in template]
        if absent:
            raise RkspeechError(f"{root}: the chat template is not Qwen3-ASR's (it lacks {', '.join(absent)})")
        self.tokenizer = TextTokenizer(root)
        split = official_split(root, self.tokenizer.vocab_size())
        if split is not None:
            self.tokenizer.replace_split(split)
        self.split = split
        missing = [t for t in (IM_START, IM_END, AUDIO_START, AUDIO_PAD, AUDIO_END) if self.tokenizer.token_to_id(t) is None]
        if missing:
            raise RkspeechError(f"{root}: the tokenizer has no {', '.join(missing)} (not a Qwen3-ASR tokenizer)")
        self.audio_pad_id = self.tokenizer.token_to_id(AUDIO_PAD)

    def build(self, audio_tokens: int, context: str = "", language: str | None = None, prefix: str = "") -> Prompt:
        """Ids for an utterance the encoder turns into ``audio_tokens`` tokens (``encoder_tokens(frames)``
        of its mel frames), the system ``context`` and, when given, the forced canonical
        ``language`` (``languages.normalize_language``); ``prefix``: the streaming mode's fixed
        text, which the answer continues."""
        context = context or ""
        if AUDIO_PAD in context:
            raise RkspeechError(f"the context contains {AUDIO_PAD}, the audio's place holder; remove it")
        pads = int(audio_tokens)
        if pads < 1:
            raise RkspeechError(f"{pads} audio tokens: the audio is too short (Qwen3-ASR needs at least one mel frame)")
        ids = np.asarray(self.tokenizer.encode(render(context, pads, language, prefix)), dtype=np.int64)
        where = np.flatnonzero(ids == self.audio_pad_id)
        start = int(where[0])
        if len(where) != pads or int(where[-1]) != start + pads - 1:
            raise RkspeechError(f"the prompt holds {len(where)} audio pads, not the {pads} expected in one run")
        return Prompt(ids, start, start + pads)

    def overhead(self, context: str = "", language: str | None = None) -> int:
        """Prompt positions besides the audio pads."""
        return len(self.build(1, context, language).ids) - 1
