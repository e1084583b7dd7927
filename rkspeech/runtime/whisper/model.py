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
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import ENCODER_FRAMES, FRAMES_PER_SECOND, WINDOW_FRAMES, output_frames

__all__ = [
    "WhisperModel",  # noqa: F822 - built on first access by __getattr__ (PEP 562)
    "check_encoder_file",
    "check_encoder_geometry",
    "check_language",
    "check_model_dir",
    "is_multilingual",
    "model_geometry",
]

_DECODER_CALLS = ("generate", "align", "detect_language")


def check_model_dir(model_dir: str | Path, *, flag: str = "--model-dir") -> Path:
    """``model_dir`` as a Path when it holds a CTranslate2 Whisper model (model.bin, config.json);
    ``flag``: the caller's name for it in the message (serve's and speech-check's ``--asr-model-dir``)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise RkspeechError(f"{path}: no such folder ({flag} wants a CTranslate2/faster-whisper Whisper folder)")
    missing = [n for n in ("model.bin", "config.json") if not (path / n).is_file()]
    if missing:
        raise RkspeechError(f"{path} is not a CTranslate2 Whisper model folder (no {', '.join(missing)}); "
                            "use a faster-whisper model folder (model.bin, config.json, tokenizer.json)")
    return path


def model_geometry(model_dir: str | Path) -> dict:
    """``{"n_mels", "d_model"}`` of a CTranslate2 Whisper folder, read from the file index only
    (12 ms for tiny.en here)."""
    from rkspeech.models.whisper.ct2_file import Ct2ModelFile

    path = check_model_dir(model_dir)
    try:
        variables = Ct2ModelFile(path / "model.bin").variables
    except RkspeechError:
        raise
    except Exception as exc:  # noqa: BLE001 - a foreign model.bin fails in struct/unicode decoding
        raise RkspeechError(f"{path}/model.bin is not a CTranslate2 model file ({exc})") from None
    emb = variables.get("decoder/embeddings/weight")
    conv = variables.get("encoder/conv1/weight")
    if emb is None or conv is None:
        raise RkspeechError(f"{path} is a CTranslate2 model but not Whisper (no encoder conv1 / decoder "
                            "embeddings)")
    return {"n_mels": int(conv.shape[1]), "d_model": int(emb.shape[1])}


def is_multilingual(model_dir: str | Path) -> bool:
    """What CTranslate2 reports as ``is_multilingual``: a vocabulary of >= 51865 tokens (the .en
    models have 51864), read from the file index."""
    from rkspeech.models.whisper.ct2_file import Ct2ModelFile

    emb = Ct2ModelFile(check_model_dir(model_dir) / "model.bin").variables["decoder/embeddings/weight"]
    return int(emb.shape[0]) >= 51865


def _mismatch(source: str, what: str, got, want, hint: str) -> RkspeechError:
    return RkspeechError(f"{source}: the encoder graph has {what} {got}, this model needs {want} ({hint})")


def check_encoder_geometry(source: str, in_shape, out_shape, *, n_mels: int, d_model: int,
                           frames: int = WINDOW_FRAMES) -> None:
    """Refuse an encoder graph that does not fit the model: input ``[1, n_mels, 3000]``, output
    ``[1, 1500, d_model]`` (a symbolic batch dim passes: we feed one window at a time);
    ``frames``: a bucket's window (``[1, n_mels, frames] -> [1, frames / 2, d_model]``)."""
    rebuild = "build the encoder from this model: rkspeech build whisper-encoder --model-dir DIR"
    in_shape, out_shape = list(in_shape), list(out_shape)
    if len(in_shape) != 3 or len(out_shape) != 3:
        raise RkspeechError(f"{source}: a Whisper encoder maps [1, n_mels, 3000] -> [1, 1500, d]; this graph "
                            f"maps {in_shape} -> {out_shape}")
    if in_shape[1] != n_mels:
        raise _mismatch(source, "n_mels", in_shape[1], n_mels, f"another Whisper size's encoder? {rebuild}")
    if in_shape[2] != frames or out_shape[1] != output_frames(frames):
        raise _mismatch(source, "a window of", f"{in_shape[2]} mel / {out_shape[1]} encoder frames",
                        f"{frames} / {output_frames(frames)} ({frames // FRAMES_PER_SECOND} s)",
                        "faster-whisper reads 30 s windows (shorter ones only as buckets beside it, "
                        f"--windows); {rebuild}")
    if out_shape[2] != d_model:
        raise _mismatch(source, "d_model", out_shape[2], d_model, f"another Whisper size's encoder? {rebuild}")


