"""The rknn-toolkit2 simulator in a child process, so that running out of memory is an error
message and not the end of the calling process.

Why: the simulator builds the whole graph in-process and keeps every intermediate tensor.  The
npu formulation of the published vocoder step at B=64 built in 150 s and was then killed by the
kernel OOM killer at 24.2 GB during its first inference (measured in-process on a 24 GB
machine), taking ``rkspeech verify`` with it.  Here the child dies instead; the parent names the
signal, the phase (build / inference) and the peak RSS, and enforces a memory limit of its own
before the kernel does.

``infer(feed)`` sends the checked arrays over a pipe (a published-size cache is 5.2 MB) and
returns the child's outputs.  The child is recorded in ``core.child`` while it lives: an
interrupt or a SIGTERM / SIGHUP to the caller (the CLI turns those into exceptions) kills it at
once instead of waiting for it to finish its build.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from rkspeech.core.child import (
    POLL_SECONDS,
    ChildWatch,
    death_message,
    kill_tree,
    own,
    release,
)
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET
from rkspeech.core.workdirs import make_workdir
from rkspeech.runtime.runners.base import Runner, onnx_io_specs

#: keyword arguments that name files: made absolute before the child changes to its work folder
PATH_KWARGS = ("log_path", "dataset")

_TOO_BIG = ("the simulator keeps every intermediate tensor: simulate a smaller graph (a smaller B) or "
            "in pieces (--pieces N), or skip the simulator check (--skip-sim)")


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line; the toolkit puts its own traceback in the message, whose
    last line is the error itself."""
    kind = type(exc).__name__
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return kind
    return lines[-1] if lines[-1].startswith(kind + ":") else f"{kind}: {lines[-1]}"


def _serve(conn, onnx_path: str, kwargs: dict[str, Any], workdir: str, parent_pid: int | None = None) -> None:
    """Child: build the simulator, then answer ``("infer", arrays)`` until ``("close",)``.

    It works in ``workdir`` (its cwd and TMPDIR), which the parent removes: the toolkit drops
    files in both (an ``audio_values.npy`` once appeared in the caller's cwd during a run).
    It dies with its parent (a SIGKILLed build left it building: issue 37)."""
    import tempfile

    if parent_pid:
        from rkspeech.core.orphans import die_with_parent

        die_with_parent(parent_pid, kernel=False)

    os.chdir(workdir)
    os.environ["TMPDIR"] = workdir
    tempfile.tempdir = workdir
    from rkspeech.runtime.runners.simulator import RknnSimulatorRunner

    try:
        runner = RknnSimulatorRunner(onnx_path, **kwargs)
    except RkspeechError as exc:
        conn.send(("error", str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("error", f"rknn simulator build failed: {_one_line(exc)}"))
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
                conn.send(("error", f"rknn simulator inference failed: {_one_line(exc)}"))
    except EOFError:
        pass
    finally:
        runner.close()


class SimulatorProcess(Runner):
    """The simulator for ``onnx_path`` in a spawned child (arguments as ``RknnSimulatorRunner``).

    ``memory_limit_mb``: kill the child when its RSS (children included) passes this (None:
    leave it to the kernel).  ``peak_rss_mb`` holds the largest RSS seen so far.
    """

    name = "rknn-simulator"

    def __init__(self, onnx_path, target: str = DEFAULT_TARGET, dtype: str = "fp16", *,
                 memory_limit_mb: float | None = None, **kwargs):
        super().__init__()
        self.onnx_path = os.fspath(onnx_path)
        self._inputs, self._outputs = onnx_io_specs(self.onnx_path)
        self.memory_limit_mb = memory_limit_mb
        self.peak_rss_mb = 0.0
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        # the child works in a folder of its own: every path it is handed is absolute
        kwargs = {k: (os.path.abspath(v) if k in PATH_KWARGS and v else v) for k, v in kwargs.items()}
        # owner-locked: one left by a SIGKILLed run is swept by the next (core.workdirs.make_workdir)
        workdir, self._workdir_lock = make_workdir(tempfile.gettempdir(), prefix="rkspeech-sim.")
        self._workdir = str(workdir)
        self._proc = ctx.Process(target=_serve, args=(child_conn, os.path.abspath(self.onnx_path),
                                                      {"target": target, "dtype": dtype, **kwargs},
                                                      self._workdir, os.getpid()),
                                 daemon=True)
        try:
            self._proc.start()
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir_lock.close()
            raise
        self._owned = own(self._proc.pid, paths=[self._workdir])
        child_conn.close()
        try:
            self._wait("build")
        except BaseException:
            self.close()
            raise

    def _what(self, phase: str) -> str:
        return f"{phase} of {os.path.basename(self.onnx_path)}"

    def _wait(self, phase: str):
        watch = ChildWatch(self._proc.pid, memory_limit_mb=self.memory_limit_mb)
        try:
            while not self._conn.poll(POLL_SECONDS):
                over = watch.check()
                if not self._proc.is_alive():
                    break
                if over:
                    kill_tree(self._proc.pid)
                    self._proc.join()
                    raise RkspeechError(f"rknn simulator ({self._what(phase)}) {over} after "
                                        f"{watch.elapsed:.0f} s; {_TOO_BIG}")
        except KeyboardInterrupt:  # includes core.child.Terminated: do not wait for the child
            self._kill()
            raise
        finally:
            self.peak_rss_mb = max(self.peak_rss_mb, watch.peak_mb or 0.0)
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=10)
            raise RkspeechError(self._death_message(phase)) from None
        if kind == "error":
            raise RkspeechError(payload)
        return payload

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_tree(proc.pid)
            proc.join()
            self._conn.close()
        self._release()

    def _release(self) -> None:
        """Forget the (ended) child and remove its work folder."""
        release(getattr(self, "_owned", None))
        self._owned = None
        if getattr(self, "_workdir", None):
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            self._workdir_lock.close()

    def _death_message(self, phase: str) -> str:
        rc = self._proc.exitcode
        if rc is not None and rc < 0:
            return (f"rknn simulator child {death_message(rc)} during {self._what(phase)}, "
                    f"peak RSS {self.peak_rss_mb / 1024:.2f} GB; {_TOO_BIG}")
        return (f"rknn simulator child {death_message(rc)} during {self._what(phase)} (its error is "
                "on stderr; a script that starts it needs an `if __name__ == \"__main__\":` guard, "
                "as for any spawned process)")

    def _infer(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._proc is None:
            raise RkspeechError("rknn simulator: the runner is closed")
        try:
            self._conn.send(("infer", arrays))
        except (BrokenPipeError, OSError):
            self._proc.join(timeout=10)
            raise RkspeechError(self._death_message("inference")) from None
        return self._wait("inference")

    def close(self) -> None:
        if getattr(self, "_proc", None) is None:
            return
        proc, self._proc = self._proc, None
        try:
            if proc.is_alive():
                self._conn.send(("close",))
                proc.join(timeout=30)
        except (BrokenPipeError, OSError):
            pass
        except KeyboardInterrupt:
            kill_tree(proc.pid)
            proc.join()
            self._conn.close()
            self._release()
            raise
        if proc.is_alive():
            kill_tree(proc.pid)
            proc.join()
        self._conn.close()
        self._release()
