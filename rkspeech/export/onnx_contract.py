"""Read the step contract back from an ONNX file alone.

With ``onnx`` installed the metadata is read without loading the weights; a runtime-only host
(onnxruntime, no onnx) reads it through the session's model metadata instead.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RkspeechError
from ..streaming.contract import CONTRACT_KEY, StepContract


def read_onnx_metadata(path) -> dict[str, str]:
    p = Path(path)
    if not p.is_file():
        raise RkspeechError(f"ONNX file {p} does not exist")
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
