"""How a plan writer names a file: inside the plan's folder, linking it in when it is elsewhere.

:func:`plan_name` is what every plan writer records (``plan.plan``, ``plan.sections``), so no plan
is written that names a file outside its folder; :func:`link_or_copy` and :func:`companions` are
how a file and what travels with it come in (``plan.bundle`` brings a whole plan the same way).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rkspeech.core.atomic import atomic_path
from rkspeech.core.errors import RkspeechError


def plan_name(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """The name a plan in folder ``base`` records for the file ``path``: its path relative to
    ``base``; a file outside ``base`` is first hard-linked (else copied) into ``base`` under its
    own name, with its external data (``.data``) and golden replay, so the plan written is
    self-contained whatever its writer was handed (``plan.paths`` refuses names that leave the
    folder when a plan is read)."""
    from rkspeech.plan.paths import inside

    root, p = Path(base).resolve(), Path(path).resolve()
    rel = os.path.relpath(p, root)
    if inside(root, rel):
        return rel
    for extra in companions(p):
        if extra.is_file():
            link_or_copy(extra, root / extra.name)
    link_or_copy(p, root / p.name)
    return p.name


def companions(p: Path) -> tuple[Path, ...]:
    """The files that travel with graph ``p``: its external data, its golden replay and (an .rknn)
    its converter log, which ``check-board`` and ``estimate`` read for its step time."""
    from rkspeech.convert.conversion import BUILD_LOG_SUFFIX
    from rkspeech.plan.integrity import golden_path

    return (p.with_name(p.name + ".data"), golden_path(p), p.with_name(p.name + BUILD_LOG_SUFFIX))


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src``'s content: a hard link (renamed into place: a reader never sees a
    partial file), else an atomic copy."""
    import tempfile

    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and os.path.samefile(src, dst):
        return
    real = src.resolve()
    tmp = Path(tempfile.mktemp(prefix=f".{dst.name}.", suffix=".link.tmp", dir=dst.parent))
    try:
        os.link(real, tmp)
        os.replace(tmp, dst)
        return
    except OSError:  # another filesystem, or links not allowed: a copy
        if os.path.lexists(tmp):
            os.unlink(tmp)
    with atomic_path(dst, suffix=dst.suffix) as out:
        try:
            shutil.copyfile(real, out)
        except OSError as exc:
            raise RkspeechError(f"cannot copy {src} into {dst.parent}: {exc.strerror or exc}") from None
