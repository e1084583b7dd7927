"""Qwen3-ASR's log-Mel features of one utterance, in numpy (no torch, no transformers).

The official processor (qwen-asr 0.0.6 ``Qwen3ASRProcessor``) calls transformers'
``WhisperFeatureExtractor(feature_size=128)`` on a batch of one with ``padding=True``,
``truncation=False``: no padding to 30 s, no truncation.  With torch installed (the official
pins it) the extractor takes its torch path: centred ``torch.stft`` (reflection of 200 samples
each side, periodic Hann window of 400, hop 160), the last STFT frame dropped, power, the
Slaney-normalised 128-band Mel bank, ``log10`` of ``max(mel, 1e-10)``, the floor ``max - 8`` over
the *whole utterance*, then ``(x + 4) / 4``.  So an utterance of ``n`` samples has ``n // 160``
frames (0.3 s -> 30, 0.99 s -> 99, 1 s -> 100, 5.5 s -> 550, 40 s -> 4000, measured against the
official call in ``tests/models/test_qwen3_asr_host.py``).

:func:`log_mel` runs the same steps over blocks of :data:`BLOCK_FRAMES` frames into a preallocated
output (the official's STFT of a 1200 s chunk at once is 193 MB of complex64, 386 MB as numpy's
complex128; a block is 3.3 MB), keeps the running maximum and applies the floor at the end, so every value
is the whole-utterance value.  Not bit-identical: the FFT is numpy's (float64) where torch's is
float32, whose rounding the quiet bins of a loud frame carry into their log; the features differ
from the official by at most 3.9e-6 on noise and 1.1e-4 on a tone over faint hiss (mean 1.2e-6,
values spanning -0.6 to 1.4; the lengths above, same test).  With torch's own spectrum put in,
the remaining steps agreed with the official to 2.4e-7 (float32 rounding of the Mel product),
measured once.  The Mel bank equals transformers' exactly (max difference 0.0).

``runtime/whisper/features.py`` computes faster-whisper's features block by block the same way; it
cannot be imported from here (models sits below runtime) and differs in its inputs (a 160-sample
zero tail, faster-whisper's filters, a stream of blocks), so the two share the method, not code.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from rkspeech.core.errors import RkspeechError

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 128
#: frames per block of the STFT (~10 s): its complex128 spectrum is 201 x 1024 x 16 B = 3.3 MB
BLOCK_FRAMES = 1024
#: torch.stft's centring reflects N_FFT // 2 samples at each end; it refuses a shorter input
MIN_SAMPLES = N_FFT // 2 + 1


def feature_frames(samples: int) -> int:
    """Mel frames of ``samples`` samples at 16 kHz (the official attention mask's sum)."""
    return int(samples) // HOP


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mel per 200 Hz), logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    return np.where(freq >= 1000.0, 15.0 + np.log(np.maximum(freq, 1e-30) / 1000.0) * (27.0 / np.log(6.4)),
                    3.0 * freq / 200.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), 200.0 * mel / 3.0)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The Slaney-scale, Slaney-normalised triangular Mel bank ``[n_fft // 2 + 1, n_mels]`` float64,
    0 Hz to 8 kHz: transformers' ``mel_filter_bank(..., norm="slaney", mel_scale="slaney")`` that the
    Whisper extractor builds (equal to 1e-7 or better, tested).  Read-only (cached)."""
    bins = n_fft // 2 + 1
    centres = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(8000.0), n_mels + 2))
    fft_freqs = np.linspace(0, sample_rate // 2, bins)
    rising = (fft_freqs[:, None] - centres[None, :-2]) / np.diff(centres)[None, :-1]
    falling = (centres[None, 2:] - fft_freqs[:, None]) / np.diff(centres)[None, 1:]
    bank = np.maximum(0.0, np.minimum(rising, falling))
    bank *= 2.0 / (centres[2:] - centres[:-2])[None, :]
    bank.setflags(write=False)
    return bank


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    """torch.hann_window(400) (periodic) in its own float32 steps: cos(n * 2pi/400) * -0.5 + 0.5
    (27 of 400 values 1 ulp off torch's vectorised cos; float64 ``np.hanning``: 320)."""
    n = np.arange(N_FFT, dtype=np.float32)
    return np.cos(n * np.float32(2.0 * np.pi / N_FFT)) * np.float32(-0.5) + np.float32(0.5)


def log_mel(wave: np.ndarray) -> np.ndarray:
    """Mono float32 samples at 16 kHz -> log-Mel features ``[128, len // 160]`` float32, the official
    ``input_features[0]`` of this one utterance (see the module docstring for how close)."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise RkspeechError(f"log_mel takes mono audio (one dimension); got shape {tuple(wave.shape)}")
    n = len(wave)
    if n < MIN_SAMPLES:
        raise RkspeechError(f"the audio is {n} samples long; Qwen3-ASR's features need at least {MIN_SAMPLES} "
                            f"samples ({MIN_SAMPLES / SAMPLE_RATE * 1000:.1f} ms at 16 kHz)")
    frames = feature_frames(n)
    filters = mel_filters().T.astype(np.float32)  # [128, 201], float32 as the official product
    window = _window()
    half = N_FFT // 2
    out = np.empty((N_MELS, frames), np.float32)
    peak = -np.inf
    for t0 in range(0, frames, BLOCK_FRAMES):
        t1 = min(frames, t0 + BLOCK_FRAMES)
        # padded samples [t0 * hop, (t1 - 1) * hop + n_fft) = wave samples shifted by -half, reflected at both ends
        idx = np.arange(t0 * HOP - half, (t1 - 1) * HOP + N_FFT - half)
        idx = np.abs(idx)
        idx = np.where(idx >= n, 2 * (n - 1) - idx, idx)
        block = wave[idx]
        strided = np.lib.stride_tricks.as_strided(block, (t1 - t0, N_FFT), (HOP * block.strides[0], block.strides[0]),
                                                  writeable=False)
        spectrum = np.fft.rfft(strided * window, n=N_FFT, axis=-1).astype(np.complex64)
        power = np.abs(spectrum) ** 2  # [frames, 201] float32
        mel = filters @ power.T
        logs = np.log10(np.maximum(mel, np.float32(1e-10)))
        peak = max(peak, float(logs.max()))
        out[:, t0:t1] = logs
    np.maximum(out, np.float32(peak - 8.0), out=out)
    out += np.float32(4.0)
    out /= np.float32(4.0)
    return out
