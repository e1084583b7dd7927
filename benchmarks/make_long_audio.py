"""Write a long 16 kHz mono test recording: quiet noise with spoken sentences (espeak-ng), for
measuring ``rkspeech transcribe`` memory on long inputs (docs/long-inputs.md).

``python benchmarks/make_long_audio.py OUT.wav --minutes 120 [--every-s 60]``: one sentence of
five every ``--every-s`` seconds (the first at 1 s), noise at -60 dBFS between; written a minute
at a time, so generating 2 h needs a few MB.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

RATE = 16000
SENTENCES = [
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "We will meet at the train station at nine o'clock tomorrow morning.",
    "The quick brown fox jumps over the lazy dog.",
    "My phone number has changed, so please write down the new one.",
]


def _speech(text: str, folder: Path) -> np.ndarray:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is needed (apt-get install -y espeak-ng)")
    path = folder / "s.wav"
    subprocess.run([exe, "-v", "en-us", "-w", str(path), text], check=True, capture_output=True)
    with wave.open(str(path)) as w:
        rate, pcm = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)
    t = np.arange(int(len(pcm) * RATE / rate)) * rate / RATE
    return np.interp(t, np.arange(len(pcm)), pcm.astype(np.float32))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--minutes", type=float, default=120.0)
    p.add_argument("--every-s", type=float, default=60.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clips = [_speech(s, Path(tmp)) for s in SENTENCES]
    rng = np.random.default_rng(0)
    total = int(args.minutes * 60 * RATE)
    every = int(args.every_s * RATE)
    with wave.open(args.out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(RATE)
        for start in range(0, total, every):
            piece = rng.standard_normal(min(every, total - start)).astype(np.float32) * 32.0  # -60 dBFS
            clip = clips[(start // every) % len(clips)]
            n = min(len(clip), len(piece) - RATE)
            if n > 0:
                piece[RATE:RATE + n] += clip[:n]
            w.writeframes(np.clip(piece, -32768, 32767).astype(np.int16).tobytes())


if __name__ == "__main__":
    main()
