"""The rknn-toolkit2 simulator in a child process, so that running out of memory is an error
message and not the end of the calling process.

Why: the simulator builds the whole graph in-process and keeps every intermediate tensor.  The
npu formulation of the published vocoder step at B=64 built in 150 s and was then killed by the
kernel OOM killer at 24.2 GB during its first inference (measured 2026-11-29, in-process, on this
24 GB machine), taking ``rkspeech verify`` with it.  Here the child dies instead; the parent
names the signal, the phase (build / inference) and the peak RSS, and can enforce a memory
limit of its own before the kernel does.

``SimulatorProcess`` is a :class:`~rkspeech.runtime.runners.Runner`: ``infer(feed)`` sends the
arrays over a pipe (a published-size cache is 5.2 MB) and returns the child's outputs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any

import numpy as np

from ..errors import RkspeechError
from .runners import Runner, _onnx_io

POLL_SECONDS = 0.25


def _serve(conn, onnx_path: str, kwargs: dict[str, Any]) -> None:
    """Child: build the simulator, then answer ``("infer", feed)`` until ``("close",)``."""
    from .runners import RknnSimulatorRunner

    try:
        runner = RknnSimulatorRunner(onnx_path, **kwargs)
    except RkspeechError as exc:
        conn.send(("error", str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("error", f"rknn simulator build failed: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    try:
        while True:
            msg = conn.recv()
            if msg[0] != "infer":
                break
            try:
                conn.send(("ok", runner.infer(msg[1])))
            except Exception as exc:  # noqa: BLE001
                conn.send(("error", f"rknn simulator inference failed: {type(exc).__name__}: {exc}"))
    except EOFError:
        pass
    finally:
        runner.close()


def default_memory_limit_mb(fraction: float = 0.9) -> float | None:
    """``fraction`` of the memory available now: stop the child before the kernel's OOM killer
    picks a victim (which need not be the simulator)."""
    try:
        import psutil

        return fraction * psutil.virtual_memory().available / 2**20
    except Exception:  # noqa: BLE001 - psutil missing
        return None


class SimulatorProcess(Runner):
    """The simulator for ``onnx_path`` in a spawned child (same arguments as ``RknnSimulatorRunner``).

    ``memory_limit_mb``: kill the child when its RSS passes this (None: leave it to the kernel).
    ``peak_rss_mb`` holds the largest RSS seen so far.
    """

    name = "rknn-simulator"

    def __init__(self, onnx_path, target: str = "rk3588", dtype: str = "fp16", *,
                 memory_limit_mb: float | None = None, **kwargs):
        super().__init__()
        self.onnx_path = os.fspath(onnx_path)
        self._inputs, self._outputs = _onnx_io(self.onnx_path)
        self.memory_limit_mb = memory_limit_mb
        self.peak_rss_mb = 0.0
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child_conn, self.onnx_path,
                                                      {"target": target, "dtype": dtype, **kwargs}),
                                 daemon=True)
        self._proc.start()
        child_conn.close()
        try:
            self._wait("build")
        except BaseException:
            self.close()
            raise

    def _rss_mb(self) -> float:
        try:
            import psutil
        except ImportError:
            return 0.0
        from ..rknn.convert import tree_rss

        try:
            return tree_rss(psutil.Process(self._proc.pid)) / 2**20
        except psutil.Error:  # the child is gone
            return 0.0

    def _wait(self, phase: str):
        start = time.perf_counter()
        while not self._conn.poll(POLL_SECONDS):
            self.peak_rss_mb = max(self.peak_rss_mb, self._rss_mb())
            if not self._proc.is_alive():
                break
            if self.memory_limit_mb is not None and self.peak_rss_mb > self.memory_limit_mb:
                self._proc.kill()
                self._proc.join()
                raise RkspeechError(
                    f"rknn simulator ({phase} of {os.path.basename(self.onnx_path)}) exceeded the memory "
                    f"limit of {self.memory_limit_mb:g} MB after {time.perf_counter() - start:.0f} s; "
                    "the simulator keeps every intermediate tensor: verify a smaller B, or skip this check "
                    "(rkspeech build --skip-verify)")
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=10)
            raise RkspeechError(self._death_message(phase)) from None
        if kind == "error":
            raise RkspeechError(payload)
        return payload

    def _death_message(self, phase: str) -> str:
        rc = self._proc.exitcode
        if rc is not None and rc < 0:
            from ..rknn.convert import signal_name

            how = f"killed by {signal_name(rc)}"
            if rc == -signal.SIGKILL:
                how += " (often the kernel's out-of-memory killer)"
        else:
            return (f"rknn simulator child exited with code {rc} during {phase} of "
                    f"{os.path.basename(self.onnx_path)} (its error is on stderr; a script that starts "
                    "it needs an `if __name__ == \"__main__\":` guard, as for any spawned process)")
        return (f"rknn simulator child {how} during {phase} of {os.path.basename(self.onnx_path)}, "
                f"peak RSS {self.peak_rss_mb / 1024:.2f} GB; the simulator keeps every intermediate "
                "tensor: verify a smaller B, or skip this check (rkspeech build --skip-verify)")

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._proc is None:
            raise RkspeechError("rknn simulator: the runner is closed")
        arrays = dict(zip(self._inputs, self._ordered_feed(feed)))
        try:
            self._conn.send(("infer", arrays))
        except (BrokenPipeError, OSError):
            raise RkspeechError(self._death_message("inference")) from None
        return self._wait("inference")

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:
            if proc.is_alive():
                self._conn.send(("close",))
                proc.join(timeout=30)
        except (BrokenPipeError, OSError):
            pass
        if proc.is_alive():
            proc.kill()
            proc.join()
        self._conn.close()
