"""rknn-toolkit-lite2 on a board: a .rknn on the NPU.

Written to rknn-toolkit-lite2 2.5.0's own ``rknnlite/api/rknn_lite.py`` (read from its aarch64
wheel): ``RKNNLite(verbose=False, verbose_file=None)``, ``load_rknn(path, key_path=None)`` and
``init_runtime(target=None, device_id=None, async_mode=False, core_mask=NPU_CORE_AUTO)`` return 0
or -1; ``inference(inputs, data_type=None, data_format=None, inputs_pass_through=None,
get_frame_id=False, reuse_outputs=False)`` returns the outputs or None on any error (the reason
only in its log); core masks ``NPU_CORE_AUTO`` 0, ``_0`` 1, ``_1`` 2, ``_2`` 4, ``_0_1`` 3,
``_0_1_2`` 7.  What pass-through and reuse_outputs save, and what only the C API reaches:
docs/board.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time

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
    one core; multi-core masks only on rk3588 / rk3576).

    ``pass_through``: inputs the NPU holds as float16 in their own layout (fp16 at the graph
    boundary and not 4-D, so no NCHW -> NC1HWC2 re-layout: the vocoder's flat cache, the talker's
    2-D inputs) are declared float16 (``input_specs``) and handed over with pass-through set, so
    the runtime neither converts nor re-lays them; a caller that keeps such a state in float16
    pays no conversion at all.  ``reuse_outputs``: the runtime returns views of its own output
    buffers, overwritten by the next call: only for callers that are done with a call's outputs
    before the next (``runtime.golden.replay``, which feeds a state output into the next call's
    inputs, which the runtime copies in before it writes outputs).  ``overhead_s``: time spent
    in this runner around ``inference()`` (checks, casts), summed over calls.
    Tested with a stand-in of the 2.5.0 API (tests/board/test_board.py), never on a board here.
    """

    name = "rknn-lite"

    def __init__(self, rknn_path: str | os.PathLike, core_mask: str = "auto", *, pass_through: bool = False,
                 reuse_outputs: bool = False):
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
        #: per input, in order: handed over as float16 with the pass-through flag set
        self.pass_through = [bool(pass_through) and t.dtype == "float16" and len(t.shape) != 4 for t in c.inputs]
        for t, on in zip(c.inputs, self.pass_through):
            if on:
                self._inputs[t.name] = (tuple(t.shape), np.dtype(np.float16))
        self.reuse_outputs = bool(reuse_outputs)
        self.overhead_s = 0.0
        RKNNLite = rknn_lite_class()
        #: what the toolkit and librknnrt printed while loading (the runtime's version line on a
        #: board); check-board puts it in its report
        self.runtime_log = ""
        self.rknn = None
        failed = self._open_quietly(RKNNLite, rknn_path, getattr(RKNNLite, _MASK_NAMES[core_mask]))
        if failed:
            self.close()
            log = keep_log(self.runtime_log, os.path.basename(rknn_path))
            reason = toolkit_reason(self.runtime_log)
            hint = (f" (built for {', '.join(c.target_platform)}; is this that chip, with librknnrt.so and the "
                    "NPU driver present? docs/board.md says where librknnrt.so comes from)"
                    if failed == "init_runtime" else "")
            raise RkspeechError(f"{rknn_path}: rknn-lite {failed} failed{': ' + reason if reason else ''}{hint}"
                                f"{'; its log: ' + log if log else ''}")

    def _open_quietly(self, RKNNLite, rknn_path: str, mask: int) -> str | None:
        """``RKNNLite()``, ``load_rknn``, ``init_runtime`` with fd 1 and 2 captured (``runtime_log``).

        Off a board, rknn-toolkit-lite2 2.5.0 prints about ten log lines and a Python traceback from
        ``init_runtime`` before returning -1 (issue 40, measured on an emulated aarch64): that noise
        belongs in a file, behind our one line.  Returns the call that failed, or None.
        """
        from rkspeech.core.child import FdCapture

        cap = FdCapture(None)
        failed = None
        try:
            # fd 1 and 2 for the C runtime; sys.stdout / sys.stderr too, for Python prints when
            # they are not the process's own streams (a test's capture, a server's log)
            with cap, open(1, "w", closefd=False) as out, open(2, "w", closefd=False) as err, \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    self.rknn = RKNNLite(verbose=False)
                    failed = "load_rknn"
                    if self.rknn.load_rknn(rknn_path) == 0:
                        failed = "init_runtime"
                        if self.rknn.init_runtime(core_mask=mask) == 0:
                            failed = None
                except Exception as exc:  # noqa: BLE001 - the toolkit raises what it likes; one line below
                    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
                    failed = failed or "RKNNLite()"
            self.runtime_log = cap.tail()
        finally:
            cap.close()
        return failed

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.rknn is None:
            raise RkspeechError(f"{self.name}: the runner is closed")
        inputs = list(arrays.values())
        extra = {}
        if any(self.pass_through):
            extra["inputs_pass_through"] = [int(on) for on in self.pass_through]
        if self.reuse_outputs:
            extra["reuse_outputs"] = True
        t0 = time.perf_counter()
        outputs = self.rknn.inference(inputs=inputs, data_format=rknn_data_formats(inputs), **extra)
        self._runtime_s = time.perf_counter() - t0
        if outputs is None:  # rknn-toolkit-lite2 returns None on any error; the reason is only in its log
            raise RkspeechError(f"{os.path.basename(self.path)}: rknn-lite inference returned no outputs (the "
                                "runtime's reason is in its log above; a librknnrt older than the toolkit that "
                                "built the .rknn is the usual cause: rkspeech doctor)")
        if len(outputs) != len(self._outputs):
            raise RkspeechError(f"{os.path.basename(self.path)}: rknn-lite returned {len(outputs)} outputs, the "
                                f".rknn declares {len(self._outputs)}")
        return outputs

    def infer(self, feed):
        """``Runner.infer``, timing what this runner adds around ``inference()``."""
        self._runtime_s = 0.0
        t0 = time.perf_counter()
        try:
            return super().infer(feed)
        finally:
            self.overhead_s += time.perf_counter() - t0 - self._runtime_s

    def close(self) -> None:
        if getattr(self, "rknn", None) is not None:
            rknn, self.rknn = self.rknn, None
            rknn.release()


def toolkit_reason(log: str) -> str:
    """The toolkit's last error line in a captured log: an ``E ...`` log line or a Python
    ``SomeError: ...`` / ``Exception: ...`` line ('' when there is none), at most 200 characters."""
    for line in reversed([ln.strip() for ln in log.splitlines() if ln.strip()]):
        if re.match(r"(E\s|E RKNN:|[A-Za-z_.]*(Exception|Error)\b.*:)", line):
            return line[:200]
    return ""


def keep_log(text: str, name: str) -> str:
    """Write a captured runtime log to a kept temporary file; its path ('' when empty or unwritable)."""
    if not text.strip():
        return ""
    try:
        fd, path = tempfile.mkstemp(prefix=f"rkspeech-rknnlite-{name}-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path
    except OSError:
        return ""