def default_backend(encoder: str | Path) -> str:
    """The backend ``encoder`` runs on when none is given: ``rknnlite`` for an .rknn and for a
    plan placed on the NPU (``placement: npu``), else ``ort`` (an .onnx, a pieces manifest)."""
    from rkspeech.plan.whisper import is_whisper_plan, load_whisper_plan

    encoder = Path(encoder)
    if encoder.suffix.lower() == ".rknn":
        return "rknnlite"
    if encoder.suffix.lower() == ".json" and is_whisper_plan(encoder):
        return "rknnlite" if load_whisper_plan(encoder).on_npu else "ort"
    return "ort"


def check_encoder_file(encoder: str | Path, *, model_dir: str | Path, backend: str | None = None,
                       target: str | None = None) -> tuple[str, Path | tuple[Path, ...]]:
    """(backend, file the runner opens) once ``encoder`` is known to fit the model in ``model_dir``
    (file kind, chip of an .rknn, n_mels, window, d_model); reads files only, opens no runtime.
    For a pieces manifest (``encoder-pieces.json``, default backend ``ort``) the second item is
    the tuple of piece files, in order; for a plan with window buckets (``plan.json``, default
    backend ``rknnlite`` when the plan is placed on the NPU, else ``ort``) a dict, window's mel
    frames -> file (``runtime.whisper.buckets``)."""
    from rkspeech.plan.whisper import is_whisper_plan
    from rkspeech.runtime.whisper.pieces import is_manifest

    encoder = Path(encoder)
    geometry = model_geometry(model_dir)
    if is_manifest(encoder) and is_whisper_plan(encoder):
        from rkspeech.runtime.whisper.buckets import check_plan_encoders

        return check_plan_encoders(encoder, backend, target, geometry)
    if is_manifest(encoder):
        return _check_pieces(encoder, backend or "ort", target, geometry)
    backend = backend or ("rknnlite" if encoder.suffix.lower() == ".rknn" else "ort")
    run_path, in_shape, out_shape = _file_geometry(backend, encoder, target, geometry)
    if in_shape is not None:
        check_encoder_geometry(str(encoder), in_shape, out_shape, **geometry)
    return backend, run_path


def _file_geometry(backend: str, path: Path, target: str | None, geometry: dict,
                   frames: int = WINDOW_FRAMES) -> tuple[Path, list | None, list | None]:
    """(file the runner opens, input shape, output shape) read from the file alone; shapes None
    when an .rknn does not record them; ``frames``: the window the graph should have."""
    from rkspeech.runtime.runners import check_runner_file
    from rkspeech.runtime.runners.base import onnx_io_specs

    if path.suffix.lower() == ".rknn":
        from rkspeech.core.targets import DEFAULT_TARGET
        from rkspeech.contracts.rknn_file import read_container

        container = read_container(path, expect_target=(target or DEFAULT_TARGET).lower())
        if backend == "sim" and path.with_suffix(".onnx").is_file():
            path = path.with_suffix(".onnx")  # the x86 simulator builds from the .onnx beside it
        else:
            path = check_runner_file(backend, path)
            if len(container.inputs) != 1 or len(container.outputs) != 1:
                return path, None, None
            return (path, _rknn_shape(container.inputs[0].shape, [1, geometry["n_mels"], frames]),
                    _rknn_shape(container.outputs[0].shape, [1, output_frames(frames), geometry["d_model"]]))
    path = check_runner_file(backend, path)
    ins, outs = onnx_io_specs(path, static=False)
    if len(ins) != 1 or len(outs) != 1:
        raise RkspeechError(f"{path}: a Whisper encoder graph has one input and one output; this one has "
                            f"inputs {list(ins)} and outputs {list(outs)}")
    return path, list(next(iter(ins.values()))[0]), list(next(iter(outs.values()))[0])


