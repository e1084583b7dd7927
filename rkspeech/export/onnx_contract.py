"""Read the step contract back from an ONNX file alone, and check it against the graph.

The metadata and the graph's I/O are read with the standard library (``export.onnx_reader``),
so a runtime-only process needs neither ``onnx`` nor its protobuf; files that reader does not
understand fall back to ``onnx`` or to onnxruntime's model metadata.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.export.onnx_reader import read_graph_io, read_metadata
from rkspeech.stepgraph.contract import CONTRACT_KEY, StepContract


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


def check_contract_against_graph(path, contract: StepContract) -> None:
    """The contract's input/output shapes must be the graph's: a contract edited inside the
    metadata would otherwise surface as an onnxruntime error mid-decode."""
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


def read_onnx_contract(path) -> StepContract:
    """The contract in ``path``'s metadata, checked against the graph's own inputs and outputs,
    so every reader (plan, verify, build, decode) refuses edited or foreign metadata alike."""
    meta = read_onnx_metadata(path)
    if CONTRACT_KEY not in meta:
        raise RkspeechError(
            f"{path}: no {CONTRACT_KEY} metadata; it was not exported by rkspeech "
            "(re-export with: rkspeech export qwen3-tts-vocoder ...)"
        )
    contract = StepContract.from_json(meta[CONTRACT_KEY])
    check_contract_against_graph(path, contract)
    return contract
