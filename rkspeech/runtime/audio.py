"""The one audio decoder: files to transcribe, reference recordings for voice cloning, HTTP uploads.

:func:`decode_audio` takes a path or the file's bytes and returns mono float32 at
``sample_rate``.  It decodes the way faster-whisper's ``decode_audio`` does (PyAV -> s16 mono at
``sample_rate`` -> float32 / 32768, undecodable frames skipped, the same frame grouping and
resampler), so the samples -- and so the transcript -- are the same whichever way a file comes
in (tests/runtime/test_audio_decode.py, tests/serve/test_serve.py).  With ``max_seconds`` the length is checked
while decoding: a small file of a low-bit-rate codec can decode to hours of audio.

What the callers differ in is a parameter: ``what`` names the input in the message ("audio
file", "reference audio", "the uploaded file"), ``allow_empty`` accepts a valid container with
no samples (a transcript of nothing is empty), ``min_seconds`` / ``max_seconds`` bound the
length.  Every refusal is an :class:`AudioError` (an ``RkspeechError``: one line, no traceback);
past ``max_seconds`` it is :class:`AudioTooLong`, which the server answers with 413.

Work is bounded by the input before anything is allocated for it.  The resampler's output grows
by ``sample_rate`` / the input's rate: an 8 KB WAV whose header declared 1 Hz became 64 M samples
in one resampler call (server RSS 810 -> 2,027 MB; ``rkspeech transcribe`` ran out of memory).
So a stream or frame declaring less than :data:`MIN_INPUT_RATE` is refused when met (telephone
audio's 8 kHz, the lowest rate of the formats speech comes in; at 16 kHz out the growth is then
at most 2x the input's samples), ``max_seconds`` is checked on each group's declared duration
before it is resampled, and a caller's ``hold`` (the server's memory budget) is asked for every
block's bytes -- and the float32 result they become -- before the decoder keeps them.

PyAV is imported when a file is decoded, so importing this module is cheap.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from rkspeech.core.errors import RkspeechError

_GROUP_SAMPLES = 500000  # faster-whisper's frame grouping before the resampler
#: The lowest sample rate any audio input may declare (files, uploads, Wyoming streams); see above.
MIN_INPUT_RATE = 8000
#: Bytes :func:`decode_audio` holds per output sample: the int16 block while decoding, and the
#: float32 result it becomes (both exist while the result is made).
HELD_BYTES_PER_SAMPLE = 2 + 4


class Holder(Protocol):
    """Where :func:`decode_audio` asks for the bytes it keeps (``serve.limits.Lease``): ``add``
    raises to refuse them (and so stops the decoding), ``give_back`` returns a part."""

    def add(self, n: int, what: str) -> None: ...

    def give_back(self, n: int) -> None: ...


class AudioError(RkspeechError):
    """An input that is not decodable audio, or not of an accepted length."""


class AudioTooLong(AudioError):
    """Audio longer than the caller's ``max_seconds``."""


def too_long_message(label: str, max_seconds: float) -> str:
    return f"{label} is longer than the limit of {max_seconds:g} s"


def decode_audio(source: str | os.PathLike | bytes, *, sample_rate: int, what: str = "audio file",
                 allow_empty: bool = False, min_seconds: float = 0.0,
                 max_seconds: float | None = None, hold: Holder | None = None) -> np.ndarray:
    """``source`` (a path, or the file's bytes) -> mono float32 at ``sample_rate``.

    Refused with a one-line :class:`AudioError` naming ``what`` (and the path): a path that does
    not exist or is a folder, 0 bytes, data PyAV cannot decode (not audio, no audio stream, or
    packets that decode to no samples), a stream declaring less than :data:`MIN_INPUT_RATE`, a
    container with no samples unless ``allow_empty``, fewer than ``min_seconds``;
    :class:`AudioTooLong` past ``max_seconds``.  With ``hold``, each block's
    :data:`HELD_BYTES_PER_SAMPLE` bytes a sample are added to it before the block is kept (what
    ``hold.add`` raises ends the decoding), and the int16 part is given back once the result is
    made: ``hold`` then holds the result's ``nbytes``."""
    raw = io.BytesIO()  # int16 while decoding: half the size of the float32 result
    for block in _blocks(source, sample_rate=sample_rate, what=what, allow_empty=allow_empty,
                         max_seconds=max_seconds):
        if hold is not None:
            hold.add(block.size * HELD_BYTES_PER_SAMPLE, "the decoded audio")
        raw.write(block)
    audio = np.frombuffer(raw.getbuffer(), dtype=np.int16).astype(np.float32) / 32768.0
    if hold is not None:
        hold.give_back(audio.size * (HELD_BYTES_PER_SAMPLE - audio.itemsize))
    if 0 < audio.size < min_seconds * sample_rate:
        raise AudioError(f"{_label(source, what)} is {audio.size / sample_rate:.2f} s long; "
                         f"give at least {min_seconds:g} s")
    return audio