def _check_pieces(manifest: Path, backend: str, target: str | None, geometry: dict) -> tuple[str, tuple[Path, ...]]:
    """The pieces' files for ``backend``, checked as one encoder graph: the manifest's contract,
    then the chain read from the files (ONNX without weights; .rknn headers with the chip)."""
    from rkspeech.runtime.runners import check_runner_file
    from rkspeech.runtime.runners.base import onnx_io_specs
    from rkspeech.runtime.runners.segmented import chain_specs
    from rkspeech.runtime.whisper.pieces import read_manifest

    pieces = read_manifest(manifest)
    paths = pieces.files(backend)
    contract = pieces.contract
    source = str(manifest)
    for key, name in (("n_mels", "n_mels"), ("d", "d_model")):
        if key in contract and contract[key] != geometry[name]:
            raise _mismatch(source, name, contract[key], geometry[name], "another Whisper size's encoder? build the "
                            "encoder from this model: rkspeech build whisper-encoder --model-dir DIR --pieces N")
    specs, names = [], [p.name for p in paths]
    for path in paths:
        path = check_runner_file(backend, path)
        if backend == "rknnlite":
            from rkspeech.core.targets import DEFAULT_TARGET
            from rkspeech.contracts.rknn_file import read_container

            c = read_container(path, expect_target=(target or DEFAULT_TARGET).lower())
            specs.append(({t.name: (tuple(t.shape), None) for t in c.inputs},
                          {t.name: (tuple(t.shape), None) for t in c.outputs}))
        else:
            specs.append(onnx_io_specs(path, static=False))
    ins, outs = chain_specs(specs, names)
    if len(ins) != 1 or len(outs) != 1:
        raise RkspeechError(f"{manifest}: chained, the pieces have inputs {list(ins)} and outputs {list(outs)}; a "
                            "Whisper encoder has one input and one output")
    (in_shape, _), = ins.values()
    (out_shape, _), = outs.values()
    if backend == "rknnlite":
        in_shape = _rknn_shape(in_shape, [1, geometry["n_mels"], WINDOW_FRAMES])
        out_shape = _rknn_shape(out_shape, [1, ENCODER_FRAMES, geometry["d_model"]])
    check_encoder_geometry(source, in_shape, out_shape, **geometry)
    return backend, paths


def _rknn_shape(shape, expected: list) -> list:
    """An .rknn may record a 3-D tensor in another layout or padded with 1s: when its dims other
    than 1 are those of ``expected``, it is ``expected``; otherwise the dims as recorded."""
    dims = [int(d) for d in shape]
    if sorted(d for d in dims if d != 1) == sorted(d for d in expected if d != 1):
        return list(expected)
    return dims


def check_language(language: str | None, *, multilingual: bool | None = None) -> str | None:
    """``language`` when the model knows it (None or "auto" = detect); else a one-line error
    listing the valid codes.  ``multilingual=False`` (an .en model) accepts only "en" (stock
    faster-whisper would silently transcribe as English); None checks against every code."""
    if language in (None, "", "auto"):
        return None
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    valid = ["en"] if multilingual is False else list(_LANGUAGE_CODES)
    if language not in valid:
        kind = "an English-only model" if multilingual is False else "Whisper"
        raise RkspeechError(f"unknown language {language!r} for {kind}; valid: auto, {', '.join(valid)}")
    return language


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
