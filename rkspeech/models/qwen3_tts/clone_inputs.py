"""What voice cloning's two graphs are fed and give, in numpy (no torch): what a board runs.

**The speaker encoder's mel front end** (:func:`log_mel`).  The official front end (qwen-tts
``mel_spectrogram``): n_fft 1024, hop 256, a periodic Hann window,
reflect padding of (n_fft - hop) / 2 each side, magnitude ``sqrt(re^2 + im^2 + 1e-9)``, 128
Slaney mel bands 0-12 kHz at 24 kHz (the filterbank computed here, no librosa at run time:
``tests/models/test_tts_generate.py`` checks it against librosa's ``filters.mel``), natural log
of the mel energies clamped at 1e-5.  ``models.qwen3_tts.speaker_encoder.mel_spectrogram`` is the
same in torch (the reference: ``TTSModel``); this one feeds the speaker encoder's graph
(``runtime.tts.clone_encoders``).  The FFT runs in float64 and the result is rounded to float32:
against torch's float32 STFT the log-mel differs by at most 1.7e-5 (three clips, 0.55-10.7 s), and
the x-vector by 1.4e-6 (the build's check, docs/tts-build.md "Voice cloning").

**The speech tokenizer's encoder** (:func:`reference_feed`, :func:`reference_codes`): the audio
zero-padded to whole codes with its true length beside it, and of the graph's codes the first
``ceil(samples / samples_per_code)`` as ``[T, G]`` int64 (``contracts.clone``; the encoder itself:
``models.qwen3_tts.speech_encoder``).
"""

from __future__ import annotations

import numpy as np

from rkspeech.contracts.clone import code_count, padded_length

#: the front end's constants (one place: the torch reference imports them from here)
MEL = {"n_fft": 1024, "num_mels": 128, "hop": 256, "win": 1024, "fmin": 0.0, "fmax": 12000.0}
#: the magnitude's floor under the square root and the log's clamp
MAGNITUDE_EPS, LOG_FLOOR = 1e-9, 1e-5


def _hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


def slaney_mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """``[n_mels, n_fft//2+1]`` float32 triangular Slaney-scale filters with Slaney area norm."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def mel_filters(sample_rate: int) -> np.ndarray:
    """The front end's filterbank at ``sample_rate``."""
    return slaney_mel_filters(sample_rate, MEL["n_fft"], MEL["num_mels"], MEL["fmin"], MEL["fmax"])


def hann_window(n: int) -> np.ndarray:
    """The periodic Hann window (``torch.hann_window``'s default), float64."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def log_mel(audio: np.ndarray, sample_rate: int = 24000) -> np.ndarray:
    """``[1, frames, 128]`` float32 log-mel of mono float audio (at least ``n_fft`` samples after
    padding: 640 samples)."""
    n_fft, hop, win = MEL["n_fft"], MEL["hop"], MEL["win"]
    y = np.asarray(audio, dtype=np.float32).astype(np.float64)
    pad = (n_fft - hop) // 2
    y = np.pad(y, (pad, pad), mode="reflect")
    frames = 1 + (y.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = np.zeros(n_fft)
    left = (n_fft - win) // 2
    window[left:left + win] = hann_window(win)
    spec = np.fft.rfft(y[idx] * window, axis=1)  # [frames, n_fft // 2 + 1]
    mag = np.sqrt(spec.real ** 2 + spec.imag ** 2 + MAGNITUDE_EPS).astype(np.float32)
    mel = np.log(np.maximum(mag @ mel_filters(sample_rate).T, LOG_FLOOR))
    return np.ascontiguousarray(mel[None].astype(np.float32))


def reference_feed(audio: np.ndarray, samples_per_code: int) -> dict[str, np.ndarray]:
    """The speech encoder's inputs for mono float audio: ``audio [1, 1, whole codes]`` (zeros
    after the recording) and ``length [1]`` int64."""
    a = np.asarray(audio, dtype=np.float32).reshape(-1)
    padded = np.zeros((1, 1, padded_length(a.size, samples_per_code)), dtype=np.float32)
    padded[0, 0, :a.size] = a
    return {"audio": padded, "length": np.array([a.size], dtype=np.int64)}


def reference_codes(codes, samples: int, samples_per_code: int) -> np.ndarray:
    """The graph's ``codes [1, G, T]`` -> the recording's ``[ceil(samples / S), G]`` int64."""
    c = np.asarray(codes)
    return np.ascontiguousarray(c[0, :, :code_count(samples, samples_per_code)].T.astype(np.int64))
