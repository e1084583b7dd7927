"""faster-whisper's ``WhisperModel`` with the encoder on an offloaded graph.

faster-whisper computes every encoder output through one method, ``WhisperModel.encode``
(``transcribe``'s window loop, ``detect_language`` and ``BatchedInferencePipeline`` all call
it) and hands the result, a ``ctranslate2.StorageView [B, 1500, d]``, to CTranslate2's decoder.
:class:`WhisperModel` overrides only that method: each ``[n_mels, 3000]`` window runs through
the offloaded encoder (onnxruntime, the rknn-toolkit2 simulator or rknn-toolkit-lite2, opened
through :func:`rkspeech.runtime.runners.open_runner`), one window at a time because the graph
has batch 1.  Everything else is faster-whisper's own code, so beam search, temperature
fallback, ``condition_on_previous_text``, prompts, hotwords, segment and word timestamps, VAD,
language detection, ``task="translate"`` and the batched pipeline keep their meaning.

An encoder built with window buckets (``rkspeech build whisper-encoder --windows 10,30``) is
passed as the build's ``plan.json``: one graph per window, each checked like the one 30 s graph;
each transcription runs its windows through the smallest graph that holds the audio
(:mod:`rkspeech.runtime.whisper.buckets`; longer audio: the 30 s graph, as without buckets).

An encoder built as consecutive graphs (``rkspeech build whisper-encoder --pieces N``, large) is
passed as the build's ``encoder-pieces.json`` (:mod:`rkspeech.runtime.whisper.pieces`): the
pieces run in turn inside ``encode``, checked as one graph (first piece's input, last piece's
output, every piece reading what the one before wrote).

The encoder graph is checked against the model before anything is decoded: input
``[1, n_mels, 3000]`` (the model's mel bins, the 30 s window of
:mod:`rkspeech.models.whisper.window`), output ``[1, 1500, d_model]``; an .rknn must also be
built for the chip in ``target``.

Time is counted where it is spent: ``model.timing`` holds seconds inside ``encode``
(``encoder_s``) and inside CTranslate2's ``generate`` / ``align`` / ``detect_language``
(``decoder_s``); everything else of a transcription is host work (feature extraction, VAD,
faster-whisper's Python loop).

Claim, checked by tests/models/test_whisper_model.py and measured in docs/whisper-transcribe.md: with
the encoder offloaded (onnxruntime, or the rk3588 fp16 simulator), text, segment boundaries and
word timings equal stock faster-whisper's (beam search, word timestamps, VAD, batched; on the
simulator a word timing may move by one 20 ms frame); ``task="translate"`` once both sides seed
CTranslate2's sampler (``transcribe_audio(seed=...)``): the temperature fallback samples.

faster-whisper is imported when the class is first used (PEP 562 ``__getattr__``), so importing
this module is cheap.
"""

from __future__ import annotations

import time

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import WINDOW_FRAMES
from rkspeech.runtime.whisper.checks import check_encoder_file, check_language, check_model_dir, model_geometry

__all__ = [
    "WhisperModel",  # noqa: F822 - built on first access by __getattr__ (PEP 562)
]

_DECODER_CALLS = ("generate", "align", "detect_language")


class _TimedCtranslate2:
    """The CTranslate2 Whisper object behind faster-whisper, with decoder calls timed."""

    def __init__(self, inner, timing: dict):
        self._inner = inner
        self._timing = timing

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in _DECODER_CALLS:
            return attr
        timing = self._timing

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                timing["decoder_s"] += time.perf_counter() - start

        return timed


