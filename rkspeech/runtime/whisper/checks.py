"""Checks of what a Whisper transcription is given, before any runtime opens: the model folder
(CTranslate2's), its geometry (mel bins, width, multilingual), an encoder file or plan or pieces
manifest against that geometry and the chip, and the language.  Each mistake is one line naming
the flag and what was expected; files are read, nothing is run.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import ENCODER_FRAMES, FRAMES_PER_SECOND, WINDOW_FRAMES, bucket_frames, output_frames


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


def check_plan_encoders(plan_path, backend: str | None, target: str | None,
                        geometry: dict) -> tuple[str, dict[int, Path]]:
    """(backend, window's mel frames -> the file its runner opens) for the encoder graphs of the
    plan at ``plan_path``, each checked against the model (``geometry``) as the one 30 s graph
    is; reads files only."""
    from rkspeech.plan.whisper import load_whisper_plan
    from rkspeech.runtime.whisper.pieces import MANIFEST_NAME

    plan = load_whisper_plan(plan_path)
    if plan.pieces:
        raise RkspeechError(f"plan {plan.path}: its encoder is built as {len(plan.pieces)} pieces; pass the "
                            f"{MANIFEST_NAME} beside it as the encoder")
    backend = backend or ("rknnlite" if plan.on_npu else "ort")  # as model.default_backend
    out = {}
    for seconds, path in plan.files("rknn" if backend == "rknnlite" else "onnx").items():
        frames = bucket_frames(seconds)
        run_path, in_shape, out_shape = _file_geometry(backend, path, target, geometry, frames)
        if in_shape is not None:
            check_encoder_geometry(str(path), in_shape, out_shape, frames=frames, **geometry)
        out[frames] = run_path
    return backend, out
