"""The Qwen text tokenizer, through the ``tokenizers`` library (no transformers at run time).

A Qwen3-TTS model root ships ``vocab.json`` + ``merges.txt`` (byte-level BPE) and
``tokenizer_config.json`` (its ``added_tokens_decoder`` holds the special tokens such as
``<|im_start|>``).  This builds the same pipeline transformers' ``Qwen2TokenizerFast`` builds from
those files: NFC normalizer, the Qwen2 split regex then byte-level pre-tokenizer, BPE without an
unknown token, special tokens matched before splitting.  A ``tokenizer.json``, if present, is used
as is.
"""

from __future__ import annotations

import json
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: transformers' Qwen2 pre-tokenizer pattern (``tokenization_qwen2.PRETOKENIZE_REGEX``).
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


def missing_files(root: Path) -> list[str]:
    if (root / "tokenizer.json").is_file():
        return []
    return [name for name in FILES if not (root / name).is_file()]


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
                                "(a Qwen3-TTS model root holds vocab.json, merges.txt and tokenizer_config.json)")
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
            specials = []
            for idx in sorted(added, key=int):
                a = added[idx]
                specials.append(AddedToken(a["content"], single_word=a.get("single_word", False),
                                           lstrip=a.get("lstrip", False), rstrip=a.get("rstrip", False),
                                           normalized=a.get("normalized", False), special=a.get("special", True)))
            tok.add_special_tokens(specials)
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

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)