def _build_class():
    import faster_whisper

    class WhisperModel(faster_whisper.WhisperModel):
        """``faster_whisper.WhisperModel`` whose ``encode`` runs an offloaded encoder graph.

        ``WhisperModel(model_dir, encoder="encoder.onnx" | "encoder.rknn" | None, backend="ort" |
        "sim" | "rknnlite", threads=N, target="rk3588", core_mask=..., **faster-whisper kwargs)``.
        ``encoder=None`` keeps CTranslate2's CPU encoder (the stock model, timed the same way).
        ``threads`` sets both ``cpu_threads`` (CTranslate2) and the onnxruntime threads unless
        ``cpu_threads`` is given.  ``backend`` defaults to ``rknnlite`` for .rknn, ``ort`` otherwise.
        Close it (or use ``with``) to release the encoder runner / simulator child.
        """

        def __init__(self, model_dir, *, encoder=None, backend=None, threads: int | None = None,
                     target: str | None = None, core_mask: str | None = None,
                     memory_limit_mb="auto", log_path: str | None = None, **kwargs):
            path = check_model_dir(model_dir)
            geometry = model_geometry(path)
            if threads is not None and threads < 0:
                raise RkspeechError(f"threads must be >= 0 (0 = library default), got {threads}")
            kwargs.setdefault("device", "cpu")
            if threads is not None:
                kwargs.setdefault("cpu_threads", threads)
            self.runner = None
            self.encoder_path = None
            self.backend = None
            if encoder is not None:  # checked and opened before the decoder is loaded
                backend, run_path = check_encoder_file(encoder, model_dir=path, backend=backend, target=target)
                if isinstance(run_path, tuple):  # consecutive pieces (encoder-pieces.json)
                    from rkspeech.runtime.whisper.pieces import open_pieces as opener
                elif isinstance(run_path, dict):  # one graph per window (a plan with buckets)
                    from rkspeech.runtime.whisper.buckets import open_windows as opener
                else:
                    from rkspeech.runtime.runners import open_runner as opener

                self.runner = opener(backend, run_path, threads=threads or None, target=target,
                                     core_mask=core_mask, memory_limit_mb=memory_limit_mb, log_path=log_path)
                ins, outs = self.runner.input_specs(), self.runner.output_specs()
                if len(ins) != 1 or len(outs) != 1:
                    self.close()
                    raise RkspeechError(f"{encoder}: a Whisper encoder graph has one input and one output; "
                                        f"this one has inputs {list(ins)} and outputs {list(outs)}")
                (self._input_name,), (self._output_name,) = ins, outs
                self.encoder_path, self.backend = encoder, backend
            try:
                super().__init__(str(path), **kwargs)
            except RkspeechError:
                self.close()
                raise
            except Exception as exc:  # noqa: BLE001 - CTranslate2 raises RuntimeError/ValueError
                self.close()
                raise RkspeechError(f"{path}: CTranslate2 cannot load it as Whisper: "
                                    f"{str(exc).splitlines()[0] if str(exc) else exc!r}") from None
            self.geometry = geometry
            self.timing = {"encoder_s": 0.0, "decoder_s": 0.0}
            self.model = _TimedCtranslate2(self.model, self.timing)
            if self.feature_extractor.mel_filters.shape[0] != geometry["n_mels"]:
                # a folder without preprocessor_config.json for a 128-bin model (large-v3):
                # faster-whisper would default to 80 bins
                from faster_whisper.feature_extractor import FeatureExtractor

                self.feature_extractor = FeatureExtractor(feature_size=geometry["n_mels"])

        def reset_timing(self) -> None:
            self.timing.update(encoder_s=0.0, decoder_s=0.0)

        def encode(self, features: np.ndarray):
            """``[n_mels, 3000]`` or ``[B, n_mels, 3000]`` features -> ``StorageView [B, 1500, d]``."""
            start = time.perf_counter()
            try:
                if self.runner is None:
                    return super().encode(features)
                import ctranslate2

                features = np.asarray(features, dtype=np.float32)
                if features.ndim == 2:
                    features = features[None]
                n_mels = self.geometry["n_mels"]
                if features.ndim != 3 or features.shape[1:] != (n_mels, WINDOW_FRAMES):
                    raise RkspeechError(
                        f"the offloaded encoder reads [{n_mels}, {WINDOW_FRAMES}] windows, faster-whisper "
                        f"passed {list(features.shape)} (chunk_length other than 30 s?)")
                outs = [self.runner.infer({self._input_name: np.ascontiguousarray(window[None])})
                        [self._output_name] for window in features]
                out = np.ascontiguousarray(np.concatenate(outs, axis=0), dtype=np.float32)
                return ctranslate2.StorageView.from_array(out)
            finally:
                self.timing["encoder_s"] += time.perf_counter() - start

        def transcribe(self, audio, language=None, *args, **kwargs):
            """faster-whisper's ``transcribe``; an unknown language code is a one-line error.  With
            window buckets, the smallest window that holds the audio runs every encoder call of
            this transcription (``runtime.whisper.buckets``)."""
            from rkspeech.runtime.whisper.buckets import WindowRunners, transcribe_in_window

            if isinstance(self.runner, WindowRunners):
                return transcribe_in_window(super().transcribe, self.runner, audio, check_language(language),
                                            *args, **kwargs)
            return super().transcribe(audio, check_language(language), *args, **kwargs)

        @property
        def window_s(self) -> int | None:
            """The window (seconds) the last transcription's encoder calls ran in; None without buckets."""
            return getattr(self.runner, "last_seconds", None)

        def close(self) -> None:
            if self.runner is not None:
                self.runner.close()
                self.runner = None

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.close()

    return WhisperModel


_CLASSES: dict = {}


def __getattr__(name: str):
    if name == "WhisperModel":
        if name not in _CLASSES:
            _CLASSES[name] = _build_class()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
