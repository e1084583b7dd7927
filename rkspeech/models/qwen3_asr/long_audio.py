"""Cutting a recording longer than Qwen3-ASR takes at once, where the official package cuts it.

qwen-asr 0.0.6 transcribes at most ``MAX_ASR_INPUT_SECONDS`` = 1200 s per request
(``split_audio_into_chunks``): from the start, each cut goes ``max_seconds`` on, then moves to the
quietest spot within +-5 s: the 100 ms window with the least sum of absolute samples (the first
such window on a tie), and in it the quietest sample.  The chunks tile the recording exactly;
each chunk's offset is the running sum of the chunk lengths in seconds (as there, a float sum).
Only when the recording was cut are the chunks shorter than 0.5 s padded with zeros at the end
(a recording that fits in one chunk is returned as it is, however short).

:func:`split_long_audio` does the same with the same numpy calls (``np.convolve`` for the window
sums: its float32 sums decide ties between equally quiet windows, so a different summation could
move a cut); the chunks are views of ``wave`` except the padded ones.  The boundaries equal the
official's on a 2500 s recording with quiet gaps (``tests/models/test_qwen3_asr_host.py``).
"""

from __future__ import annotations

import numpy as np

#: the official limits (qwen-asr 0.0.6 ``inference/utils.py``)
MAX_SECONDS = 1200
SEARCH_SECONDS = 5.0
QUIET_WINDOW_MS = 100.0
MIN_SECONDS = 0.5


def _quietest(wave: np.ndarray, left: int, right: int, win: int) -> int:
    """The quietest sample of the quietest ``win``-sample window of ``wave[left:right]`` (absolute index)."""
    level = np.abs(wave[left:right])
    sums = np.convolve(level, np.ones(win, dtype=np.float32), mode="valid")
    first = int(np.argmin(sums))
    return left + first + int(np.argmin(level[first:first + win]))


def split_long_audio(wave: np.ndarray, sr: int = 16000, max_seconds: float = MAX_SECONDS,
                     search_seconds: float = SEARCH_SECONDS,
                     window_ms: float = QUIET_WINDOW_MS) -> list[tuple[np.ndarray, float]]:
    """Mono float32 samples -> ``[(chunk, offset_seconds), ...]``, the official ``split_audio_into_chunks``.
    A multi-channel array ``[samples, channels]`` is averaged over its last axis first, as there."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim > 1:
        wave = np.mean(wave, axis=-1).astype(np.float32)
    total = int(wave.shape[0])
    if total / float(sr) <= max_seconds:
        return [(wave, 0.0)]
    span, reach = int(max_seconds * sr), int(search_seconds * sr)
    win = max(4, int(window_ms / 1000.0 * sr))
    cuts, start = [], 0
    while total - start > span:
        cut = start + span
        left, right = max(start, cut - reach), min(total, cut + reach)
        boundary = cut if right - left <= win else _quietest(wave, left, right, win)
        boundary = min(max(boundary, start + 1), total)
        cuts.append(boundary)
        start = boundary
    min_len = int(MIN_SECONDS * sr)
    chunks, offset = [], 0.0
    for a, b in zip([0, *cuts], [*cuts, total]):
        piece = wave[a:b]
        if len(piece) < min_len:
            piece = np.pad(piece, (0, min_len - len(piece))).astype(np.float32)
        chunks.append((piece, offset))
        offset += (b - a) / float(sr)
    return chunks
