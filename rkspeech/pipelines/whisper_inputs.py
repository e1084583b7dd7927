"""The inputs and reference of the Whisper encoder build's checks: a deterministic speech-like
signal, one mel window as faster-whisper makes it, CTranslate2's own encoder output."""

from __future__ import annotations

from pathlib import Path

from rkspeech.models.whisper.window import SAMPLE_RATE, WINDOW_FRAMES


def synthetic_audio(seconds: float = 12.0, sample_rate: int = SAMPLE_RATE, seed: int = 0):
    """Deterministic speech-like test signal: harmonics of a gliding pitch, syllable envelope, noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 * (1 + np.sin(2 * np.pi * 3.0 * t)) * (np.sin(2 * np.pi * 0.25 * t) > -0.3)
    audio = 0.2 * envelope * voiced + 0.01 * rng.standard_normal(t.size)
    return audio.astype(np.float32)


def check_window_mel(n_mels: int, audio=None):
    """One mel window [1, n_mels, 3000] from ``audio`` (or the synthetic signal), as faster-whisper makes it."""
    import numpy as np
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = synthetic_audio() if audio is None else audio
    features = FeatureExtractor(feature_size=n_mels)(audio)[:, :-1]
    return np.ascontiguousarray(pad_or_trim(features, WINDOW_FRAMES)[None], dtype=np.float32)


def ct2_encode(model_dir: Path, mel, threads: int = 0):
    """CTranslate2's own encoder, float32 compute, on ``mel`` -> numpy [1, 1500, d]."""
    import ctranslate2
    import numpy as np

    model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32", intra_threads=threads)
    out = model.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True)
    return np.array(out)
