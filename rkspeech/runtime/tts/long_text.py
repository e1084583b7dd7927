"""Speaking a long text in bounded memory: one utterance per sentence.

One prompt of a whole text grows the talker's context (and its cache) with the text: ``speak`` of
50,000 characters peaked at 4.85 GB (issue 30).  :func:`stream_sentences` cuts the text into
sentences (:func:`rkspeech.core.sentences.sentences`: sentence ends, and at most
``MAX_SENTENCE_CHARS`` per piece) and streams each through :meth:`Speaker.stream` in turn, so
what is held is one sentence's context and audio.  A text of one sentence is one utterance,
exactly as before.  ``max_frames`` bounds the frames of the whole text (each sentence gets what
is left).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import numpy as np


def stream_sentences(engine, text: str, *, options, timing, codes_out: list | None = None,
                     margins_out: list | None = None, max_frames: int | None = None,
                     **voice) -> Iterator[np.ndarray]:
    """PCM chunks of ``text`` spoken sentence by sentence by ``engine`` (a ``Speaker``; ``voice``:
    its ``speaker``, ``language``, ``instruct``, ``ref_audio`` ...); ``timing`` (a ``SpeechTiming``)
    sums the sentences' (time to first audio: the first sentence's).  ``codes_out`` receives one
    ``[T, 16]`` array per sentence: each sentence is its own utterance with a fresh vocoder state,
    so its codes are decoded apart too (``runtime.tts.codes.utterance_array`` / ``utterances``);
    ``margins_out`` one ``[T + 1, 16]`` array per sentence (``runtime.tts.codes.margin_rows``)."""
    from rkspeech.core.sentences import sentences
    from rkspeech.runtime.tts.speak import SpeechTiming

    start = time.perf_counter()
    for piece in sentences(text):
        if max_frames is not None:
            left = max_frames - timing.frames
            if left <= 0:
                break
            # N frames of audio take N + 1 talker steps (speak's --max-frames)
            options = dataclasses.replace(options, max_new_tokens=left + 1)
        part, frames = SpeechTiming(), ([] if codes_out is not None else None)
        margins = [] if margins_out is not None else None
        yield from engine.stream(piece, options=options, codes_out=frames, margins_out=margins, timing=part,
                                 **voice)
        if frames:
            codes_out.append(np.stack(frames))
        if margins:
            from rkspeech.runtime.tts.codes import margin_rows

            margins_out.append(margin_rows(margins, engine.model.num_code_groups))
        if timing.first_audio_s is None and part.first_audio_s is not None:
            timing.first_audio_s = part.first_audio_s
        timing.frames += part.frames
        timing.samples += part.samples
        timing.generate_s += part.generate_s
        timing.vocoder_s += part.vocoder_s
        timing.cuts += part.cuts
        for key, value in part.stages.items():
            timing.stages[key] = timing.stages.get(key, 0) + value
        timing.total_s = time.perf_counter() - start
