"""Runners: one small interface over onnxruntime, the rknn-toolkit2 x86 simulator and rknn-lite.

Polygraphy-style: every backend is a :class:`Runner` (``input_specs`` / ``output_specs`` /
``infer(feed) -> dict`` / ``close``, usable as a context manager); comparing outputs is someone
else's job.  Only numpy is imported here at load time; onnxruntime, onnx and rknn are imported
when a runner is created, so a board install (numpy + rknn-toolkit-lite2) can import this module.

How the simulator works (rknn-toolkit2 2.5.0, measured here): ``init_runtime()`` with no target
runs the x86 simulator, but only for a model built in the same ``RKNN`` object from its source
(``load_onnx`` + ``build``).  A model loaded with ``load_rknn`` is refused ("RKNN model that
loaded by 'load_rknn' not support inference on the simulator").  So
:class:`RknnSimulatorRunner` takes the ONNX path + target + dtype and builds in-process (seconds
for tiny graphs; the memory/time of a full conversion for big ones).  Graph I/O is fp16 at the
boundary for fp16 builds; the runner returns float32 arrays of the declared ONNX output shapes.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

import numpy as np

from ..errors import RkspeechError

Spec = tuple[tuple[int, ...], np.dtype]

_ONNX_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(int16)": np.int16,
}
_RKNN_DTYPES = {"float16": np.float32, "float32": np.float32, "int64": np.int64, "int32": np.int32,
                "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "bool": np.bool_}
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2")


class Runner:
    """A backend that runs one graph. Subclasses fill ``_inputs`` / ``_outputs`` (ordered)."""

    name = "runner"

    def __init__(self) -> None:
        self._inputs: dict[str, Spec] = {}
        self._outputs: dict[str, Spec] = {}

    def input_specs(self) -> dict[str, Spec]:
        return dict(self._inputs)

    def output_specs(self) -> dict[str, Spec]:
        return dict(self._outputs)

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ordered_feed(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        missing = [n for n in self._inputs if n not in feed]
        extra = [n for n in feed if n not in self._inputs]
        if missing or extra:
            raise RkspeechError(f"{self.name}: inputs do not match the graph (missing {missing}, "
                                f"unknown {extra}; expected {list(self._inputs)})")
        out = []
        for n, (shape, dtype) in self._inputs.items():
            a = np.asarray(feed[n])
            if tuple(a.shape) != tuple(shape):
                raise RkspeechError(f"{self.name}: input {n} has shape {list(a.shape)}, the graph "
                                    f"wants {list(shape)}")
            out.append(np.ascontiguousarray(a.astype(dtype, copy=False)))
        return out

    def _shape_outputs(self, arrays) -> dict[str, np.ndarray]:
        if arrays is None or len(arrays) != len(self._outputs):
            raise RkspeechError(f"{self.name}: got {0 if arrays is None else len(arrays)} outputs, "
                                f"expected {len(self._outputs)}")
        result = {}
        for (n, (shape, dtype)), a in zip(self._outputs.items(), arrays):
            a = np.asarray(a)
            if a.dtype == np.float16 or np.issubdtype(dtype, np.floating):
                a = a.astype(np.float32)
            if tuple(a.shape) != tuple(shape) and a.size == int(np.prod(shape)):
                a = a.reshape(shape)
            result[n] = a
        return result


def _onnx_io(onnx_path: str) -> tuple[dict[str, Spec], dict[str, Spec]]:
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    init = {i.name for i in model.graph.initializer}

    def spec(vi) -> Spec:
        t = vi.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise RkspeechError(f"{onnx_path}: {vi.name} has a dynamic dim; the NPU needs static shapes")
            dims.append(int(d.dim_value))
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        return tuple(dims), np.dtype(np_dtype)

    ins = {vi.name: spec(vi) for vi in model.graph.input if vi.name not in init}
    outs = {vi.name: spec(vi) for vi in model.graph.output}
    return ins, outs


class OnnxRuntimeRunner(Runner):
    name = "onnxruntime"

    def __init__(self, onnx_path: str | os.PathLike, threads: int | None = None,
                 providers: list[str] | None = None):
        super().__init__()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise RkspeechError(f"onnxruntime is not installed ({exc}): pip install onnxruntime") from None
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
            opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(os.fspath(onnx_path), opts,
                                                providers=providers or ["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RkspeechError(f"{onnx_path}: onnxruntime cannot load it: {str(exc).splitlines()[0]}") from None
        for kind, items in (("in", self.session.get_inputs()), ("out", self.session.get_outputs())):
            for i in items:
                if any(not isinstance(d, int) for d in i.shape):
                    shape = tuple(i.shape)  # symbolic: keep as declared
                else:
                    shape = tuple(int(d) for d in i.shape)
                spec = (shape, np.dtype(_ONNX_DTYPES.get(i.type, np.float32)))
                (self._inputs if kind == "in" else self._outputs)[i.name] = spec

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = {n: np.asarray(feed[n]).astype(self._inputs[n][1], copy=False) for n in self._inputs
                  if n in feed}
        if len(arrays) != len(self._inputs):
            self._ordered_feed(feed)  # raises with the details
        outs = self.session.run(list(self._outputs), arrays)
        return dict(zip(self._outputs, outs))

    def close(self) -> None:
        self.session = None


class _FdCapture:
    """Send fd 1 and 2 to a file while the toolkit runs (its C code prints there)."""

    def __init__(self, path: str | None):
        self.path = path

    def __enter__(self):
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        if self.path is None:
            self.file = tempfile.TemporaryFile()
        else:
            self.file = open(self.path, "ab")
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def tail(self, n: int = 4000) -> str:
        self.file.flush()
        self.file.seek(0, os.SEEK_END)
        size = self.file.tell()
        self.file.seek(max(0, size - n))
        return self.file.read().decode("utf-8", errors="replace")

    def __exit__(self, *exc):
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        try:
            import ctypes

            ctypes.CDLL(None).fflush(None)
        except Exception:  # noqa: BLE001
            pass
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])

    def close(self) -> None:
        self.file.close()


def _last_error(text: str) -> str:
    for line in reversed(text.splitlines()):
        line = line.replace("\x1b[1;31m", "").replace("\x1b[0m", "").strip()
        if line.startswith("E ") and "REGTASK" not in line:
            return line[:300]
    return ""


class RknnSimulatorRunner(Runner):
    """rknn-toolkit2's x86 simulator for ``onnx_path`` built in-process for ``target`` / ``dtype``.

    The toolkit's console output goes to ``log_path`` (or is discarded).  ``release()`` unsets
    TMPDIR at C level; :meth:`close` restores it.
    """

    name = "rknn-simulator"

    def __init__(self, onnx_path: str | os.PathLike, target: str = "rk3588", dtype: str = "fp16",
                 dataset: str | None = None, opt_level: int | None = None,
                 log_path: str | None = None, verbose: bool = False):
        super().__init__()
        from ..rknn.toolkit import rknn_class

        onnx_path = os.fspath(onnx_path)
        if dtype not in ("fp16", "int8"):
            raise RkspeechError(f"unknown dtype {dtype!r}; choose fp16 or int8")
        if dtype == "int8" and not dataset:
            raise RkspeechError("int8 simulation needs a calibration dataset")
        self._inputs, self._outputs = _onnx_io(onnx_path)
        self.target, self.dtype = target, dtype
        self._warm = False
        RKNN = rknn_class()
        self.rknn = None
        cap = _FdCapture(log_path)
        try:
            with cap, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the toolkit's onnx.mapping deprecation noise
                self.rknn = RKNN(verbose=verbose)
                config: dict[str, Any] = {"target_platform": target}
                if opt_level is not None:
                    config["optimization_level"] = int(opt_level)
                steps = [
                    ("config", lambda: self.rknn.config(**config)),
                    ("load_onnx", lambda: self.rknn.load_onnx(model=onnx_path)),
                    ("build", lambda: self.rknn.build(do_quantization=dtype == "int8", dataset=dataset)),
                    ("init_runtime", lambda: self.rknn.init_runtime()),
                ]
                failed = None
                for step, fn in steps:
                    if fn() != 0:
                        failed = step
                        break
            if failed:
                why = _last_error(cap.tail())
                self.close()
                raise RkspeechError(f"rknn simulator: {failed}() failed for {onnx_path}"
                                    f"{': ' + why if why else ''}"
                                    f"{'; log: ' + log_path if log_path else ''}")
        finally:
            cap.close()

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._ordered_feed(feed)
        fmt = ["nchw" if a.ndim == 4 else None for a in arrays]
        # The toolkit prints from C on every call (preparation bars on the first, a
        # 'data_format is not set' warning for non-4-D inputs on each): keep fd 1/2 quiet.
        cap = _FdCapture(None)
        try:
            with cap, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs = self.rknn.inference(inputs=arrays, data_format=fmt if any(fmt) else None)
        finally:
            cap.close()
        self._warm = True
        return self._shape_outputs(outs)

    def close(self) -> None:
        if self.rknn is not None:
            from ..rknn.toolkit import release

            rknn, self.rknn = self.rknn, None
            release(rknn)


class RknnLiteRunner(Runner):
    """rknn-toolkit-lite2 on a board: ``RKNNLite().load_rknn`` + ``init_runtime(core_mask)``.

    I/O names, shapes and dtypes come from the .rknn itself (``container.read_container``).
    ``core_mask``: "auto" (the runtime picks one core), "0", "1", "2", "0_1", "0_1_2"
    (multi-core masks only on rk3588 / rk3576).  Not testable without a board.
    """

    name = "rknn-lite"

    def __init__(self, rknn_path: str | os.PathLike, core_mask: str = "auto"):
        super().__init__()
        from ..rknn.container import read_container
        from ..rknn.toolkit import rknn_lite_class

        if core_mask not in CORE_MASKS:
            raise RkspeechError(f"core mask {core_mask!r}: choose one of {', '.join(CORE_MASKS)}")
        rknn_path = os.fspath(rknn_path)
        c = read_container(rknn_path)
        self.container = c
        for infos, out in ((c.inputs, self._inputs), (c.outputs, self._outputs)):
            for t in infos:
                dt = _RKNN_DTYPES.get(t.model_dtype or "", None) or _RKNN_DTYPES.get(t.dtype, np.float32)
                out[t.name] = (tuple(t.shape), np.dtype(dt))
        RKNNLite = rknn_lite_class()
        masks = {"auto": "NPU_CORE_AUTO", "0": "NPU_CORE_0", "1": "NPU_CORE_1", "2": "NPU_CORE_2",
                 "0_1": "NPU_CORE_0_1", "0_1_2": "NPU_CORE_0_1_2"}
        self.rknn = RKNNLite(verbose=False)
        if self.rknn.load_rknn(rknn_path) != 0:
            self.close()
            raise RkspeechError(f"{rknn_path}: rknn-lite load_rknn failed")
        if self.rknn.init_runtime(core_mask=getattr(RKNNLite, masks[core_mask])) != 0:
            self.close()
            raise RkspeechError(f"{rknn_path}: rknn-lite init_runtime failed (built for "
                                f"{', '.join(c.target_platform)}; is this that chip, with librknnrt.so "
                                "and the NPU driver present?)")

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._ordered_feed(feed)
        fmt = ["nchw" if a.ndim == 4 else None for a in arrays]
        outs = self.rknn.inference(inputs=arrays, data_format=fmt if any(fmt) else None)
        return self._shape_outputs(outs)

    def close(self) -> None:
        if getattr(self, "rknn", None) is not None:
            rknn, self.rknn = self.rknn, None
            rknn.release()
