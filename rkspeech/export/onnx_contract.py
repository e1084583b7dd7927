"""Read the step contract back from an ONNX file alone.

The metadata is read with the standard library: a ModelProto is a protobuf message whose
top-level fields can be walked by tag and length, so ``metadata_props`` (field 14) is found by
seeking past the graph (field 7, the weights) without reading it.  This keeps ``onnx`` (and its
protobuf import) out of a runtime-only process such as ``rkspeech decode --backend ort``, and
costs milliseconds on a 460 MB published-size step graph.  Files the walker does not understand
fall back to ``onnx`` or to onnxruntime's model metadata.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.stepgraph.contract import CONTRACT_KEY, StepContract

_MODEL_METADATA_PROPS = 14  # ModelProto.metadata_props (repeated StringStringEntryProto)


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


def _entry(data: bytes) -> tuple[str, str]:
    key = value = ""
    i = 0
    while i < len(data):
        tag, i = _varint_bytes(data, i)
        if tag & 7 != 2:
            raise ValueError("unexpected wire type in a metadata entry")
        n, i = _varint_bytes(data, i)
        text = data[i:i + n].decode("utf-8")
        i += n
        if tag >> 3 == 1:
            key = text
        elif tag >> 3 == 2:
            value = text
    return key, value


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


def read_metadata_stdlib(path) -> dict[str, str] | None:
    """``metadata_props`` of an ONNX file by walking its top-level protobuf fields; None when
    the file does not walk cleanly as a protobuf message."""
    p = Path(path)
    size = p.stat().st_size
    meta: dict[str, str] = {}
    try:
        with open(p, "rb") as f:
            while f.tell() < size:
                tag = _varint(f)
                if tag is None:
                    break
                field, wire = tag >> 3, tag & 7
                if field == 0:
                    return None
                if wire == 0:
                    if _varint(f) is None:
                        return None
                elif wire == 1:
                    f.seek(8, 1)
                elif wire == 5:
                    f.seek(4, 1)
                elif wire == 2:
                    n = _varint(f)
                    if n is None or f.tell() + n > size:
                        return None
                    if field == _MODEL_METADATA_PROPS:
                        k, v = _entry(f.read(n))
                        meta[k] = v
                    else:
                        f.seek(n, 1)
                else:
                    return None
            if f.tell() != size:
                return None
    except (ValueError, UnicodeDecodeError, OSError):
        return None
    return meta


def read_onnx_metadata(path) -> dict[str, str]:
    p = Path(path)
    if not p.is_file():
        raise RkspeechError(f"ONNX file {p} does not exist")
    meta = read_metadata_stdlib(p)
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


def read_onnx_contract(path) -> StepContract:
    meta = read_onnx_metadata(path)
    if CONTRACT_KEY not in meta:
        raise RkspeechError(
            f"{path}: no {CONTRACT_KEY} metadata; it was not exported by rkspeech "
            "(re-export with: rkspeech export qwen3-tts-vocoder ...)"
        )
    return StepContract.from_json(meta[CONTRACT_KEY])
