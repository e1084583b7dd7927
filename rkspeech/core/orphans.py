"""A child process that dies with its parent, however the parent ends (``core.child`` starts them)."""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_SECONDS = 0.25


def die_with_parent(parent_pid: int, *, kernel: bool = True) -> None:
    """Make this process (a child) die when ``parent_pid`` does, however the parent ends.

    A SIGKILL of a build left its rknn-toolkit2 child converting for minutes with nobody to read
    the result (issue 37): the parent's ``finally`` blocks never run on SIGKILL, and the child
    leads its own session, so no terminal signal reaches it either.  On Linux the kernel sends
    the child SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``: nothing in the child
    has to run, the toolkit's C code may hold the GIL for minutes); elsewhere a daemon thread
    polls the parent pid.  The parent may already be gone when this runs (then the child was
    re-parented): it exits at once.  Call it first thing in the child.  ``kernel`` False: the
    polling thread only, for a child whose parent *thread* may end before the parent process
    (the kernel's signal follows the thread that forked; a simulator runner may be made in a
    worker thread and outlive it)."""
    if kernel and sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl")
        except (OSError, AttributeError):
            _poll_parent(parent_pid)
    else:
        _poll_parent(parent_pid)
    if os.getppid() != parent_pid:  # died before the line above took effect
        os._exit(1)


def _poll_parent(parent_pid: int) -> None:
    import threading

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="rkspeech-parent-watch", daemon=True).start()
