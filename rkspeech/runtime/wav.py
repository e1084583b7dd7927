"""Write PCM as a 16-bit mono wav, atomically (numpy + the standard library; soundfile optional).

Samples are clipped to [-1, 1] and rounded to int16 here (``round(x * 32767)``), so the file is
the same whichever writer is used: soundfile when it is installed, else the stdlib ``wave``
module (a board needs no libsndfile).  The file is written under a temporary name in the
target folder and renamed into place; a failure leaves an earlier file untouched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkspeech.core.atomic import atomic_path
from rkspeech.core.errors import RkspeechError


def to_int16(pcm) -> np.ndarray:
    x = np.asarray(pcm, dtype=np.float32).reshape(-1)
    if x.size and not np.all(np.isfinite(x)):
        raise RkspeechError("audio contains NaN or inf samples; the engine output is broken")
    return np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)


def write_wav(path, pcm, sample_rate: int, *, writer: str = "auto") -> Path:
    """Write ``pcm`` (float in [-1, 1]) to ``path``; ``writer`` is "auto", "soundfile" or "wave"."""
    out = Path(path)
    if not out.parent.is_dir():
        raise RkspeechError(f"cannot write {out}: folder {out.parent} does not exist")
    data = to_int16(pcm)
    sf = None
    if writer in ("auto", "soundfile"):
        try:
            import soundfile as sf  # noqa: F811
        except (ImportError, OSError):  # OSError: the module is there, libsndfile is not
            if writer == "soundfile":
                raise RkspeechError("soundfile is not installed: pip install soundfile") from None
            sf = None
    try:
        with atomic_path(out, suffix=".wav") as tmp:
            if sf is not None:
                sf.write(str(tmp), data, int(sample_rate), subtype="PCM_16", format="WAV")
            else:
                import wave

                with wave.open(str(tmp), "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(int(sample_rate))
                    w.writeframes(data.astype("<i2").tobytes())
    except OSError as exc:
        raise RkspeechError(f"cannot write {out}: {exc}") from None
    return out


def wav_bytes(pcm, sample_rate: int) -> bytes:
    """``pcm`` as the bytes of a 16-bit mono wav file (stdlib ``wave``, samples as :func:`to_int16`):
    what a file of :func:`write_wav` would hold, for a reader that takes a file's bytes
    (``runtime.audio.decode_audio``: the speech check transcribes synthesized audio as
    ``rkspeech transcribe`` reads ``speak``'s wav)."""
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(to_int16(pcm).astype("<i2").tobytes())
    return buf.getvalue()


class WavWriter:
    """A 16-bit mono wav written as the audio arrives, so memory stays flat with its length.

    ``with WavWriter(path, rate) as w: w.write(pcm)`` (any number of times).  Samples go to a
    unique temporary name beside ``path`` (stdlib ``wave``, which rewrites the header's sizes
    when closed); when the block ends without an error the file is renamed onto ``path``, else
    it is removed and an earlier file at ``path`` is untouched.  Samples are converted as in
    :func:`write_wav`, so the bytes equal a one-shot write of the concatenated audio."""

    def __init__(self, path, sample_rate: int):
        self.path = Path(path)
        self.sample_rate = int(sample_rate)
        self.frames = 0
        self._ctx = None
        self._wave = None

    def __enter__(self) -> WavWriter:
        import wave

        if not self.path.parent.is_dir():
            raise RkspeechError(f"cannot write {self.path}: folder {self.path.parent} does not exist")
        self._ctx = atomic_path(self.path, suffix=".wav")
        try:
            tmp = self._ctx.__enter__()
            self._wave = wave.open(str(tmp), "wb")
        except OSError as exc:
            self._ctx.__exit__(type(exc), exc, None)
            raise RkspeechError(f"cannot write {self.path}: {exc}") from None
        self._wave.setnchannels(1)
        self._wave.setsampwidth(2)
        self._wave.setframerate(self.sample_rate)
        return self

    def write(self, pcm) -> None:
        data = to_int16(pcm)
        if data.size:
            try:
                self._wave.writeframes(data.astype("<i2").tobytes())
            except OSError as exc:
                raise RkspeechError(f"cannot write {self.path}: {exc}") from None
            self.frames += int(data.size)

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._wave.close()  # rewrites the header's sizes
        except OSError as err:
            if exc_type is None:
                self._ctx.__exit__(type(err), err, None)  # removes the temporary file
                raise RkspeechError(f"cannot write {self.path}: {err}") from None
        if exc_type is not None:
            self._ctx.__exit__(exc_type, exc, tb)  # removes the temporary file, keeps the error
            return False
        try:
            self._ctx.__exit__(None, None, None)  # renames into place
        except OSError as err:
            raise RkspeechError(f"cannot write {self.path}: {err}") from None
        return False


def read_wav_int16(path) -> tuple[np.ndarray, int]:
    """(int16 samples, sample rate) of a mono 16-bit wav, with the stdlib (for tests and checks)."""
    import wave

    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise RkspeechError(f"{path}: expected mono 16-bit PCM")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()
