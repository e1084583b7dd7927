"""Write a file so that readers see the old content or the new, never half of it.

The content goes to a temporary name unique to this process and call, in the same folder (so the
rename is atomic on one filesystem), and is renamed into place only when complete; on any error
the temporary file is removed and an earlier file at ``path`` is untouched.  Two writers of the
same path never share a temporary name.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; rename it onto ``path`` when the block ends.

    ``suffix`` keeps the extension a writer may insist on (onnx, torch and soundfile look at it).
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{suffix}", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, data, *, indent: int = 2) -> Path:
    """JSON (``default=str`` for paths and numpy scalars), atomically."""
    return write_text(path, json.dumps(data, indent=indent, default=str) + "\n")
