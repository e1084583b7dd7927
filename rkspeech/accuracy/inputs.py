"""The model and input checks of the accuracy map, and its default inputs.

Every mistake a user can make here is a one-line RkspeechError before any build starts: a
missing file, a file that is not an ONNX graph, an npz whose names, shapes or dtypes do not
match the graph inputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError


def check_model(path) -> tuple[dict, dict]:
    """(input specs, output specs) of the ONNX at ``path``; refuses anything else in one line.

    protobuf parses some non-ONNX bytes into an empty model without complaint, so a graph with
    no nodes is refused too."""
    import onnx

    from rkspeech.runtime.runners.base import onnx_io_specs

    path = Path(path)
    if not path.is_file():
        raise RkspeechError(f"{path}: no such file (the accuracy map needs an .onnx graph)")
    ins, outs = onnx_io_specs(path)  # "cannot read it as ONNX" for most non-ONNX files
    model = onnx.load(os.fspath(path), load_external_data=False)
    if not len(model.graph.node) or not outs:
        raise RkspeechError(f"{path}: not an ONNX graph (no nodes or no outputs)")
    return ins, outs


def default_inputs(specs: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal floats, zeros for integer and boolean inputs."""
    rng = np.random.default_rng(seed)
    feed = {}
    for name, (shape, dtype) in specs.items():
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            feed[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feed[name] = np.zeros(shape, dtype=dtype)
    return feed


def load_inputs(path, specs: dict) -> dict[str, np.ndarray]:
    """The arrays of the npz at ``path``, checked against the graph inputs ``specs``
    (name -> (shape, dtype)) and cast to the declared dtypes where that keeps their values."""
    path = Path(path)
    if not path.is_file():
        raise RkspeechError(f"{path}: no such file (--inputs takes an .npz of the graph inputs)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001 - zipfile / numpy raise many kinds
        raise RkspeechError(f"{path}: cannot read it as an .npz ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    missing = [n for n in specs if n not in arrays]
    unknown = [n for n in arrays if n not in specs]
    if missing or unknown:
        raise RkspeechError(f"{path}: its arrays do not match the graph inputs (missing {missing}, "
                            f"unknown {unknown}; the graph wants {list(specs)})")
    feed = {}
    for name, (shape, dtype) in specs.items():
        a = arrays[name]
        if tuple(a.shape) != tuple(shape):
            raise RkspeechError(f"{path}: {name} has shape {list(a.shape)}, the graph wants {list(shape)}")
        dtype = np.dtype(dtype)
        if a.dtype != dtype:
            if a.dtype.kind not in "biuf" or (dtype.kind in "iub" and a.dtype.kind == "f"
                                              and not np.array_equal(a, np.trunc(a))):
                raise RkspeechError(f"{path}: {name} is {a.dtype}, the graph wants {dtype}")
            a = a.astype(dtype)
        if dtype.kind == "f" and not np.isfinite(a).all():
            raise RkspeechError(f"{path}: {name} holds NaN or infinite values")
        feed[name] = a
    return feed
