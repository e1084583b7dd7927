"""Work folders a process owns: owner-locked, so the next one made beside them sweeps those a
SIGKILLed owner left (``core.child.owned`` and ``scratch`` remove them when the work ends)."""

from __future__ import annotations

import os
import tempfile


#: the lock file inside a work folder that :func:`make_workdir` made: ``flock``-ed by its owner
#: for the folder's life; the kernel drops the lock when the owner dies, however it dies
WORKDIR_LOCK = ".rkspeech-owner.lock"


def make_workdir(parent: str | os.PathLike, *, prefix: str):
    """A new folder ``parent/PREFIX*.tmp`` for a child's work, owned by this process: returns
    (path, lock file object; keep it open while the folder is used).  Stale folders left by a
    process that died without cleaning up (SIGKILL) are removed first (:func:`sweep_stale_workdirs`)."""
    import fcntl
    from pathlib import Path

    sweep_stale_workdirs(parent)
    work = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
    # locked before it has its name, so a sweeper never sees an unlocked owner file
    lock = open(work / (WORKDIR_LOCK + ".new"), "w")
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    lock.write(str(os.getpid()))
    lock.flush()
    os.replace(work / (WORKDIR_LOCK + ".new"), work / WORKDIR_LOCK)
    return work, lock


def sweep_stale_workdirs(parent: str | os.PathLike) -> list[str]:
    """Remove the ``*.tmp`` work folders in ``parent`` whose owner is dead (their
    :data:`WORKDIR_LOCK` is not locked); a live owner's folders stay.  Returns what was removed."""
    import fcntl
    import shutil

    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for e in entries:
        if not (e.name.endswith(".tmp") and e.is_dir(follow_symlinks=False)):
            continue
        try:
            fd = os.open(os.path.join(e.path, WORKDIR_LOCK), os.O_RDONLY)
        except OSError:
            continue  # not ours (no lock file), or not readable
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner is alive
        finally:
            os.close(fd)
        shutil.rmtree(e.path, ignore_errors=True)
        removed.append(e.path)
    return removed
