"""Audio in and out of the server, in memory only.

Uploads are decoded by :func:`rkspeech.runtime.audio.decode_audio` (the decoder of ``rkspeech
transcribe``, so the samples -- and the transcript -- equal what the CLI reads from the same
file) with the server's bound on the decoded length, checked while decoding: a 25 MB upload of
a low-bit-rate codec could otherwise decode to hours of audio.  :func:`bad_audio` turns its
refusal into :class:`BadAudio` (400) or :class:`TooLong` (413).  No name or path from a request
is ever opened.

:func:`pcm16_to_float` reads Wyoming's 16-bit mono PCM the same way (/ 32768); :func:`float_to_pcm16`
and :func:`wav_header` are the speech output (16-bit PCM; a streamed WAV has unknown length, so
its RIFF and data sizes are 0xFFFFFFFF, as OpenAI's streamed WAV responses do).
"""

from __future__ import annotations

import struct

import numpy as np

from rkspeech.runtime.audio import AudioError, AudioTooLong
from rkspeech.serve.errors import BadAudio, ServeError, TooLong


def bad_audio(exc: AudioError) -> ServeError:
    """The server's answer to a refused upload: 413 past the length limit, else 400."""
    return (TooLong if isinstance(exc, AudioTooLong) else BadAudio)(str(exc))


def pcm16_to_float(pcm: bytes) -> np.ndarray:
    if len(pcm) % 2:
        pcm = pcm[:-1]
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(chunk) -> bytes:
    """float32 in [-1, 1] -> little-endian 16-bit PCM, converted as ``rkspeech speak`` writes its
    wav (``runtime.wav.to_int16``), so served speech and the CLI's file hold the same samples."""
    from rkspeech.runtime.wav import to_int16

    return to_int16(chunk).astype("<i2").tobytes()


def wav_header(sample_rate: int, *, channels: int = 1, data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM16 WAV header; ``data_bytes=None`` for a stream of unknown length."""
    data = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate,
            sample_rate * channels * 2, channels * 2, 16) + b"data" + struct.pack("<I", data))
