"""A stand-in for rknn-toolkit-lite2 2.5.0's ``RKNNLite`` (no board here), for the board tests.

TEST DOUBLE.  Its surface is the one in rknn-toolkit-lite2 2.5.0's ``rknnlite/api/rknn_lite.py``
(read from the aarch64 wheel, ``pip download rknn-toolkit-lite2==2.5.0 --no-deps``): the
constructor, ``load_rknn(path, key_path=None)`` and ``init_runtime(target=None, device_id=None,
async_mode=False, core_mask=NPU_CORE_AUTO)`` returning 0 / -1, ``inference(inputs,
data_type=None, data_format=None, inputs_pass_through=None, get_frame_id=False,
reuse_outputs=False)`` returning a list or None on any error (the reason only in ``log``), the
core-mask constants with their values, ``get_sdk_version()``, ``release()``.

It computes with onnxruntime on the ONNX each .rknn was converted from (``GRAPHS``: .rknn path ->
.onnx path, set by the test), rounding every input and output to float16 as the NPU's fp16
boundary does.  An input flagged pass-through must arrive as float16 (the real runtime would take
its bytes as they are: float32 bytes would be garbage), else inference returns None; with
``reuse_outputs`` it returns the same arrays every call, overwritten, as the real one does.
"""

from __future__ import annotations

import numpy as np


class StandInRKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    GRAPHS: dict[str, str] = {}
    #: every instance's calls: (rknn, data_type, data_format, inputs_pass_through, reuse_outputs, dtypes)
    calls: list = []
    core_masks: list = []
    fail = False
    log: list = []

    def __init__(self, verbose=False, verbose_file=None):
        self.path = None
        self.session = None
        self._reused = None

    def load_rknn(self, path, key_path=None):
        if str(path) not in self.GRAPHS:
            self.log.append(f"E load_rknn: {path} not found")
            return -1
        self.path = str(path)
        return 0

    def init_runtime(self, target=None, device_id=None, async_mode=False, core_mask=NPU_CORE_AUTO):
        import onnxruntime as ort

        if self.path is None:
            return -1
        StandInRKNNLite.core_masks.append(core_mask)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(self.GRAPHS[self.path], so, providers=["CPUExecutionProvider"])
        return 0

    def inference(self, inputs, data_type=None, data_format=None, inputs_pass_through=None, get_frame_id=False,
                  reuse_outputs=False):
        StandInRKNNLite.calls.append((self.path, data_type, data_format, inputs_pass_through, reuse_outputs,
                                      [np.asarray(a).dtype for a in inputs]))
        if self.session is None or StandInRKNNLite.fail:
            self.log.append("E Catch exception when running RKNN model.")
            return None
        metas = self.session.get_inputs()
        if len(inputs) != len(metas):
            self.log.append("E Catch exception when setting inputs.")
            return None
        feed = {}
        for k, (meta, a) in enumerate(zip(metas, inputs)):
            a = np.asarray(a)
            if inputs_pass_through and inputs_pass_through[k] and a.dtype != np.float16:
                self.log.append(f"E pass-through input {k} is {a.dtype}, the model holds float16")
                return None
            want = np.int64 if "int64" in meta.type else np.float32
            if want == np.float32:
                a = a.astype(np.float16).astype(np.float32)  # the fp16 boundary
            feed[meta.name] = a.astype(want).reshape(meta.shape)
        outs = [np.asarray(o) for o in self.session.run(None, feed)]
        outs = [o.astype(np.float16).astype(np.float32) if o.dtype.kind == "f" else o for o in outs]
        if not reuse_outputs:
            return outs
        if self._reused is None:
            self._reused = [np.empty_like(o) for o in outs]
        for buf, o in zip(self._reused, outs):
            np.copyto(buf, o)
        return self._reused

    def get_sdk_version(self):
        return "librknnrt version: 2.5.0 (stand-in)" if self.session is not None else None

    def release(self):
        self.session = None
