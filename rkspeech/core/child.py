"""Watching a child process that runs rknn-toolkit2: memory, time, death, and what it printed.

The toolkit crashes without a Python exception (bfloat16 on rk3588 segfaults; some quantized
dtypes on other chips abort), a big graph needs many GB (vocoder step B=64: 20.7 GB peak RSS to
convert; its simulator was killed by the kernel at 24.2 GB), and it prints from C to fd 1/2.  So
the conversion (a ``subprocess`` child) and the simulator (a ``multiprocessing`` spawn child) run
apart from the caller, and the caller uses these helpers to sample the child's RSS, kill it at a
timeout or memory limit before the kernel's OOM killer picks a victim, name the signal it died
of, and quote the last error line of its log.

Standard library only at import time; psutil is optional (without it there is no RSS and no
memory limit, the rest works).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time

#: How often a waiting parent samples the child (RSS, timeout, memory limit).
POLL_SECONDS = 0.25
OOM_HINT = " (often the kernel's out-of-memory killer)"


def signal_name(rc: int) -> str:
    """The signal behind a negative exit code (-9 -> 'SIGKILL')."""
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def death_message(rc: int | None) -> str:
    """How a child ended, for an error message: 'killed by SIGKILL (often the kernel's
    out-of-memory killer)', 'killed by SIGSEGV', 'exited with code 3'."""
    if rc is not None and rc < 0:
        return f"killed by {signal_name(rc)}{OOM_HINT if rc == -signal.SIGKILL else ''}"
    return f"exited with code {rc}"


def tree_rss(proc) -> int:
    """RSS in bytes of a psutil.Process and all its descendants (0 for vanished ones)."""
    import psutil

    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def kill_tree(pid: int, *, group: bool = False) -> None:
    """SIGKILL ``pid`` and its descendants; ``group``: also its process group (a child started
    with ``start_new_session=True`` leads one)."""
    descendants = []
    try:
        import psutil

        descendants = psutil.Process(pid).children(recursive=True)  # before the parent dies
    except Exception:  # noqa: BLE001 - psutil missing or the process is gone
        pass
    try:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass


def default_memory_limit_mb(fraction: float = 0.9) -> float | None:
    """``fraction`` of the memory available now (None without psutil): stop a child before the
    kernel's OOM killer picks a victim, which need not be the child."""
    try:
        import psutil

        return fraction * psutil.virtual_memory().available / 2**20
    except Exception:  # noqa: BLE001 - psutil missing
        return None


class ChildWatch:
    """Samples a child's RSS (children included) and says when it passed a limit.

    ``check()`` once per poll: it updates ``peak_mb`` and returns why the child must be killed
    ("timed out after 3 s", "exceeded the memory limit of 50 MB") or None.  ``peak_mb`` is None
    without psutil; the memory limit is then not enforced.
    """

    def __init__(self, pid: int, *, timeout: float | None = None, memory_limit_mb: float | None = None):
        self.timeout, self.memory_limit_mb = timeout, memory_limit_mb
        self.start = time.perf_counter()
        self.peak_mb: float | None = None
        self._proc = None
        try:
            import psutil

            self.peak_mb = 0.0
            self._proc = psutil.Process(pid)
        except ImportError:
            pass
        except Exception:  # noqa: BLE001 - exited already: nothing left to measure
            pass

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def sample(self) -> float | None:
        if self._proc is not None:
            self.peak_mb = max(self.peak_mb or 0.0, tree_rss(self._proc) / 2**20)
        return self.peak_mb

    def check(self) -> str | None:
        peak = self.sample()
        if self.timeout is not None and self.elapsed > self.timeout:
            return f"timed out after {self.timeout:g} s"
        if self.memory_limit_mb is not None and peak is not None and peak > self.memory_limit_mb:
            return f"exceeded the memory limit of {self.memory_limit_mb:g} MB"
        return None

    def peak_text(self) -> str:
        """', peak RSS 1.23 GB' (empty without psutil)."""
        return f", peak RSS {self.peak_mb / 1024:.2f} GB" if self.peak_mb is not None else ""


class FdCapture:
    """Send fd 1 and 2 to a file while the toolkit runs (its C code prints there).

    ``path`` None: a temporary file, readable with :meth:`tail` until :meth:`close`.
    """

    def __init__(self, path: str | None):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile() if self.path is None else open(self.path, "ab")
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def tail(self, n: int = 64 * 1024) -> str:
        self.file.flush()
        self.file.seek(0, os.SEEK_END)
        self.file.seek(max(0, self.file.tell() - n))
        return self.file.read().decode("utf-8", errors="replace")

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        try:  # C stdio buffers too: the toolkit prints from C
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


def log_tail(path: str | os.PathLike, n: int = 64 * 1024) -> str:
    """The last ``n`` bytes of a log as text ('' when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_error_line(text: str) -> str | None:
    """The last toolkit error line ('E ...') or Python exception line in ``text``.

    REGTASK lines are skipped: the compiler logs them at error level and still builds (28,666
    of them for one long dilated Conv1d, measured; ``convert.placement`` counts them), so they
    are not why a step failed."""
    for line in reversed(text.splitlines()):
        clean = line.replace("\x1b[1;31m", "").replace("\x1b[0m", "").strip()
        if "REGTASK" in clean:
            continue
        if clean.startswith("E ") or "Error" in clean.split(":")[0]:
            return clean[:300]
    return None
