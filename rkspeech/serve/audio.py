"""Audio in and out of the server, in memory only.

:func:`decode_upload` is faster-whisper's ``decode_audio`` (PyAV -> s16 mono 16 kHz -> float32 /
32768, the same resampler and frame handling, so the samples -- and the transcript -- equal what
``rkspeech transcribe`` reads from the same file) over the uploaded bytes, with a bound on the
decoded length checked while decoding: a 25 MB upload of a low-bit-rate codec could otherwise
decode to hours of audio.  No name or path from a request is ever opened.

:func:`pcm16_to_float` reads Wyoming's 16-bit mono PCM the same way (/ 32768); :func:`float_to_pcm16`
and :func:`wav_header` are the speech output (16-bit PCM; a streamed WAV has unknown length, so
its RIFF and data sizes are 0xFFFFFFFF, as OpenAI's streamed WAV responses do).
"""

from __future__ import annotations

import io
import struct

import numpy as np

from rkspeech.models.whisper.window import SAMPLE_RATE
from rkspeech.serve.engines import ServeError


class BadAudio(ServeError):
    status = 400
    code = "bad-audio"


class TooLong(ServeError):
    status = 413
    code = "too-long"


def decode_upload(data: bytes, *, max_audio_s: float, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Uploaded file bytes -> mono float32 at ``sample_rate``; :class:`BadAudio` when they are not
    audio or decode to nothing, :class:`TooLong` past ``max_audio_s``."""
    import gc

    import av
    from faster_whisper.audio import (
        _group_frames,
        _ignore_invalid_frames,
        _resample_frames,
    )

    if not data:
        raise BadAudio("the uploaded file is empty")
    limit_bytes = int(max_audio_s * sample_rate) * 2
    raw = io.BytesIO()
    resampler = av.audio.resampler.AudioResampler(format="s16", layout="mono", rate=sample_rate)
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise BadAudio("the uploaded file has no audio stream")
            frames = _resample_frames(_group_frames(_ignore_invalid_frames(container.decode(audio=0)), 500000),
                                      resampler)
            for frame in frames:
                raw.write(frame.to_ndarray())
                if raw.tell() > limit_bytes:
                    raise TooLong(f"the audio is longer than the server's limit of {max_audio_s:g} s")
    except (BadAudio, TooLong):
        raise
    except Exception as exc:  # noqa: BLE001 - PyAV raises its own error types
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadAudio(f"cannot decode the uploaded file as audio: {first}") from None
    finally:
        del resampler
        gc.collect()  # as faster-whisper does: PyAV resampler objects are freed late otherwise
    audio = np.frombuffer(raw.getbuffer(), dtype=np.int16).astype(np.float32) / 32768.0
    if audio.size == 0:
        raise BadAudio("the uploaded file decodes to no audio samples (not audio, or corrupt)")
    return audio


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