def iter_audio(source: str | os.PathLike | bytes, *, sample_rate: int, what: str = "audio file",
               allow_empty: bool = False, max_seconds: float | None = None) -> Iterator[np.ndarray]:
    """:func:`decode_audio` block by block (float32 blocks of up to ~30 s, the same samples in the
    same order), so a long recording is never held whole; the same refusals, raised when met
    (a path's own problems at the first ``next``)."""
    for block in _blocks(source, sample_rate=sample_rate, what=what, allow_empty=allow_empty,
                         max_seconds=max_seconds):
        yield block.astype(np.float32) / 32768.0


def _label(source, what: str) -> str:
    return what if isinstance(source, (bytes, bytearray, memoryview)) else f"{what} {Path(source)}"


def _blocks(source, *, sample_rate: int, what: str, allow_empty: bool, max_seconds: float | None):
    """int16 blocks of the decoded audio, after the checks of the source; the empty checks at the end."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise AudioError(f"cannot decode {what} to a sample rate of {sample_rate!r}; "
                         "give a positive whole number of Hz")
    label = _label(source, what)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise AudioError(f"{label} is empty (0 bytes)")

        def open_input():
            return io.BytesIO(data)
    else:
        path = Path(source)
        if path.is_dir():
            raise AudioError(f"{label} is a folder; pass an audio file")
        if not path.is_file():
            raise AudioError(f"{label}: no such file")
        if path.stat().st_size == 0:
            raise AudioError(f"{label} is empty (0 bytes)")

        def open_input():
            return str(path)

    samples = 0
    for block in _decode(open_input, label, sample_rate, max_seconds):
        samples += block.size
        yield block
    if samples == 0:
        if _packet_bytes(open_input) > 0:  # e.g. random bytes named .mp3: probed as mp3, every packet invalid
            raise AudioError(f"{label}: cannot decode it as audio (its packets decode to no samples: "
                             "not audio, or corrupt)")
        if not allow_empty:
            raise AudioError(f"{label} holds no audio samples")


def _decode(open_input, label: str, sample_rate: int, max_seconds: float | None) -> Iterator[np.ndarray]:
    """faster-whisper's decoding steps (int16 blocks as the resampler gives them), with the length
    bound checked as frames come out."""
    import gc
    import itertools

    av = _import_av()
    limit = None if max_seconds is None else int(max_seconds * sample_rate)
    resampler = av.audio.resampler.AudioResampler(format="s16", layout="mono", rate=sample_rate)
    samples, declared = 0, 0.0  # output samples so far; input seconds so far (as the frames declare)
    try:
        with av.open(open_input(), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioError(f"{label}: cannot decode it as audio (no audio stream)")
            stream = container.streams.audio[0]
            _check_rate(label, stream.codec_context.sample_rate or stream.rate)
            frames = _checked_rates(label, _ignore_invalid_frames(av, container.decode(stream)))
            for group in itertools.chain(_group_frames(av, frames), [None]):  # None flushes the resampler
                if group is not None:
                    declared += group.samples / group.sample_rate
                    if limit is not None and int(declared * sample_rate) > limit + 1:  # before resampling it
                        raise AudioTooLong(too_long_message(label, max_seconds))
                for frame in resampler.resample(group):
                    block = frame.to_ndarray().reshape(-1)
                    samples += block.size
                    if limit is not None and samples > limit:
                        raise AudioTooLong(too_long_message(label, max_seconds))
                    yield block
    except AudioError:
        raise
    except GeneratorExit:
        raise
    except Exception as exc:  # noqa: BLE001 - PyAV raises its own error types
        raise AudioError(f"{label}: cannot decode it as audio ({_detail(exc)})") from None
    finally:
        del resampler
        gc.collect()  # as faster-whisper does: PyAV resampler objects are freed late otherwise


def _check_rate(label: str, rate) -> None:
    if rate and rate < MIN_INPUT_RATE:
        raise AudioError(f"{label} declares a sample rate of {rate} Hz; audio below {MIN_INPUT_RATE} Hz "
                         "is not accepted (resample it to 16000 Hz or more)")


def _checked_rates(label: str, frames):
    """``frames``, each frame's own rate checked (a chained stream can change rate midway)."""
    for frame in frames:
        _check_rate(label, frame.sample_rate)
        yield frame


def _ignore_invalid_frames(av, frames):
    iterator = iter(frames)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return
        except av.error.InvalidDataError:
            continue


def _group_frames(av, frames):
    fifo = av.audio.fifo.AudioFifo()
    for frame in frames:
        frame.pts = None  # no timestamp check
        fifo.write(frame)
        if fifo.samples >= _GROUP_SAMPLES:
            yield fifo.read()
    if fifo.samples > 0:
        yield fifo.read()


def _packet_bytes(open_input) -> int:
    """Bytes of audio packets PyAV finds (0 for a container with no audio data)."""
    av = _import_av()
    try:
        with av.open(open_input(), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                return 0
            return sum(p.size or 0 for p in container.demux(container.streams.audio[0]))
    except Exception:  # noqa: BLE001 - it decoded once already; a demux error here means no data
        return 0


def _detail(exc: Exception) -> str:
    """PyAV's reason without the file name it appends ('<none>' for bytes)."""
    reason = getattr(exc, "strerror", None) or (str(exc).splitlines()[0] if str(exc) else "")
    return reason or type(exc).__name__


def _import_av():
    try:
        import av
    except ImportError:
        raise RkspeechError("decoding audio needs PyAV: pip install av") from None
    return av
