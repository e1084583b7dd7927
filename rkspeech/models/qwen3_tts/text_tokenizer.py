"""The Qwen text tokenizer, through the ``tokenizers`` library (no transformers at run time).

A Qwen3-TTS model root ships ``vocab.json`` + ``merges.txt`` (byte-level BPE) and
``tokenizer_config.json`` (its ``added_tokens_decoder`` holds the special tokens such as
``<|im_start|>``).  This builds the same pipeline transformers' ``Qwen2TokenizerFast`` builds from
those files: NFC normalizer, the Qwen2 split regex then byte-level pre-tokenizer, BPE without an
unknown token, added tokens matched before splitting.  A ``tokenizer.json``, if present, is used
as is.

An added token keeps the file's ``special`` flag (transformers also makes the named ``eos_token``,
``pad_token``, ... and ``additional_special_tokens`` special): decoding with
``skip_special_tokens`` drops the special ones only, as ``Qwen2TokenizerFast.decode`` does, so
Qwen3-ASR's ``<asr_text>`` (not special) stays in the text.  :meth:`TextTokenizer.replace_split`
swaps the splitting regex, as Qwen3-ASR's official loader does (``models.qwen3_asr.prompt``).
"""

from __future__ import annotations

import json
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: transformers' Qwen2 pre-tokenizer pattern (``tokenization_qwen2.PRETOKENIZE_REGEX``).
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
#: tokenizer_config.json keys whose tokens transformers makes special whatever their flag says
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def missing_files(root: Path) -> list[str]:
    if (root / "tokenizer.json").is_file():
        return []
    return [name for name in FILES if not (root / name).is_file()]


def _content(token) -> str | None:
    """A token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    return token.get("content") if isinstance(token, dict) else token


class TextTokenizer:
    def __init__(self, root: str | Path):
        from tokenizers import (
            AddedToken,
            Regex,
            Tokenizer,
            decoders,
            models,
            normalizers,
            pre_tokenizers,
        )

        root = Path(root)
        missing = missing_files(root)
        if missing:
            raise RkspeechError(f"{root}: text tokenizer file(s) missing: {', '.join(missing)} "
                                "(a Qwen model root holds vocab.json, merges.txt and tokenizer_config.json)")
        try:
            if (root / "tokenizer.json").is_file():
                self._tok = Tokenizer.from_file(str(root / "tokenizer.json"))
                return
            bpe = models.BPE.from_file(str(root / "vocab.json"), str(root / "merges.txt"), unk_token=None,
                                       continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                                       byte_fallback=False)
            tok = Tokenizer(bpe)
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])
            tok.decoder = decoders.ByteLevel()
            cfg = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
            added = cfg.get("added_tokens_decoder", {})
            named = {_content(cfg.get(key)) for key in NAMED_SPECIALS} | {
                _content(t) for t in cfg.get("additional_special_tokens") or ()}
            for idx in sorted(added, key=int):  # one at a time, in id order: each gets the next id
                a = added[idx]
                special = bool(a.get("special", True)) or a["content"] in named
                token = AddedToken(a["content"], single_word=a.get("single_word", False),
                                   lstrip=a.get("lstrip", False), rstrip=a.get("rstrip", False),
                                   normalized=a.get("normalized", not special), special=special)
                if special:
                    tok.add_special_tokens([token])
                else:
                    tok.add_tokens([token])
            for idx in added:
                if tok.token_to_id(added[idx]["content"]) != int(idx):
                    raise RkspeechError(f"{root}/tokenizer_config.json: added token {added[idx]['content']!r} gets id "
                                        f"{tok.token_to_id(added[idx]['content'])}, the file says {idx}")
        except RkspeechError:
            raise
        except Exception as exc:  # noqa: BLE001 (tokenizers raises plain Exception for bad files)
            raise RkspeechError(f"{root}: cannot read the text tokenizer ({exc})") from None
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def replace_split(self, pattern: str) -> None:
        """Put ``pattern`` in place of the first pre-tokenizer (the split regex), as transformers'
        ``fix_mistral_regex`` does (``backend_tokenizer.pre_tokenizer[0] = Split(...)``)."""
        from tokenizers import Regex, pre_tokenizers

        pre = self._tok.pre_tokenizer
        try:
            pre[0] = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        except Exception as exc:  # noqa: BLE001 (not a Sequence: transformers' assignment fails there too)
            raise RkspeechError(f"cannot replace the tokenizer's split regex ({exc})") from None
        self._tok.pre_tokenizer = pre

    def vocab_size(self) -> int:
        """Entries of the BPE vocabulary, added tokens not counted (transformers' ``vocab_size``)."""
        return self._tok.get_vocab_size(with_added_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)
