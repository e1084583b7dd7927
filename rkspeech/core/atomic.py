"""Write a file so that readers see the old content or the new, never half of it.

The content goes to a temporary name unique to this process and call, in the same folder (so the
rename is atomic on one filesystem), and is renamed into place only when complete; on any error
the temporary file is removed and an earlier file at ``path`` is untouched.  Two writers of the
same path never share a temporary name.  A location that cannot be written (found when the folder,
the temporary file or the rename fails, or a write runs out of room) is a one-line RkspeechError.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

# mkstemp makes 0600 files; a finished output gets the mode any new file would (0666 & ~umask).
# Read once, at import: os.umask can only be read by setting it, which races with other threads.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; rename it onto ``path`` when the block ends.

    ``suffix`` keeps the extension a writer may insist on (onnx, torch and soundfile look at it).
    """
    final = Path(path)
    with _write_errors(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{suffix}", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            yield tmp
        except OSError as exc:
            if exc.errno in _DISK_ERRNOS:  # the writer's own write ran out of room
                raise _write_error(final, exc) from None
            raise
        with _write_errors(final):
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


#: errors of a write into the temporary file that say where it went, not what a writer did wrong
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def _write_error(final: Path, exc: OSError):
    from rkspeech.core.errors import RkspeechError

    return RkspeechError(f"cannot write {final}: {exc.strerror or exc}"
                         f"{f' ({exc.filename})' if exc.filename and str(exc.filename) != str(final) else ''}")


@contextlib.contextmanager
def _write_errors(final: Path) -> Iterator[None]:
    """Making the folder, the temporary file and the rename: an OSError there is a place that
    cannot be written (a folder that became a file, a read-only or full disk), found at the end
    of a long run; one line naming the output, not a traceback (issue 37)."""
    try:
        yield
    except OSError as exc:
        raise _write_error(final, exc) from None


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, data, *, indent: int = 2) -> Path:
    """JSON (``default=str`` for paths and numpy scalars), atomically."""
    return write_text(path, json.dumps(data, indent=indent, default=str) + "\n")


def read_json_object(path: str | os.PathLike, what: str) -> dict:
    """The JSON object in ``path``; one line naming ``what`` when it is missing, unreadable, not
    JSON or not an object."""
    from rkspeech.core.errors import RkspeechError

    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"{what} {p} is a directory; pass the file")
    if not p.is_file():
        raise RkspeechError(f"{what} {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"{what} {p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RkspeechError(f"{what} {p}: not a JSON object")
    return data


def check_writable(path: str | os.PathLike, *, what: str = "output", folder: bool = False,
                   make_parents: bool = False) -> Path:
    """Refuse, before any work, an output location that cannot be written.

    ``folder`` False: ``path`` is a file to be (re)written: it must not be a directory, and its
    folder must exist and accept a new file.  ``folder`` True: ``path`` is an output folder: it
    must not be a file, and it (or, when missing, its nearest existing parent, where it will be
    created) must accept a new file; nothing is created here.  The check creates and removes a
    unique probe file, because permission bits do not tell (root ignores them; read-only mounts
    and /proc refuse anyway).  ``make_parents``: a file whose folder is missing is fine when the
    writer creates it (as :func:`atomic_path` does): the nearest existing parent is probed."""
    from rkspeech.core.errors import RkspeechError

    p = Path(path)
    if folder or (make_parents and not p.parent.exists()):
        probe_dir = p if folder else p.parent
        while not probe_dir.exists() and probe_dir != probe_dir.parent:
            probe_dir = probe_dir.parent
        if not probe_dir.is_dir():
            raise RkspeechError(f"{what} folder {p} is a file; pass a folder" if probe_dir == p else
                                f"cannot create the folder of {what} {p}: {probe_dir} is a file")
    else:
        if p.is_dir():
            raise RkspeechError(f"{what} {p} is a directory; pass a file name")
        probe_dir = p.parent
        if not probe_dir.exists():
            raise RkspeechError(f"cannot write {what} {p}: folder {probe_dir} does not exist")
        if not probe_dir.is_dir():
            raise RkspeechError(f"cannot write {what} {p}: {probe_dir} is not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".rkspeech-probe.", dir=probe_dir)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise RkspeechError(f"cannot write {what} {p}: folder {probe_dir} is not writable "
                            f"({exc.strerror or exc})") from None
    return p


LOCK_FILE = ".rkspeech.lock"


@contextlib.contextmanager
def _exclusive(lock_path: Path, refused: str, *, remove: bool) -> Iterator[Path]:
    """``flock`` ``lock_path`` (created) for the block, or RkspeechError(``refused`` with the
    holder's pid) at once.  The kernel drops the lock when its holder exits however it ends, so
    a file left by a dead process does not block.  ``remove``: unlink the file on release; a
    waiter that opened it just before then holds a lock on a file no longer at ``lock_path``,
    which the inode check after locking catches (it tries again on the new file)."""
    import fcntl

    from rkspeech.core.errors import RkspeechError

    for _ in range(20):
        f = open(lock_path, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise RkspeechError(refused.format(pid=holder)) from None
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    else:  # pragma: no cover - twenty lost races in a row
        raise RkspeechError(refused.format(pid="?"))
    try:
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield lock_path
    finally:
        if remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_path)
        f.close()


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, *, what: str = "build") -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (created if missing; ``flock`` on
    ``folder/.rkspeech.lock``, which stays) for the block; a second holder gets
    ``RkspeechError("another build is using this folder (pid N)")`` at once."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    with _exclusive(Path(folder) / LOCK_FILE,
                    f"another {what} is using this folder (pid {{pid}}): {folder}; wait for it to finish "
                    "or pick another --out-dir", remove=False) as path:
        yield path


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, *, what: str = "output") -> Iterator[Path]:
    """Hold ``path`` for one writer from before its work starts until it is written (lock file
    ``.NAME.lock`` beside it, removed after).  Atomic writes alone keep a file whole, but two
    runs writing one path would both report success while one result is silently replaced; the
    second is refused at once instead."""
    p = Path(path)
    with _exclusive(p.parent / f".{p.name}.lock",
                    f"another rkspeech (pid {{pid}}) is writing {what} {p}; wait for it or pick another "
                    "output path", remove=True) as lock:
        yield lock
