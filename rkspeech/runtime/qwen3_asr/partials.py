"""Partial transcripts while audio arrives: the official streaming mode (qwen-asr 0.0.6
``streaming_transcribe``), step by step, on any engine.

Every ``CHUNK_S`` (2 s) of audio the whole audio so far is transcribed again; from the third step
on, the answer is forced to begin with the previous step's raw output minus its last
``UNFIXED_TOKENS`` (5) tokens (one more while the cut splits a character: the official's
``\\ufffd`` rule), so the text behind that point is fixed and only the tail may change.  That
fixed text (:attr:`PartialState.fixed`, parsed as the official parses an answer) only grows: it
is what a server can send as transcript chunks while the speaker is still talking.

The official feeds every 2 s chunk; a server computes a step only when an engine is free, so a
busy server skips steps (the next one then covers more audio).  The final transcript is not made
here: it is the plain transcription of the whole audio, identical to an unstreamed request.  The
official mode runs on vLLM, whose tokenizer keeps the Qwen2 split regex; the steps here use the
plan's tokenizer as the plain transcription does (``models.qwen3_asr.prompt``): they differ only
for a context or fixed text the two regexes split differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the official defaults (``init_streaming_state``)
CHUNK_S = 2.0
UNFIXED_CHUNKS = 2
UNFIXED_TOKENS = 5


@dataclass
class PartialState:
    """One utterance's streaming state: the request's context and forced language (canonical name
    or None), the steps done, the last raw answer, and its fixed text so far."""
    context: str = ""
    language: str | None = None
    steps: int = 0
    raw: str = ""
    fixed: str = ""


def rolled_back(tokenizer, raw: str, tokens: int = UNFIXED_TOKENS) -> str:
    """``raw`` minus its last ``tokens`` tokens; more while the cut leaves a broken character."""
    ids = tokenizer.encode(raw)
    k = tokens
    while True:
        end = max(0, len(ids) - k)
        if end == 0:
            return ""
        text = tokenizer.decode(ids[:end])
        if "\ufffd" not in text:
            return text
        k += 1


def partial_step(asr, state: PartialState, wave: np.ndarray, *, max_new_tokens: int) -> PartialState:
    """One step on ``asr`` (an ``ASRTranscriber``) over ``wave``, all the audio so far: ``state``
    updated (its ``fixed`` text never shrinks)."""
    from rkspeech.models.qwen3_asr.features import log_mel
    from rkspeech.models.qwen3_asr.transcript_text import decode_text, parse_output

    tokenizer = asr.prompts.tokenizer
    prefix = rolled_back(tokenizer, state.raw) if state.steps >= UNFIXED_CHUNKS else ""
    feats = asr.encode(log_mel(np.asarray(wave, dtype=np.float32)))
    prompt = asr.prompts.build(feats.shape[0], context=state.context, language=state.language, prefix=prefix)
    out = asr.generate(prompt.ids.tolist(), prompt.audio_start, feats, max_new_tokens)
    state.raw = prefix + decode_text(tokenizer, out)
    state.steps += 1
    if state.steps >= UNFIXED_CHUNKS:
        fixed = parse_output(rolled_back(tokenizer, state.raw), state.language)[1].strip()
        if fixed.startswith(state.fixed):
            state.fixed = fixed
    return state
