"""Export the Whisper encoder as one fixed-window ONNX graph: ``mel [1, n_mels, 3000] -> [1, 1500, d]``.

What the graph promises (checked after export by :func:`check_encoder_onnx`, not assumed):

* static shapes everywhere on the graph inputs/outputs (no ``dim_param``), batch 1;
* opset 17, so LayerNorm is one ``LayerNormalization`` node; each carries an explicit
  ``epsilon`` attribute (rknn-toolkit2 2.5.0 fails on a LayerNormalization without one,
  field notes); a missing one is written in from the model's dims;
* the window gives exactly ``n_audio_ctx`` (1500) encoder frames: a 20 s window (the RK model
  zoo's export) is refused before export, since faster-whisper feeds 30 s windows; unless the
  graph is a *bucket* (``bucket=True``: a shorter window of whole seconds, run beside the 30 s
  graph for audio that fits, ``runtime.whisper.buckets``), recorded as ``"bucket": true`` in the
  metadata, its output ``[1, n_frames / 2, d]``;
* metadata ``rkspeech.whisper_encoder`` (JSON: dims, window, input/output names) so runtimes
  read the geometry from the artifact instead of restating it.

The legacy TorchScript exporter (``dynamo=False``) is used: it writes ONNX that onnxruntime and
rknn-toolkit2 2.5.0 both take (field notes, torch 2.13).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.atomic import atomic_path
from rkspeech.core.errors import RkspeechError
from rkspeech.export.opset import OPSET
from rkspeech.models.whisper.window import output_frames

METADATA_KEY = "rkspeech.whisper_encoder"
INPUT_NAME = "mel"
OUTPUT_NAME = "encoder_output"


@dataclass
class EncoderExport:
    path: Path
    dims: dict
    n_frames: int
    nodes: int
    op_types: dict[str, int]
    layer_norms: int
    seconds: float

    def to_report(self) -> dict:
        return {
            "path": str(self.path),
            "input": {"name": INPUT_NAME, "shape": [1, self.dims["n_mels"], self.n_frames], "dtype": "float32"},
            "output": {"name": OUTPUT_NAME, "shape": [1, output_frames(self.n_frames), self.dims["n_audio_state"]],
                       "dtype": "float32"},
            "opset": OPSET,
            "nodes": self.nodes,
            "layer_norms": self.layer_norms,
            "op_types": self.op_types,
            "export_seconds": round(self.seconds, 2),
            "dims": self.dims,
        }


def export_encoder(model, out_path: str | os.PathLike, *, n_frames: int | None = None,
                   bucket: bool = False) -> EncoderExport:
    """Export ``model`` (a :class:`WhisperEncoder`) to ``out_path`` (written via a temp name);
    ``bucket``: ``n_frames`` may be a shorter window (see the module docstring)."""
    import time
    import warnings

    import onnx
    import torch

    dims = model.dims
    n_frames = dims.n_frames if n_frames is None else int(n_frames)
    model.check_window(n_frames, bucket=bucket)  # the 20 s trap: refuse before spending time on export
    bucket = n_frames != dims.n_frames
    out_path = Path(out_path)
    start = time.perf_counter()
    dummy = torch.zeros(1, dims.n_mels, n_frames)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.13 flags the TorchScript exporter as legacy; it is the one measured to work here
            warnings.simplefilter("ignore", DeprecationWarning)
            # the window length is read as a Python int on purpose: the graph has one fixed window
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                model.eval(),
                (dummy,),
                str(tmp),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        # Graph-only edits; a > 2 GB export (large-v3 in fp32: 2.55 GB, 78 s with synthetic weights,
        # docs/whisper-sizes.md) keeps its external data files as written by torch beside the graph.
        proto = onnx.load(str(tmp), load_external_data=False)
        _ensure_layernorm_epsilon(proto, dims.layer_norm_eps)
        meta = {"dims": dims.to_dict(), "n_frames": n_frames, "input": INPUT_NAME, "output": OUTPUT_NAME,
                **({"bucket": True} if bucket else {})}
        del proto.metadata_props[:]
        entry = proto.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(meta, sort_keys=True)
        onnx.save(proto, str(tmp))
        check = check_encoder_onnx(tmp)
    return EncoderExport(
        path=out_path,
        dims=dims.to_dict(),
        n_frames=n_frames,
        nodes=check["nodes"],
        op_types=check["op_types"],
        layer_norms=check["layer_norms"],
        seconds=time.perf_counter() - start,
    )


def _ensure_layernorm_epsilon(proto, eps: float) -> None:
    from onnx import helper

    for node in proto.graph.node:
        if node.op_type == "LayerNormalization" and not any(a.name == "epsilon" for a in node.attribute):
            node.attribute.append(helper.make_attribute("epsilon", float(eps)))


def read_metadata(onnx_path: str | os.PathLike) -> dict:
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    for entry in proto.metadata_props:
        if entry.key == METADATA_KEY:
            return json.loads(entry.value)
    raise RkspeechError(f"{onnx_path} carries no {METADATA_KEY} metadata; export it with rkspeech")


def check_encoder_onnx(onnx_path: str | os.PathLike) -> dict:
    """Check the promises listed in the module docstring; raise RkspeechError on a broken one."""
    import collections

    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    meta = None
    for entry in proto.metadata_props:
        if entry.key == METADATA_KEY:
            meta = json.loads(entry.value)
    if meta is None:
        raise RkspeechError(f"{onnx_path}: no {METADATA_KEY} metadata")
    dims = meta["dims"]
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset != OPSET:
        raise RkspeechError(f"{onnx_path}: opset {opset}, expected {OPSET}")

    def shape_of(value_info):
        dims_ = []
        for d in value_info.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims_.append(d.dim_value)
            else:
                raise RkspeechError(f"{onnx_path}: {value_info.name} has a dynamic dim {d.dim_param!r}")
        return dims_

    inputs = [i for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in proto.graph.output] != [OUTPUT_NAME]:
        raise RkspeechError(f"{onnx_path}: graph I/O is not {INPUT_NAME} -> {OUTPUT_NAME}")
    in_shape = shape_of(inputs[0])
    out_shape = shape_of(proto.graph.output[0])
    want_in = [1, dims["n_mels"], meta["n_frames"]]
    want_out = [1, output_frames(meta["n_frames"]), dims["n_audio_state"]]
    if in_shape != want_in or out_shape != want_out:
        raise RkspeechError(f"{onnx_path}: shapes {in_shape} -> {out_shape}, expected {want_in} -> {want_out}")
    if meta.get("bucket") and not output_frames(meta["n_frames"]) < dims["n_audio_ctx"]:
        raise RkspeechError(f"{onnx_path}: a bucket's window must be shorter than the full one; "
                            f"this one has {meta['n_frames']} frames")
    if not meta.get("bucket") and output_frames(meta["n_frames"]) != dims["n_audio_ctx"]:
        raise RkspeechError(
            f"{onnx_path}: a {meta['n_frames']}-frame window gives {output_frames(meta['n_frames'])} "
            f"encoder frames, the decoder expects {dims['n_audio_ctx']}"
        )
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    layer_norms = 0
    for node in proto.graph.node:
        if node.op_type == "LayerNormalization":
            layer_norms += 1
            if not any(a.name == "epsilon" for a in node.attribute):
                raise RkspeechError(f"{onnx_path}: LayerNormalization {node.name} has no explicit epsilon")
    expected_ln = 2 * dims["n_audio_layer"] + 1
    if layer_norms != expected_ln:
        raise RkspeechError(
            f"{onnx_path}: {layer_norms} LayerNormalization nodes, expected {expected_ln} "
            "(a decomposed LayerNorm means the export did not use opset 17)"
        )
    return {"nodes": len(proto.graph.node), "op_types": dict(sorted(ops.items())), "layer_norms": layer_norms,
            "input_shape": in_shape, "output_shape": out_shape, "meta": meta}
