"""rknn-toolkit-lite2 on a board: a .rknn on the NPU."""

from __future__ import annotations

import os

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import CORE_MASKS
from rkspeech.runtime.runners.base import Runner, rknn_data_formats

# The .rknn records each tensor's dtype; fp16 tensors are fed and returned as float32.
_RKNN_DTYPES = {"float16": np.float32, "float32": np.float32, "int64": np.int64, "int32": np.int32,
                "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "bool": np.bool_}
_MASK_NAMES = {"auto": "NPU_CORE_AUTO", "0": "NPU_CORE_0", "1": "NPU_CORE_1", "2": "NPU_CORE_2",
               "0_1": "NPU_CORE_0_1", "0_1_2": "NPU_CORE_0_1_2"}


class RknnLiteRunner(Runner):
    """``RKNNLite().load_rknn`` + ``init_runtime(core_mask)``.

    I/O names, shapes and dtypes come from the .rknn itself (``contracts.rknn_file``).
    ``core_mask``: one of :data:`rkspeech.core.targets.CORE_MASKS` ("auto": the runtime picks
    one core; multi-core masks only on rk3588 / rk3576).  Not testable without a board.
    """

    name = "rknn-lite"

    def __init__(self, rknn_path: str | os.PathLike, core_mask: str = "auto"):
        super().__init__()
        from rkspeech.convert.toolkit import rknn_lite_class
        from rkspeech.contracts.rknn_file import read_container

        core_mask = str(core_mask)
        if core_mask not in CORE_MASKS:
            raise RkspeechError(f"core mask {core_mask!r}: choose one of {', '.join(CORE_MASKS)}")
        rknn_path = os.fspath(rknn_path)
        self.path = rknn_path
        c = read_container(rknn_path)
        self.container = c
        for infos, specs in ((c.inputs, self._inputs), (c.outputs, self._outputs)):
            for t in infos:
                dt = _RKNN_DTYPES.get(t.model_dtype or "", None) or _RKNN_DTYPES.get(t.dtype, np.float32)
                specs[t.name] = (tuple(t.shape), np.dtype(dt))
        RKNNLite = rknn_lite_class()
        self.rknn = RKNNLite(verbose=False)
        if self.rknn.load_rknn(rknn_path) != 0:
            self.close()
            raise RkspeechError(f"{rknn_path}: rknn-lite load_rknn failed")
        if self.rknn.init_runtime(core_mask=getattr(RKNNLite, _MASK_NAMES[core_mask])) != 0:
            self.close()
            raise RkspeechError(f"{rknn_path}: rknn-lite init_runtime failed (built for "
                                f"{', '.join(c.target_platform)}; is this that chip, with librknnrt.so "
                                "and the NPU driver present?)")

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.rknn is None:
            raise RkspeechError(f"{self.name}: the runner is closed")
        inputs = list(arrays.values())
        outputs = self.rknn.inference(inputs=inputs, data_format=rknn_data_formats(inputs))
        if outputs is None:  # rknn-toolkit-lite2 returns None on any error; the reason is only in its log
            raise RkspeechError(f"{os.path.basename(self.path)}: rknn-lite inference returned no outputs (the "
                                "runtime's reason is in its log above; a librknnrt older than the toolkit that "
                                "built the .rknn is the usual cause: rkspeech doctor)")
        if len(outputs) != len(self._outputs):
            raise RkspeechError(f"{os.path.basename(self.path)}: rknn-lite returned {len(outputs)} outputs, the "
                                f".rknn declares {len(self._outputs)}")
        return outputs

    def close(self) -> None:
        if getattr(self, "rknn", None) is not None:
            rknn, self.rknn = self.rknn, None
            rknn.release()
