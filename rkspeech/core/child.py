"""Watching a child process that runs rknn-toolkit2: memory, time, death, and what it printed.

The toolkit crashes without a Python exception (bfloat16 on rk3588 segfaults; some quantized
dtypes on other chips abort), a big graph needs many GB (vocoder step B=64: 20.7 GB peak RSS to
convert; its simulator was killed by the kernel at 24.2 GB), and it prints from C to fd 1/2.  So
the conversion (a ``subprocess`` child) and the simulator (a ``multiprocessing`` spawn child) run
apart from the caller, and the caller uses these helpers to sample the child's RSS, kill it at a
timeout or memory limit before the kernel's OOM killer picks a victim, name the signal it died
of, and quote the last error line of its log.

This module also owns what such children leave behind: :func:`own` / :class:`owned` record a
child (and its process group) and the temp files or folders made for it; the CLI installs
:func:`install_signal_handlers`, so SIGTERM and SIGHUP raise :class:`Terminated` (a
KeyboardInterrupt) like SIGINT does, the ``finally`` blocks on the way out kill the child and
remove its files, and :func:`cleanup_owned` sweeps anything still recorded.

Standard library only at import time; psutil is optional (without it there is no RSS and no
memory limit, the rest works).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import tempfile
import time

from rkspeech.core.errors import RkspeechError
from rkspeech.core.orphans import POLL_SECONDS  # noqa: F401 - the poll interval of ChildWatch too
from rkspeech.core.workdirs import make_workdir

#: How often a waiting parent samples the child (RSS, timeout, memory limit).
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

    ``path`` None: a temporary file, readable with :meth:`tail` until :meth:`close`.  A log that
    cannot be opened is a one-line RkspeechError naming it; :meth:`close` is safe whether or not
    the capture was entered, so a ``finally: close()`` never hides the error that stopped it.
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else os.fspath(path)
        self.file = None
        self.saved = None

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        if self.path is None:
            self.file = tempfile.TemporaryFile()
        else:
            try:
                self.file = open(self.path, "ab")
            except OSError as exc:
                raise RkspeechError(f"cannot open the log {self.path} (in {os.getcwd()}): "
                                    f"{exc.strerror or exc}") from None
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def tail(self, n: int = 64 * 1024) -> str:
        if self.file is None:
            return ""
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
        saved, self.saved = self.saved, None
        if saved is not None:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])

    def close(self) -> None:
        file, self.file = self.file, None
        if file is not None:
            file.close()


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


# ---- ownership: the children and temp paths a process must not leave behind ----------------

class Terminated(KeyboardInterrupt):
    """Raised in the main thread by the SIGTERM / SIGHUP handler (SIGINT raises the plain
    KeyboardInterrupt), so the ``finally`` blocks that stop children and remove temp files run
    for every one of these signals alike."""

    def __init__(self, signum: int):
        super().__init__(signal_name(-signum))
        self.signum = signum


_OWNED: dict[int, dict] = {}  # id -> {"pid", "group", "paths"}
_NEXT = [0]


def own(pid: int | None = None, *, group: bool = False, paths=()) -> int:
    """Record a child process (``group``: it leads its own process group) and/or temp paths
    (files or folders) that this process must stop / remove if it ends early.  Returns a
    handle for :func:`release`."""
    _NEXT[0] += 1
    _OWNED[_NEXT[0]] = {"pid": pid, "group": group, "paths": [os.fspath(p) for p in paths], "files": []}
    return _NEXT[0]


def release(handle: int | None, *, cleanup: bool = False) -> None:
    """Forget an owned entry (None: nothing); ``cleanup``: kill its child and remove its paths first."""
    entry = _OWNED.pop(handle, None)
    if entry is not None and cleanup:
        _cleanup(entry)


def _remove(path: str) -> None:
    import shutil

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
    except OSError:
        pass


def _cleanup(entry: dict) -> None:
    if entry["pid"] is not None:
        kill_tree(entry["pid"], group=entry["group"])
        try:  # reap it, so no zombie is left for the length of our own exit
            os.waitpid(entry["pid"], os.WNOHANG)
        except (ChildProcessError, OSError):
            pass
    for path in entry["paths"]:
        _remove(path)
    for f in entry.get("files", ()):
        f.close()


class scratch:
    """``with scratch(folder, prefix=".heads.") as tmp:`` a work folder in ``folder`` for the
    block (:func:`make_workdir`: owner-locked, removed when the block ends however it ends, and
    swept by the next one made in ``folder`` if this process is SIGKILLed before that)."""

    def __init__(self, parent: str | os.PathLike, *, prefix: str):
        self.parent, self.prefix = parent, prefix
        self._owned = None

    def __enter__(self):
        self._owned = owned()
        return self._owned.workdir(self.parent, prefix=self.prefix)

    def __exit__(self, *exc):
        self._owned.__exit__(None, None, None)


def cleanup_owned() -> None:
    """Kill every owned child and remove every owned temp path (the CLI calls this on an
    interrupt, after the ``finally`` blocks had their turn; also registered with atexit)."""
    while _OWNED:
        _cleanup(_OWNED.pop(next(iter(_OWNED))))


class owned:
    """``with owned(paths=[tmpdir]) as o: o.set_child(popen.pid, group=True)`` -- the paths are
    removed when the block ends, however it ends; the child is killed when the block ends by an
    exception (a normal end means the caller waited for it)."""

    def __init__(self, pid: int | None = None, *, group: bool = False, paths=()):
        self.handle = own(pid, group=group, paths=paths)

    def set_child(self, pid: int, *, group: bool = False) -> None:
        _OWNED[self.handle].update(pid=pid, group=group)

    def add_path(self, path) -> None:
        _OWNED[self.handle]["paths"].append(os.fspath(path))

    def workdir(self, parent, *, prefix: str):
        """A work folder in ``parent`` (:func:`make_workdir`: a stale one of a dead process is
        swept first), removed with the block like ``add_path``'s, its owner lock held till then."""
        work, lock = make_workdir(parent, prefix=prefix)
        entry = _OWNED[self.handle]
        entry["paths"].append(os.fspath(work))
        entry["files"].append(lock)
        return work

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        entry = _OWNED.pop(self.handle, None)
        if entry is not None:
            if exc_type is None:
                entry["pid"] = None
            _cleanup(entry)


#: the signals that end a command: the CLI's handler (below) and ``rkspeech serve``'s graceful stop
#: (``serve.server.serve_forever``) take the same ones, so none of them ends a server abruptly
#: (SIGHUP, missing from serve's list, once cut a streamed answer and left tracebacks)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def install_signal_handlers() -> dict:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, SIGINT raises
    KeyboardInterrupt as it does by default; a second signal while cleaning up is ignored, so the cleanup finishes.
    Returns the previous handlers for :func:`restore_signal_handlers`; does nothing (returns
    {}) outside the main thread, where Python cannot install handlers."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        for s in ENDING_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    return {s: signal.signal(s, handler) for s in ENDING_SIGNALS}


def restore_signal_handlers(previous: dict) -> None:
    for s, h in previous.items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)


atexit.register(cleanup_owned)
