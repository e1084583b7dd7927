"""onnxruntime on the CPU: the host reference every other backend is compared with."""

from __future__ import annotations

import os

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.runners.base import Runner

_ONNX_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(int16)": np.int16,
}


class OnnxRuntimeRunner(Runner):
    """One ``InferenceSession`` over ``onnx_path``.

    ``threads``: intra-op threads (default :func:`rkspeech.core.threads.default_threads`), one
    inter-op thread.  ``spin=False``: idle intra-op threads sleep instead of spin-waiting for the
    next parallel section (onnxruntime's ``session.intra_op.allow_spinning``), for sessions that
    run beside other busy threads: ``speak``'s generation and vocoder threads each spinning took
    the cores from the other (published int4 plan, 2 cores: real-time factor 12.3 spinning vs
    3.2 not, load ~8; docs/speak.md).  ``InferenceSession.run`` is documented as safe to call from several
    threads, so one runner may serve several callers at once (the engine pool relies on it).
    Symbolic dims are kept as declared (their names) and not checked.
    """

    name = "onnxruntime"

    def __init__(self, onnx_path: str | os.PathLike, threads: int | None = None,
                 providers: list[str] | None = None, spin: bool = True):
        super().__init__()
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise RkspeechError(f"onnxruntime is not installed ({exc}): pip install onnxruntime") from None
        if threads is None:
            from rkspeech.core.threads import default_threads

            threads = default_threads()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        if not spin:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if os.path.exists(os.fspath(onnx_path) + ".data"):  # mapped, not copied (see the docstring)
            opts.add_session_config_entry("session.disable_prepacking", "1")
        try:
            self.session = ort.InferenceSession(os.fspath(onnx_path), opts,
                                                providers=providers or ["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RkspeechError(f"{onnx_path}: onnxruntime cannot load it: {str(exc).splitlines()[0]}") from None
        for specs, items in ((self._inputs, self.session.get_inputs()),
                             (self._outputs, self.session.get_outputs())):
            for i in items:
                shape = tuple(int(d) if isinstance(d, int) else d for d in i.shape)
                specs[i.name] = (shape, np.dtype(_ONNX_DTYPES.get(i.type, np.float32)))

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.session is None:
            raise RkspeechError(f"{self.name}: the runner is closed")
        return self.session.run(list(self._outputs), arrays)

    def close(self) -> None:
        self.session = None
