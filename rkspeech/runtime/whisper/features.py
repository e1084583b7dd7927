"""Whisper's log-Mel features of a long recording, computed block by block as it is decoded.

faster-whisper computes the features of the whole waveform at once (``FeatureExtractor.__call__``:
pad, centred STFT of the whole array, Mel, log, then a floor at the *whole file's* maximum - 8):
2 h of audio peaked at 6.9 GB (issue 30).  :func:`stream_features` runs the same steps over
blocks of :data:`BLOCK_FRAMES` frames with the STFT's 400-sample overlap, keeping only the log-Mel
frames (80 x 100 per second, float32: 115 MB per hour) and the running maximum; the floor is
applied at the end.  The waveform itself is never held whole.  Every frame gets the same
samples, window, FFT and Mel product as in the whole-file call; only OpenBLAS rounds the float32
Mel product differently for different column counts and offsets, so values may differ in the
last bit (1.2e-7 at most; faster-whisper's own features differ as much between 1 and 2 OpenBLAS
threads: 977 of 18,001 frames of a 3 min file; docs/long-inputs.md).  Peak memory: the features
twice at the end (the blocks and the assembled array), 230 MB per hour.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: frames per STFT block (~10 s): the block's STFT (complex128, 201 x 1024) is ~3 MB
BLOCK_FRAMES = 1024
#: faster-whisper pads the waveform with this many zeros before the STFT
TAIL_PADDING = 160


def stream_features(blocks: Iterable[np.ndarray], extractor) -> tuple[np.ndarray, int]:
    """Mono float32 blocks at 16 kHz (any sizes) -> (features ``[n_mels, frames]``, samples).

    ``extractor`` is faster-whisper's ``FeatureExtractor`` (its Mel filters, FFT size, hop)."""
    n_fft, hop = extractor.n_fft, extractor.hop_length
    half = n_fft // 2
    window = np.hanning(n_fft + 1)[:-1].astype("float32")
    out: list[np.ndarray] = []
    peak = -np.inf
    head = np.zeros(0, np.float32)  # the first samples, until the left reflection can be built
    buf: np.ndarray | None = None  # centred-padded samples not yet fully used by a frame
    samples = 0

    def frames_of(padded: np.ndarray, final: bool) -> np.ndarray:
        """log-Mel of every whole frame in ``padded``; the samples the next frame starts at stay."""
        nonlocal buf, peak
        count = 1 + (len(padded) - n_fft) // hop if len(padded) >= n_fft else 0
        if not final:
            count = min(count, BLOCK_FRAMES)
        if count <= 0:
            buf = padded
            return
        strided = np.lib.stride_tricks.as_strided(padded, (1, count, n_fft),
                                                  (padded.strides[0], hop * padded.strides[0], padded.strides[0]))
        stft = np.fft.rfft(strided * window, n=n_fft, axis=-1).transpose((0, 2, 1))[0].astype("complex64")
        if final:
            stft = stft[..., :-1]  # the STFT's last frame is dropped, as there (before the product)
        mel = extractor.mel_filters @ (np.abs(stft) ** 2)
        log_spec = np.log10(np.clip(mel, a_min=1e-10, a_max=None))
        peak = max(peak, float(log_spec.max()))
        out.append(log_spec)
        buf = padded[count * hop:]

    for block in blocks:
        block = np.asarray(block, dtype=np.float32)
        samples += len(block)
        if buf is None:  # the left reflection needs samples 1..half
            head = np.concatenate([head, block])
            if len(head) <= half:
                continue
            buf = np.concatenate([head[1:half + 1][::-1], head])
            head = None
        else:
            buf = np.concatenate([buf, block])
        while len(buf) >= n_fft + BLOCK_FRAMES * hop:
            frames_of(buf, final=False)
    if buf is None:  # shorter than the reflection: the whole-file call on what there is
        return extractor(head, padding=TAIL_PADDING), samples
    # the end: faster-whisper's zero padding, then the right reflection of the padded waveform
    tail = np.concatenate([buf, np.zeros(TAIL_PADDING, np.float32)])
    tail = np.concatenate([tail, tail[-half - 1:-1][::-1]])
    frames_of(tail, final=True)
    features = np.empty((extractor.mel_filters.shape[0], sum(b.shape[1] for b in out)), np.float32)
    floor, at = peak - 8.0, 0
    while out:  # copy block by block, dropping each as it goes
        b = out.pop(0)
        np.maximum(b, floor, out=features[:, at:at + b.shape[1]])
        at += b.shape[1]
    features += 4.0
    features /= 4.0
    return features, samples
