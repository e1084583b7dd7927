"""Progress for long work: rich when it is installed, plain lines otherwise.

Progress goes to stderr so that ``--json`` outputs on stdout stay machine-readable.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def _console():
    try:
        from rich.console import Console
    except ImportError:  # runtime-only installs
        return None
    return Console(stderr=True)


def info(message: str) -> None:
    """One line of progress on stderr."""
    console = _console()
    if console is None:
        print(message, file=sys.stderr, flush=True)
    else:
        console.print(message, highlight=False, markup=False)


@contextlib.contextmanager
def stage(description: str) -> Iterator[None]:
    """Announce a stage, show a spinner while it runs, then print how long it took."""
    console = _console()
    start = time.perf_counter()
    if console is None or not console.is_terminal:
        info(f"... {description}")
        yield
    else:
        with console.status(description):
            yield
    info(f"done: {description} ({time.perf_counter() - start:.1f} s)")


#: seconds between the lines of :func:`periodic` (and of :func:`track` off a terminal)
PERIODIC_SECONDS = 5.0


def periodic(description: str) -> Callable[[str], None]:
    """``tick(text)``, called as work goes on, prints ``    DESCRIPTION: TEXT (N s)`` at most every
    :data:`PERIODIC_SECONDS`: progress for work that is not a list of items (a long ``speak``:
    seconds of audio so far; a long ``transcribe``: the position in the file), which printed
    nothing for minutes (issue 37)."""
    start = last = time.perf_counter()

    def tick(text: str) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= PERIODIC_SECONDS:
            info(f"    {description}: {text} ({now - start:.0f} s)")
            last = now

    return tick


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar (rich on a terminal) or periodic plain lines."""
    console = _console()
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = None
    if console is not None and console.is_terminal:
        from rich.progress import track as rich_track

        yield from rich_track(items, description=description, total=total, console=console)
        return
    start = time.perf_counter()
    last = start
    for i, item in enumerate(items, 1):
        yield item
        now = time.perf_counter()
        if now - last > PERIODIC_SECONDS or i == total:
            info(f"    {description}: {i}/{total if total else '?'} ({now - start:.0f} s)")
            last = now
