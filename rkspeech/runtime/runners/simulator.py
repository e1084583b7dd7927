"""rknn-toolkit2's x86 simulator, in the calling process.

Used inside the simulator child (:mod:`rkspeech.runtime.runners.sim_process`); callers open the
simulator with ``open_runner("sim", ...)``, which always runs it in a child, because a build
that runs out of memory here takes the calling process with it.

How the simulator works (rknn-toolkit2 2.5.0, measured here): ``init_runtime()`` with no target
runs the x86 simulator, but only for a model built in the same ``RKNN`` object from its source
(``load_onnx`` + ``build``).  A model loaded with ``load_rknn`` is refused ("RKNN model that
loaded by 'load_rknn' not support inference on the simulator").  So this runner takes the ONNX
path + target + dtype and builds (seconds for tiny graphs; the memory and time of a full
conversion for big ones).  Graph I/O is fp16 at the boundary for fp16 builds; ``infer`` returns
float32 arrays of the declared ONNX output shapes.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from rkspeech.convert.conversion import CALIBRATED_DTYPES, DTYPES
from rkspeech.core.child import FdCapture, last_error_line
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET
from rkspeech.runtime.runners.base import Runner, onnx_io_specs, rknn_data_formats


class RknnSimulatorRunner(Runner):
    """The simulator for ``onnx_path`` built for ``target`` / ``dtype``.

    The toolkit's console output goes to ``log_path`` (or is discarded).  ``release()`` unsets
    TMPDIR at C level; :meth:`close` restores it.
    """

    name = "rknn-simulator"

    def __init__(self, onnx_path: str | os.PathLike, target: str = DEFAULT_TARGET, dtype: str = "fp16",
                 dataset: str | None = None, opt_level: int | None = None,
                 log_path: str | None = None, verbose: bool = False, hybrid: dict | None = None):
        super().__init__()
        from rkspeech.convert.toolkit import rknn_class

        onnx_path = os.fspath(onnx_path)
        if dtype not in DTYPES:
            raise RkspeechError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        if dtype in CALIBRATED_DTYPES and not dataset:
            raise RkspeechError(f"{dtype} simulation needs a calibration dataset")
        self._inputs, self._outputs = onnx_io_specs(onnx_path)
        self.target, self.dtype = target, dtype
        RKNN = rknn_class()
        self.rknn = None
        cap = FdCapture(log_path)
        try:
            with cap, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the toolkit's onnx.mapping deprecation noise
                if dtype != "int16-hybrid":
                    self.rknn = RKNN(verbose=verbose)
                config: dict[str, Any] = {"target_platform": target}
                if opt_level is not None:
                    config["optimization_level"] = int(opt_level)
                if dtype == "int16-hybrid":  # both hybrid steps, then the simulator (as convert.child)
                    self.rknn, self.hybrid_info = _hybrid(RKNN, verbose, config, onnx_path, dataset, hybrid)
                steps = [] if dtype == "int16-hybrid" else [
                    ("config", lambda: self.rknn.config(**config)),
                    ("load_onnx", lambda: self.rknn.load_onnx(model=onnx_path)),
                    ("build", lambda: self.rknn.build(do_quantization=dtype == "int8", dataset=dataset)),
                ]
                steps.append(("init_runtime", lambda: self.rknn.init_runtime()))
                failed = None
                for step, fn in steps:
                    if fn() != 0:
                        failed = step
                        break
            if failed:
                why = last_error_line(cap.tail())
                self.close()
                raise RkspeechError(f"rknn simulator: {failed}() failed for {onnx_path}"
                                    f"{': ' + why if why else ''}"
                                    f"{'; log: ' + log_path if log_path else ''}")
        finally:
            cap.close()

    hybrid_info: dict | None = None

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.rknn is None:
            raise RkspeechError(f"{self.name}: the runner is closed")
        inputs = list(arrays.values())
        # The toolkit prints from C on every call (preparation bars on the first, a
        # 'data_format is not set' warning for non-4-D inputs on each): keep fd 1/2 quiet.
        cap = FdCapture(None)
        try:
            with cap, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self.rknn.inference(inputs=inputs, data_format=rknn_data_formats(inputs))
        finally:
            cap.close()

    def close(self) -> None:
        if getattr(self, "rknn", None) is not None:
            from rkspeech.convert.toolkit import release

            rknn, self.rknn = self.rknn, None
            release(rknn)


def _hybrid(RKNN, verbose: bool, config: dict, onnx_path: str, dataset: str, hybrid: dict | None):
    """``convert.hybrid_int16.hybrid_build`` in a temporary folder (its step files); a failed step
    is a one-line RkspeechError."""
    import tempfile

    from rkspeech.convert.hybrid_int16 import HybridInt16Options, hybrid_build

    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="rkspeech-hybrid.") as work:
        os.chdir(work)
        try:
            return hybrid_build(lambda: RKNN(verbose=verbose), config, onnx_path, os.path.abspath(
                os.path.join(here, dataset)), HybridInt16Options.from_dict(hybrid), say=lambda _m: None)
        except RuntimeError as exc:
            raise RkspeechError(f"rknn simulator (int16-hybrid) for {onnx_path}: {exc}") from None
        finally:
            os.chdir(here)
