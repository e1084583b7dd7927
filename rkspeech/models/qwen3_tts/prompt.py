"""The talker's prompt, written once over a host backend (``loop.HostOps``).

As qwen-tts 0.1.1 builds it for one sequence: ``<|im_start|>assistant\\n`` (3 text tokens)
projected; then codec control tokens (``think``/``nothink``, ``think_bos``, language,
``think_eos``, speaker, ``pad``) each added to ``tts_pad`` (``tts_bos`` on the last), and the
first text token + ``codec_bos``.  The remaining text is fed one token per frame (added to the
frame's summed codec embeddings), then ``tts_eos``, then ``tts_pad``.  With ``text_in_prompt``
(qwen-tts' ``non_streaming_mode``; its default for custom voice and voice design, not for clone)
the whole text + ``tts_eos`` sits in the prompt over ``codec_pad`` and every frame gets
``tts_pad``.  In-context cloning (qwen-tts ``generate_icl_prompt``) puts the reference's and the
target's text over ``codec_bos`` + the reference frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PromptRequest:
    """A checked request's token-level parts: ``ids`` (``prompt_ids(text)``), ``instruct_ids``
    (the instruct turn, or None), ``speaker_embed`` (a vector, or None), ``language_id`` (None:
    auto), ``icl`` (``(reference text ids, reference codes [T, G])`` or None)."""

    ids: list
    instruct_ids: list | None = None
    speaker_embed: object = None
    language_id: int | None = None
    icl: tuple | None = None


def prompt_rows(ops, cfg, req: PromptRequest, text_in_prompt: bool):
    """``(prompt [L, Ht], trailing text [n, Ht], tts_pad [1, Ht])`` in ``ops``' arrays; ``cfg``:
    the ``TTSConfig``."""
    t, ids = cfg.talker, req.ids
    parts = []
    if req.instruct_ids is not None:
        parts.append(ops.text(req.instruct_ids))
    bos, eos, pad = ops.split(ops.text([cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]), 3)
    if req.language_id is None:
        control = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        control = [t.codec_think_id, t.codec_think_bos_id, req.language_id, t.codec_think_eos_id]
    codec = [ops.codec(control)]
    if req.speaker_embed is not None:
        codec.append(ops.row(req.speaker_embed))
    codec.append(ops.codec([t.codec_pad_id, t.codec_bos_id]))
    codec = ops.concat(codec)
    role = ops.text(ids[:3])
    tags = ops.concat((ops.repeat(pad, codec.shape[0] - 2), bos)) + codec[:-1]
    body = ids[3:-5]
    if req.icl is not None:
        prompt, trailing = _icl_rows(ops, cfg, body, *req.icl, pad, eos, text_in_prompt)
        prompt = ops.concat((role, tags, prompt))
    elif text_in_prompt:
        text_part = ops.concat((ops.text(body), eos)) + ops.codec([t.codec_pad_id] * (len(body) + 1))
        prompt = ops.concat((role, tags, text_part, pad + ops.codec([t.codec_bos_id])))
        trailing = pad
    else:
        prompt = ops.concat((role, tags, ops.text(ids[3:4]) + codec[-1:]))
        trailing = ops.concat((ops.text(ids[4:-5]), eos))
    parts.append(prompt)
    return ops.concat(parts), trailing, pad


def _icl_rows(ops, cfg, body, ref_ids, codes: np.ndarray, pad, eos, text_in_prompt: bool):
    """qwen-tts ``generate_icl_prompt``: reference + target text over codec_bos + the reference frames."""
    t = cfg.talker
    text = ops.concat((ops.text(ref_ids + body), eos))
    frames = ops.sum_codebooks([ops.codec(codes[:, 0])] + [ops.cp_codec(i, codes[:, i]) for i in range(1, codes.shape[1])])
    codec = ops.concat((ops.codec([t.codec_bos_id]), frames))
    n_text, n_codec = text.shape[0], codec.shape[0]
    if text_in_prompt:
        return ops.concat((text + ops.codec([t.codec_pad_id] * n_text), codec + pad)), pad
    if n_text > n_codec:
        return text[:n_codec] + codec, text[n_codec:]
    return ops.concat([text] + [pad] * (n_codec - n_text)) + codec, pad
