"""One reader for every contract: ``read_contract(path)`` for an .onnx or an .rknn.

An .onnx carries its contract as metadata and is checked against the graph's own inputs and
outputs, so an edited or foreign contract is refused here rather than surfacing as an
onnxruntime error mid-decode.  An .rknn carries it as the build's custom string (the graph I/O
there is the compiler's, checked by the runtime when it loads).  The metadata is read with the
standard library (``onnx_file``); files that reader does not understand fall back to ``onnx`` or
to onnxruntime's model metadata.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypeVar

from rkspeech.contracts.base import CONTRACT_KEY, Contract
from rkspeech.contracts.kinds import KINDS
from rkspeech.contracts.onnx_file import read_graph_io, read_metadata
from rkspeech.contracts.rknn_file import read_container
from rkspeech.core.errors import RkspeechError

C = TypeVar("C", bound=Contract)


def parse_contract(text: str, kind: type[C] | None = None) -> C:
    """The contract in ``text`` (JSON): any known kind, or only ``kind`` when given."""
    if kind is not None:
        return kind.from_json(text)
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError) as exc:
        raise RkspeechError(f"contract is not valid JSON: {exc}") from None
    fmt = d.get("format") if isinstance(d, dict) else None
    if fmt not in KINDS:
        raise RkspeechError(f"not an rkspeech contract (format {fmt!r}; known: {', '.join(KINDS)})")
    return KINDS[fmt].from_dict(d)


def check_onnx_file(path) -> Path:
    """Refuse, before a conversion starts, a path that is missing, a folder, or not an ONNX model
    (a text file named .onnx walks as no protobuf graph)."""
    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"{p} is a directory; pass an .onnx file")
    if not p.is_file():
        raise RkspeechError(f"{p}: no such ONNX file")
    read_graph_io(p)
    return p


def check_contract_against_graph(path, contract: Contract) -> None:
    """The contract's input/output shapes must be the graph's."""
    ins, outs = read_graph_io(path)
    want = {**contract.input_shapes(), **contract.output_shapes()}
    have = {**ins, **outs}
    for name, shape in want.items():
        if name not in have:
            raise RkspeechError(f"{path}: its contract names {name} {shape}, the graph has no such "
                                f"input/output (graph: {', '.join(sorted(have))}); re-export it")
        if list(have[name]) != list(shape):
            raise RkspeechError(f"{path}: its contract says {name} is {list(shape)}, the graph's "
                                f"{name} is {list(have[name])}; the metadata was edited or belongs to "
                                "another graph: re-export it")


def read_onnx_metadata(path) -> dict[str, str]:
    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"ONNX file {p} is a directory")
    if not p.is_file():
        raise RkspeechError(f"ONNX file {p} does not exist")
    meta = read_metadata(p)
    if meta is not None:
        return meta
    try:
        import onnx
    except ImportError:
        onnx = None
    if onnx is not None:
        try:
            model = onnx.load(str(p), load_external_data=False)
        except Exception as exc:  # onnx raises DecodeError and friends
            raise RkspeechError(f"{p}: not a readable ONNX file ({type(exc).__name__}: {exc})") from None
        return {e.key: e.value for e in model.metadata_props}
    try:
        import onnxruntime as ort
    except ImportError:
        raise RkspeechError("reading ONNX metadata needs onnx or onnxruntime: pip install onnxruntime") from None
    try:
        sess = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise RkspeechError(f"{p}: onnxruntime cannot load it ({exc})") from None
    return dict(sess.get_modelmeta().custom_metadata_map)


def contract_format(path) -> str | None:
    """The format string an .onnx's contract names (None without one), the rest unread: a plan
    checks that each stage file holds the kind of graph it says."""
    raw = read_onnx_metadata(path).get(CONTRACT_KEY)
    try:
        value = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None
    return value.get("format") if isinstance(value, dict) else None


def read_contract(path: str | os.PathLike, kind: type[C] | None = None) -> C:
    """The contract an .onnx (metadata, checked against the graph) or an .rknn (custom string)
    carries; with ``kind``, a file holding another kind of graph is refused in one line."""
    path = Path(path)
    if path.suffix.lower() == ".rknn":
        text = read_container(path).custom_string
        if not text:
            raise RkspeechError(f"{path}: no custom string, so no rkspeech contract; convert it with "
                                "rkspeech convert from an ONNX that rkspeech exported")
    else:
        meta = read_onnx_metadata(path)
        if CONTRACT_KEY not in meta:
            raise RkspeechError(f"{path}: no {CONTRACT_KEY} metadata; it was not exported by rkspeech "
                                "(export it with rkspeech build or rkspeech export)")
        text = meta[CONTRACT_KEY]
    try:
        contract = parse_contract(text, kind)
    except RkspeechError as exc:
        raise RkspeechError(f"{path}: {exc}") from None
    if path.suffix.lower() != ".rknn":
        check_contract_against_graph(path, contract)
    return contract
