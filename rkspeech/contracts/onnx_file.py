"""ONNX files read with the standard library: metadata and graph I/O without ``onnx``.

A ModelProto is a protobuf message whose fields can be walked by tag and length, so
``metadata_props`` (field 14) and the graph's inputs/outputs are found by seeking past
everything else, the weights included.  This keeps ``onnx`` (and its protobuf import) out of a
runtime-only process such as ``rkspeech decode --backend ort`` on a board, and costs
milliseconds on a 460 MB published-size step graph.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError

_MODEL_GRAPH = 7  # ModelProto.graph
_MODEL_METADATA_PROPS = 14  # ModelProto.metadata_props (repeated StringStringEntryProto)
_GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 5, 11, 12
_TENSOR_NAME = 8  # TensorProto.name


def _varint(f) -> int | None:
    value = shift = 0
    while True:
        b = f.read(1)
        if not b:
            return None
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")




def _varint_bytes(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7




def _walk(f, start: int, end: int):
    """(field, wire, offset, length) of each field of the message in bytes [start, end) of the
    open file ``f``: for a length-delimited field (wire 2) ``offset``/``length`` locate its bytes,
    which are not read (the caller may seek there and read them); for a varint ``length`` is its
    value; fixed-width fields are skipped.  Raises ValueError on anything that is not protobuf."""
    f.seek(start)
    while f.tell() < end:
        tag = _varint(f)
        if tag is None:
            raise ValueError("truncated message")
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("not a protobuf message")
        if wire == 0:
            value = _varint(f)
            if value is None:
                raise ValueError("truncated varint")
            here = f.tell()
            yield field, wire, here, value
            f.seek(here)
        elif wire in (1, 5):
            f.seek(8 if wire == 1 else 4, 1)
        elif wire == 2:
            n = _varint(f)
            here = f.tell()
            if n is None or here + n > end:
                raise ValueError("truncated field")
            yield field, wire, here, n
            f.seek(here + n)
        else:
            raise ValueError(f"wire type {wire}")
    if f.tell() != end:
        raise ValueError("a field runs past the end of its message")


def _read(f, offset: int, n: int) -> bytes:
    f.seek(offset)
    return f.read(n)


def _entry(data: bytes) -> tuple[str, str]:
    """(key, value) of a StringStringEntryProto."""
    entry = {1: "", 2: ""}
    for field, wire, value in _fields(data):
        if wire != 2:
            raise ValueError("unexpected wire type in a metadata entry")
        entry[field] = value.decode("utf-8")
    return entry[1], entry[2]


def read_metadata(path) -> dict[str, str] | None:
    """``metadata_props`` of an ONNX file; None when the file does not walk as a protobuf message."""
    p = Path(path)
    meta: dict[str, str] = {}
    try:
        with open(p, "rb") as f:
            for field, wire, at, n in _walk(f, 0, p.stat().st_size):
                if field == _MODEL_METADATA_PROPS and wire == 2:
                    k, v = _entry(_read(f, at, n))
                    meta[k] = v
    except (ValueError, UnicodeDecodeError, OSError):
        return None
    return meta


def _fields(data: bytes):
    """(field, wire, value) of a protobuf message held in ``data``; ``value`` is an int for
    varints and bytes for length-delimited fields (fixed-width fields are skipped)."""
    i = 0
    while i < len(data):
        tag, i = _varint_bytes(data, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint_bytes(data, i)
        elif wire == 2:
            n, i = _varint_bytes(data, i)
            if i + n > len(data):
                raise ValueError("truncated field")
            value, i = data[i:i + n], i + n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            continue
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


def _value_info(data: bytes) -> tuple[str, list]:
    """(name, dims) of a ValueInfoProto; a dim without a value is its symbolic name (or None)."""
    name, dims = "", []
    for f, _, v in _fields(data):
        if f == 1:
            name = v.decode("utf-8")
        elif f == 2:  # TypeProto
            for tf, _, tv in _fields(v):
                if tf != 1:  # tensor_type
                    continue
                for sf, _, sv in _fields(tv):
                    if sf != 2:  # shape
                        continue
                    for df, _, dv in _fields(sv):
                        if df != 1:
                            continue
                        dim = None
                        for xf, _, xv in _fields(dv):
                            dim = int(xv) if xf == 1 else xv.decode("utf-8") if xf == 2 else dim
                        dims.append(dim)
    return name, dims


def _initializer_name(f, offset: int, n: int) -> str:
    """TensorProto.name of the initializer at ``offset``, its data skipped by seeking."""
    for field, wire, at, m in _walk(f, offset, offset + n):
        if field == _TENSOR_NAME and wire == 2:
            return _read(f, at, m).decode("utf-8")
    return ""


def read_graph_io(path) -> tuple[dict[str, list], dict[str, list]]:
    """(inputs, outputs) of an ONNX file, name -> dims; initializers listed as graph inputs are
    not inputs.  Initializers' data is never read.  Raises RkspeechError when the file is not an
    ONNX model."""
    p = Path(path)
    ins, outs, inits = [], [], set()
    try:
        with open(p, "rb") as f:
            graph = None
            for field, wire, at, n in _walk(f, 0, p.stat().st_size):
                if field == _MODEL_GRAPH and wire == 2:
                    graph = (at, n)
            if graph is None:
                raise ValueError("no graph")
            for field, wire, at, n in _walk(f, graph[0], graph[0] + graph[1]):
                if wire != 2:
                    continue
                if field in (_GRAPH_INPUT, _GRAPH_OUTPUT):
                    (ins if field == _GRAPH_INPUT else outs).append(_value_info(_read(f, at, n)))
                elif field == _GRAPH_INITIALIZER:
                    inits.add(_initializer_name(f, at, n))
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise RkspeechError(f"{p}: not an ONNX model ({exc}); pass an .onnx written by an exporter") from None
    except OSError as exc:
        raise RkspeechError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    if not outs:
        raise RkspeechError(f"{p}: not an ONNX model (its graph has no outputs)")
    return {n: d for n, d in ins if n not in inits}, dict(outs)
