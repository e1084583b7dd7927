"""Where Qwen3-ASR's encoder cuts an utterance: chunks, windows, and the fixed-shape inputs of one window.

numpy only (board side).  The official encoder (qwen-asr 0.0.6) cuts the log-mel into chunks of
``2 * n_window`` = 100 frames, each giving 13 tokens (its ``_get_feat_extract_output_lengths``
hard-codes 100 and 13), and attends inside windows of ``n_window_infer / 100`` chunks (8 = 104
tokens, 8 s).  A window graph takes a fixed number of chunks ``k`` (``WindowInputs``); a window
with fewer chunks is zero-padded and its padding keys masked (``models.qwen3_asr.encoder``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rkspeech.core.errors import RkspeechError

#: mel frames per chunk, and the tokens of a full chunk: fixed by the official code
CHUNK_FRAMES = 100
#: additive mask of a padding key (fp16-safe; exp underflows to exactly 0)
MASK_VALUE = -30000.0


def conv_length(n: int) -> int:
    """Output length of one 3x3 stride-2 padding-1 convolution over ``n`` positions."""
    return (n - 1) // 2 + 1


def chunk_tokens(frames: int) -> int:
    """Tokens of a chunk of ``frames`` (<= 100) mel frames: three stride-2 convolutions."""
    return conv_length(conv_length(conv_length(frames)))


def encoder_tokens(frames: int) -> int:
    """Tokens of an utterance of ``frames`` mel frames (the official ``_get_feat_extract_output_lengths``)."""
    full, tail = divmod(int(frames), CHUNK_FRAMES)
    return full * chunk_tokens(CHUNK_FRAMES) + (chunk_tokens(tail) if tail else 0)


@dataclass(frozen=True)
class Window:
    """One attention window of an utterance: mel frames ``[start, start + frames)`` in ``chunks``
    chunks, ``tokens`` valid output tokens."""
    start: int
    frames: int
    chunks: int
    tokens: int


@dataclass(frozen=True)
class EncoderGeometry:
    mels: int
    window_chunks: int  # chunks per attention window (8)

    @classmethod
    def of(cls, audio_cfg) -> EncoderGeometry:
        if 2 * audio_cfg.n_window != CHUNK_FRAMES:
            raise RkspeechError(f"audio_config.n_window is {audio_cfg.n_window}; the official encoder's lengths "
                                f"assume chunks of {CHUNK_FRAMES} frames (n_window {CHUNK_FRAMES // 2})")
        if audio_cfg.n_window_infer % CHUNK_FRAMES:
            raise RkspeechError(f"audio_config.n_window_infer ({audio_cfg.n_window_infer}) must be a multiple of "
                                f"{CHUNK_FRAMES}")
        return cls(mels=audio_cfg.num_mel_bins, window_chunks=audio_cfg.n_window_infer // CHUNK_FRAMES)

    @property
    def chunk_tokens(self) -> int:
        return chunk_tokens(CHUNK_FRAMES)

    @property
    def conv_lengths(self) -> tuple[int, int]:
        """Time lengths after the first and second convolution of a full chunk (50, 25)."""
        return conv_length(CHUNK_FRAMES), conv_length(conv_length(CHUNK_FRAMES))

    def windows(self, frames: int) -> list[Window]:
        """The attention windows of an utterance of ``frames`` mel frames, in order."""
        if frames < 1:
            raise RkspeechError("the audio is shorter than one mel frame (10 ms)")
        span = self.window_chunks * CHUNK_FRAMES
        out = []
        for start in range(0, frames, span):
            n = min(span, frames - start)
            out.append(Window(start, n, -(-n // CHUNK_FRAMES), encoder_tokens(n)))
        return out

    def window_inputs(self, mel: np.ndarray, win: Window, *, chunks: int, short: bool | None = None):
        """The four inputs of a ``chunks``-chunk window graph for ``win`` of ``mel [mels, frames]``:
        ``(chunks [k, 1, mels, 100], mask1 [k, 1, 1, 50], mask2 [k, 1, 1, 25], key_mask [1, 1, 1, k * 13])``.

        ``short``: the utterance is shorter than one chunk (default: ``mel`` has fewer than 100
        frames), the one case the official does not pad, reproduced by the conv masks."""
        if chunks < win.chunks:
            raise RkspeechError(f"a window of {win.chunks} chunks does not fit a {chunks}-chunk graph")
        short = mel.shape[1] < CHUNK_FRAMES if short is None else short
        x = np.zeros((chunks, 1, self.mels, CHUNK_FRAMES), np.float32)
        part = mel[:, win.start:win.start + win.frames].astype(np.float32, copy=False)
        for c in range(win.chunks):
            seg = part[:, c * CHUNK_FRAMES:(c + 1) * CHUNK_FRAMES]
            x[c, 0, :, :seg.shape[1]] = seg
        t1, t2 = self.conv_lengths
        m1 = np.ones((chunks, 1, 1, t1), np.float32)
        m2 = np.ones((chunks, 1, 1, t2), np.float32)
        if short:
            v1 = conv_length(win.frames)
            m1[0, ..., v1:] = 0.0
            m2[0, ..., conv_length(v1):] = 0.0
        key = np.full((1, 1, 1, chunks * self.chunk_tokens), MASK_VALUE, np.float32)
        key[..., :win.tokens] = 0.0
        return x, m1, m2, key
