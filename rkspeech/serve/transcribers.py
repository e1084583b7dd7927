"""Opening the transcription engines of a server: one Whisper model per engine, each with its own
encoder runner (and, on a board, its own NPU core)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from rkspeech.core.errors import RkspeechError


def open_transcribers(model_dir, *, engines: int = 1, encoder=None, backend: str | None = None,
                      target: str | None = None, core_mask: Sequence[str] | None = None,
                      threads: int = 1, compute_type: str = "float32") -> list:
    """``engines`` :class:`~rkspeech.runtime.whisper.model.WhisperModel` instances, each with its
    own encoder runner (onnxruntime session, simulator, or an rknn-lite context).

    With ``backend="rknnlite"`` engine i is pinned to NPU core ``core_mask[i % len]`` (default:
    one per core of ``target``, :func:`rkspeech.core.targets.cores_for`) -- written to the
    rknn-toolkit-lite2 API, not run on a board here.  ``threads`` is per engine (CTranslate2
    decoder and onnxruntime).
    """
    from rkspeech.runtime.whisper.model import WhisperModel

    if engines < 1:
        raise RkspeechError(f"--asr-engines must be >= 1, got {engines}")
    masks: tuple = (None,)
    if backend == "rknnlite":
        from rkspeech.core.targets import cores_for

        masks = tuple(core_mask) if core_mask else cores_for(target)
    models = []
    try:
        for i in range(engines):
            models.append(WhisperModel(model_dir, encoder=encoder, backend=backend, threads=threads,
                                       target=target, core_mask=masks[i % len(masks)], compute_type=compute_type))
    except BaseException:
        for m in models:
            with contextlib.suppress(Exception):
                m.close()
        raise
    return models
