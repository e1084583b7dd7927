"""The runner interface every backend implements, and the I/O specs of an ONNX file.

A :class:`Runner` runs one graph: ``input_specs()`` / ``output_specs()`` (name -> (shape,
dtype), in graph order), ``infer(feed) -> {output name: array}``, ``close()``, usable as a
context manager.  ``infer`` is the same for every backend: it checks the feed against the
input specs (names, static dims, dtypes), casts each array to the declared dtype, hands the
arrays to the backend's ``_infer``, and shapes what comes back (fp16 -> fp32, reshaped to the
declared shape when the size matches).  So a wrong feed is the same one-line
:class:`RkspeechError` on onnxruntime, the simulator and the board, before any backend runs.

Only numpy is imported here at load time: a board install (numpy + rknn-toolkit-lite2) imports
this module; onnx is imported by :func:`onnx_io_specs` when called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from rkspeech.core.errors import RkspeechError

#: (shape, dtype); a dim that is not an int (a symbolic ONNX dim) is not checked.
Spec = tuple[tuple, np.dtype]


def rknn_data_formats(inputs: list[np.ndarray]) -> list[str] | None:
    """``data_format`` for rknn-toolkit(-lite)2's ``inference``: None when no input is 4-D,
    else one entry per input, never None (the toolkit calls ``.lower()`` on each entry: a None
    beside a 4-D input failed on the talker step graphs); it applies only to 4-D
    inputs, so the others get ``"nhwc"``, which it ignores."""
    if not any(a.ndim == 4 for a in inputs):
        return None
    return ["nchw" if a.ndim == 4 else "nhwc" for a in inputs]


def _static(dim) -> bool:
    return isinstance(dim, (int, np.integer)) and dim >= 0


class Runner:
    """A backend that runs one graph.  Subclasses fill ``_inputs`` / ``_outputs`` (ordered
    name -> :data:`Spec`) and implement ``_infer``."""

    name = "runner"

    def __init__(self) -> None:
        self._inputs: dict[str, Spec] = {}
        self._outputs: dict[str, Spec] = {}

    def input_specs(self) -> dict[str, Spec]:
        return dict(self._inputs)

    def output_specs(self) -> dict[str, Spec]:
        return dict(self._outputs)

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check and cast ``feed``, run the backend, return the outputs by name."""
        return self._shape_outputs(self._infer(self._check_feed(feed)))

    def _infer(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray] | list[np.ndarray]:
        """Run the backend on checked arrays (declared dtype, C-contiguous, in input order);
        return the outputs by name or in output order."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the checks ----------------------------------------------------------------------------

    def _check_feed(self, feed) -> dict[str, np.ndarray]:
        if not isinstance(feed, Mapping):
            raise RkspeechError(f"{self.name}: infer() takes a dict of input name -> array, "
                                f"got {type(feed).__name__}")
        missing = [n for n in self._inputs if n not in feed]
        unknown = [n for n in feed if n not in self._inputs]
        if missing or unknown:
            raise RkspeechError(f"{self.name}: inputs do not match the graph (missing {missing}, "
                                f"unknown {unknown}; expected {list(self._inputs)})")
        arrays = {}
        for n, (shape, dtype) in self._inputs.items():
            try:
                a = np.asarray(feed[n])
            except (ValueError, TypeError) as exc:
                raise RkspeechError(f"{self.name}: input {n} is not an array ({exc})") from None
            if a.shape != shape and (a.ndim != len(shape)
                                     or any(_static(d) and d != s for d, s in zip(shape, a.shape))):
                raise RkspeechError(f"{self.name}: input {n} has shape {list(a.shape)}, the graph "
                                    f"wants {list(shape)}")
            arrays[n] = np.ascontiguousarray(self._cast(n, a, np.dtype(dtype)))
        return arrays

    def _cast(self, name: str, a: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """``a`` as ``dtype`` when that keeps its values (int64 codes into a float32 input: yes;
        2.5 into an integer input, strings, NaN into an integer input: no)."""
        if a.dtype == dtype:
            return a
        src, dst = a.dtype.kind, dtype.kind

        def refuse(why: str):
            return RkspeechError(f"{self.name}: input {name} is {a.dtype}{why}; the graph wants {dtype}")

        if src not in "biuf" or dst not in "biuf":
            raise refuse(", not a real number type" if src not in "biuf" else ", which cannot be cast there")
        if dst == "b":
            if src != "b" and not np.isin(a, (0, 1)).all():
                raise refuse(" with values other than 0 and 1")
        elif dst in "iu":
            if src == "f" and not (np.isfinite(a).all() and (a == np.trunc(a)).all()):
                raise refuse(" with non-integral values")
            if src != "b" and a.size:
                info = np.iinfo(dtype)
                if a.min() < info.min or a.max() > info.max:
                    raise refuse(f" with values outside [{info.min}, {info.max}]")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked just below
            out = a.astype(dtype)
        if dst == "f" and not np.isfinite(out).all() and (src != "f" or np.isfinite(a).all()):
            raise refuse(" with values too large for it")
        return out

    def _shape_outputs(self, outs) -> dict[str, np.ndarray]:
        if isinstance(outs, Mapping):
            missing = [n for n in self._outputs if n not in outs]
            if missing:
                raise RkspeechError(f"{self.name}: the backend returned no {missing} "
                                    f"(got {list(outs)}, expected {list(self._outputs)})")
            items = [outs[n] for n in self._outputs]
        else:
            if outs is None or len(outs) != len(self._outputs):
                raise RkspeechError(f"{self.name}: got {0 if outs is None else len(outs)} outputs, "
                                    f"expected {len(self._outputs)}")
            items = list(outs)
        result = {}
        for (n, (shape, _)), a in zip(self._outputs.items(), items):
            a = np.asarray(a)
            if a.dtype == np.float16:  # fp16 graph boundary (simulator, board): callers get fp32
                a = a.astype(np.float32)
            if (a.shape != tuple(shape) and all(_static(d) for d in shape)
                    and a.size == int(np.prod(shape, dtype=np.int64))):
                a = a.reshape(shape)  # the toolkit returns some outputs flattened or 4-D
            result[n] = a
        return result


def onnx_io_specs(onnx_path: str | os.PathLike, *, static: bool = True) -> tuple[dict[str, Spec], dict[str, Spec]]:
    """(inputs, outputs) of an ONNX file, name -> (shape, dtype), without its weights.

    Initializers listed as graph inputs are not inputs.  ``static``: refuse a dynamic dim (the
    NPU needs static shapes); otherwise keep it as its name (or None)."""
    import onnx

    onnx_path = os.fspath(onnx_path)
    try:
        model = onnx.load(onnx_path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises protobuf/OS errors
        raise RkspeechError(f"{onnx_path}: cannot read it as ONNX: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    init = {i.name for i in model.graph.initializer}

    def spec(vi) -> Spec:
        t = vi.type.tensor_type
        dims: list = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif static:
                raise RkspeechError(f"{onnx_path}: {vi.name} has a dynamic dim; the NPU needs static shapes")
            else:
                dims.append(d.dim_param or None)
        return tuple(dims), np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))

    ins = {vi.name: spec(vi) for vi in model.graph.input if vi.name not in init}
    outs = {vi.name: spec(vi) for vi in model.graph.output}
    return ins, outs
