"""Bring a built plan into another build's folder, so that folder holds every file it names.

``build qwen3-tts --vocoder-plan P`` reused P's vocoder graphs by pointing at them
(``../../tts/vocoder/...`` in the plan): the build folder alone, copied to a board, did not run
(issue 37).  :func:`import_plan` puts P and every file it names (and its integrity record's
external data and golden replays) under a folder of the new build, at the same relative paths,
as hard links where the filesystem allows (no second copy of ~1 GB of graphs on disk) and
copies otherwise; the plan read there names files inside its folder only (``plan.paths``).
:func:`plan_name` is how every plan writer names a file, so no plan is written that names a file
outside its folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rkspeech.core.atomic import atomic_path, write_json
from rkspeech.core.errors import RkspeechError


def import_plan(src_plan: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Link or copy the plan ``src_plan`` (read and integrity-checked) and its files into the
    folder ``dest``; returns the plan there (its JSON as it was: the paths in it are relative)."""
    from rkspeech.plan.integrity import expected_files
    from rkspeech.plan.plan import read_plan

    src = Path(src_plan)
    raw = read_plan(src)
    base, dest = src.parent, Path(dest)
    for f in expected_files(raw, base):
        if not f.is_file():
            continue  # a file the plan does not have here is not had there either (the loaders say so)
        _link_or_copy(f, dest / os.path.relpath(f, base))
    plan = dest / src.name
    if not (plan.exists() and os.path.samefile(plan, src)):
        write_json(plan, raw)
    return plan


def plan_name(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """The name a plan in folder ``base`` records for the file ``path``: its path relative to
    ``base``; a file outside ``base`` is first hard-linked (else copied) into ``base`` under its
    own name, with its external data (``.data``) and golden replay, so the plan written is
    self-contained whatever its writer was handed (``plan.paths`` refuses names that leave the
    folder when a plan is read)."""
    from rkspeech.plan.integrity import golden_path
    from rkspeech.plan.paths import inside

    root, p = Path(base).resolve(), Path(path).resolve()
    rel = os.path.relpath(p, root)
    if inside(root, rel):
        return rel
    for extra in (p.with_name(p.name + ".data"), golden_path(p)):
        if extra.is_file():
            _link_or_copy(extra, root / extra.name)
    _link_or_copy(p, root / p.name)
    return p.name


def _link_or_copy(src: Path, dst: Path) -> None:
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
