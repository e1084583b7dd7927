"""A Whisper encoder built as consecutive graphs, as one encoder for transcription.

``rkspeech build whisper-encoder --pieces N`` (large: 2.55 GB fp32, too big to convert whole on
a 24 GB host, docs/whisper-sizes.md) writes ``encoder.partK.onnx`` / ``encoder.partK.rknn`` and
:data:`MANIFEST_NAME` beside them: the pieces in order, the names of the encoder's input and
output, and the contract string piece 0's .rknn carries (``n_mels``, ``n_frames``,
``n_audio_ctx``, ``d``).  ``WhisperModel(encoder="OUT/encoder-pieces.json")`` and ``rkspeech
transcribe --encoder OUT/encoder-pieces.json`` take that file as the encoder:

* ``ort``: one onnxruntime session per piece, all open (:class:`~rkspeech.runtime.runners.segmented.PiecesRunner`);
* ``sim``: each piece built in its own simulator child per window, one at a time
  (:meth:`~rkspeech.runtime.runners.segmented.SegmentedSimulator.from_pieces`: bounded memory,
  K builds per window);
* ``rknnlite``: one rknn-toolkit-lite2 context per piece, all loaded (large: 1.36 GB of .rknn
  in four files); not run here (no board).

The pieces hand the residual stream on by tensor name, so the chain itself says whether they are
listed in order (``runners.segmented.chain_specs``).  Paths in the manifest are relative to it.
Standard library only at import time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError

MANIFEST_NAME = "encoder-pieces.json"
FORMAT = "rkspeech/whisper-encoder-pieces/1"
_KIND = {"ort": "onnx", "sim": "onnx", "rknnlite": "rknn"}


@dataclass(frozen=True)
class EncoderPieces:
    """A read manifest: absolute paths of the pieces in order, and the build's contract."""

    manifest: Path
    onnx: tuple[Path, ...]
    rknn: tuple[Path, ...]
    input: str
    output: str
    custom_string: str
    target: str | None = None

    @property
    def contract(self) -> dict:
        try:
            contract = json.loads(self.custom_string)
        except (TypeError, ValueError):
            contract = None
        if not isinstance(contract, dict):
            raise RkspeechError(f"{self.manifest}: custom_string is not the build's JSON contract")
        return contract

    def files(self, backend: str) -> tuple[Path, ...]:
        """The pieces ``backend`` runs (.onnx for ort / sim, .rknn for rknnlite), all present."""
        kind = _KIND.get(backend)
        if kind is None:
            raise RkspeechError(f"unknown backend {backend!r}; choose one of {', '.join(_KIND)}")
        paths = getattr(self, kind)
        missing = [f"{k} ({p.name})" for k, p in enumerate(paths) if not p.is_file()]
        if missing:
            raise RkspeechError(f"{self.manifest}: {len(missing)} of {len(paths)} .{kind} pieces missing: piece "
                                f"{', '.join(missing)}; rebuild with rkspeech build whisper-encoder --pieces "
                                f"{len(paths)} --out-dir {self.manifest.parent}")
        return paths


def is_manifest(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() == ".json"


def write_manifest(out_dir: str | os.PathLike, onnx_paths: list[Path], *, input_name: str, output_name: str,
                   custom_string: str, target: str) -> Path:
    """Write :data:`MANIFEST_NAME` in ``out_dir`` (atomically) for the pieces ``onnx_paths``
    (their .rknn named the same with ``.rknn``, whether converted yet or not)."""
    from rkspeech.core.atomic import write_json

    out_dir = Path(out_dir)
    pieces = [{"onnx": os.path.relpath(p, out_dir), "rknn": os.path.relpath(Path(p).with_suffix(".rknn"), out_dir)}
              for p in onnx_paths]
    path = out_dir / MANIFEST_NAME
    write_json(path, {"format": FORMAT, "input": input_name, "output": output_name, "target": target,
                      "custom_string": custom_string, "pieces": pieces})
    return path


def read_manifest(path: str | os.PathLike) -> EncoderPieces:
    """The manifest at ``path``; anything malformed is a one-line RkspeechError."""
    path = Path(path)
    if not path.is_file():
        raise RkspeechError(f"{path}: no such file (--encoder wants enc.onnx, enc.rknn or a build's {MANIFEST_NAME})")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RkspeechError(f"{path}: not a readable JSON encoder manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RkspeechError(f"{path}: not an encoder pieces manifest (format {FORMAT!r}, as rkspeech build "
                            "whisper-encoder --pieces N writes it)")
    pieces = data.get("pieces")
    if (not isinstance(pieces, list) or not pieces
            or not all(isinstance(p, dict) and isinstance(p.get("onnx"), str) and isinstance(p.get("rknn"), str)
                       for p in pieces)):
        raise RkspeechError(f"{path}: 'pieces' must list at least one {{\"onnx\": ..., \"rknn\": ...}} entry")
    for key in ("input", "output", "custom_string"):
        if not isinstance(data.get(key), str):
            raise RkspeechError(f"{path}: no {key!r} string")
    base = path.parent
    return EncoderPieces(manifest=path, onnx=tuple(base / p["onnx"] for p in pieces),
                         rknn=tuple(base / p["rknn"] for p in pieces), input=data["input"], output=data["output"],
                         custom_string=data["custom_string"], target=data.get("target"))


def open_pieces(backend: str, paths, *, threads: int | None = None, target: str | None = None,
                core_mask: str | None = None, memory_limit_mb: float | None | str = "auto",
                log_path: str | None = None, dtype: str = "fp16"):
    """One Runner over the pieces ``paths`` (checked files, in order) on ``backend``."""
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.runners.segmented import PiecesRunner, SegmentedSimulator

    names = [Path(p).name for p in paths]
    if backend == "sim":
        from rkspeech.core.targets import DEFAULT_TARGET, TARGETS

        target = (target or DEFAULT_TARGET).lower()
        if target not in TARGETS:
            raise RkspeechError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
        if memory_limit_mb == "auto":
            from rkspeech.core.child import default_memory_limit_mb

            memory_limit_mb = default_memory_limit_mb()
        return SegmentedSimulator.from_pieces(paths, target=target, dtype=dtype,
                                              memory_limit_mb=memory_limit_mb, log_path=log_path)
    runners = []
    try:
        for p in paths:
            runners.append(open_runner(backend, p, threads=threads, target=target, core_mask=core_mask))
        return PiecesRunner(runners, names)
    except BaseException:
        for r in runners:
            r.close()
        raise
