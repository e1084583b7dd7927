"""What runs Whisper: faster-whisper with the encoder offloaded, and what surrounds it.

* :mod:`.model`: :class:`WhisperModel` (faster-whisper's whole transcribe, ``encode`` on an
  offloaded graph) and the checks of a model folder, an encoder file and a language code;
* :mod:`.encoder`: :func:`open_encoder`, one encoder graph on any runner behind the decoder's
  interface (the build's checks use it);
* :mod:`.pieces`: an encoder built as consecutive graphs (``encoder-pieces.json``);
* :mod:`.buckets`: one encoder graph per window length (a plan with buckets), the smallest
  that holds the audio runs;
* :mod:`.transcript`: :func:`transcribe_audio` and the comparison with a reference transcript;
* :mod:`.subtitles`: the txt / srt / vtt / json writers.

The names below are resolved on first access (PEP 562), so importing this package imports neither
faster-whisper nor onnxruntime.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "WhisperModel": "model",
    "check_encoder_file": "model",
    "check_language": "model",
    "check_model_dir": "model",
    "is_multilingual": "model",
    "model_geometry": "model",
    "open_encoder": "encoder",
    "Transcription": "transcript",
    "transcribe_audio": "transcript",
    "compare_transcriptions": "transcript",
    "write_outputs": "subtitles",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
