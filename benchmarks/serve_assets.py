"""What ``bench_serve.py`` serves: the reduced synthetic custom-voice Qwen3-TTS model and its vocoder
plan on onnxruntime, built as the tests build them (tests/conftest.py ``tts_custom_ckpt``,
tests/streaming_fixtures.py: step graphs B=4 and B=16, an ``impl: onnx`` plan), cached under
``~/.cache/rkspeech/bench_serve``; a Whisper encoder exported to onnx (offloaded to onnxruntime);
and espeak-ng recordings at 16 kHz."""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "rkspeech" / "bench_serve"


def reduced_speech(cache: Path = CACHE) -> tuple[Path, Path]:
    """(model root, plan.json) of the reduced synthetic TTS model, built once."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.plan.plan import write_plan
    from rkspeech.stepgraph.step import VocoderStep

    root, plan = cache / "tts_custom_reduced", cache / "plan" / "plan.json"
    if not (root / "config.json").is_file():
        write_tts_checkpoint(root, "reduced", "custom-voice", 0)
    if not plan.is_file():
        plan.parent.mkdir(parents=True, exist_ok=True)
        model, _, _ = load_vocoder(root)
        graphs = {}
        for role, batch in (("first", 4), ("main", 16)):
            graphs[role] = plan.parent / f"step_B{batch}.onnx"
            if not graphs[role].is_file():
                export_step_onnx(VocoderStep(model, batch), graphs[role])
        write_plan(plan, placement="cpu-fp32", target=None, contracts={r: read_contract(p) for r, p in graphs.items()},
                   onnx=graphs)
    return root, plan


def whisper_encoder_onnx(model_dir, path: Path) -> Path:
    """The encoder of the CTranslate2 Whisper folder ``model_dir`` exported to ``path`` (kept if it is there)."""
    if not Path(path).is_file():
        from rkspeech.export.whisper_onnx import export_encoder
        from rkspeech.models.whisper.weights import load_whisper_encoder

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        export_encoder(load_whisper_encoder(model_dir).model, path)
    return Path(path)


def espeak_16k(text: str, path: Path) -> Path:
    from faster_whisper.audio import decode_audio

    raw = path.with_suffix(".22k.wav")
    subprocess.run([shutil.which("espeak-ng"), "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True,
                   capture_output=True)
    pcm = (decode_audio(str(raw)) * 32768.0).round().clip(-32768, 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(pcm.tobytes())
    return path
