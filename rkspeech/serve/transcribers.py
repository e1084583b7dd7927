"""Opening the transcription engines of a server: one model per engine, each with its own encoder
runner (and, on a board, its own NPU core) -- Whisper models, or Qwen3-ASR plans behind the same
call (``runtime.qwen3_asr.whisper_api``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from rkspeech.core.errors import RkspeechError


def open_engines(open_one: Callable[[str | None], object], engines: int, masks: Sequence) -> list:
    """``engines`` models ``open_one(core_mask)``, engine i on ``masks[i % len]``; those already
    open are closed when one fails."""
    if engines < 1:
        raise RkspeechError(f"--asr-engines must be >= 1, got {engines}")
    models = []
    try:
        for i in range(engines):
            models.append(open_one(masks[i % len(masks)]))
    except BaseException:
        for m in models:
            with contextlib.suppress(Exception):
                m.close()
        raise
    return models


def _masks(backend: str | None, target: str | None, core_mask: Sequence[str] | None) -> tuple:
    """One NPU core mask per engine, cycled: as given, else one per core of ``target``
    (:func:`rkspeech.core.targets.cores_for`); (None,) off the NPU."""
    if backend != "rknnlite":
        return (None,)
    from rkspeech.core.targets import cores_for

    return tuple(core_mask) if core_mask else cores_for(target)


def open_transcribers(model_dir, *, engines: int = 1, encoder=None, backend: str | None = None,
                      target: str | None = None, core_mask: Sequence[str] | None = None,
                      threads: int = 1, compute_type: str = "float32") -> list:
    """``engines`` :class:`~rkspeech.runtime.whisper.model.WhisperModel` instances, each with its
    own encoder runner (onnxruntime session, simulator, or an rknn-lite context).

    With ``backend="rknnlite"`` engine i is pinned to NPU core ``core_mask[i % len]`` (default:
    one per core of ``target``) -- written to the rknn-toolkit-lite2 API, not run on a board
    here.  ``threads`` is per engine (CTranslate2 decoder and onnxruntime).
    """
    from rkspeech.runtime.whisper.model import WhisperModel

    return open_engines(lambda mask: WhisperModel(model_dir, encoder=encoder, backend=backend, threads=threads,
                                                  target=target, core_mask=mask, compute_type=compute_type),
                        engines, _masks(backend, target, core_mask))


def open_qwen3_asr(plan_path, *, engines: int = 1, backend: str = "ort", core_mask: Sequence[str] | None = None,
                   threads: int = 1) -> list:
    """``engines`` Qwen3-ASR plans opened behind faster-whisper's call
    (:class:`~rkspeech.runtime.qwen3_asr.whisper_api.Qwen3ASRWhisperAPI`), each with its own encoder
    runners and decoder sessions; on ``rknnlite`` engine i on ``core_mask[i % len]`` (default: one
    per core of the plan's target)."""
    from rkspeech.plan.asr import load_asr_plan
    from rkspeech.runtime.qwen3_asr.whisper_api import Qwen3ASRWhisperAPI

    target = load_asr_plan(plan_path).target
    return open_engines(lambda mask: Qwen3ASRWhisperAPI(plan_path, backend=backend, threads=threads or None,
                                                        core_mask=mask),
                        engines, _masks(backend, target, core_mask))
