"""Bring a built plan into another build's folder, so that folder holds every file it names.

``build qwen3-tts --vocoder-plan P`` reused P's vocoder graphs by pointing at them
(``../../tts/vocoder/...`` in the plan): the build folder alone, copied to a board, did not run
(issue 37).  :func:`import_plan` puts P and every file it names (and its integrity record's
external data and golden replays) under a folder of the new build, at the same relative paths,
as hard links where the filesystem allows (no second copy of ~1 GB of graphs on disk) and
copies otherwise; the plan read there names files inside its folder only (``plan.paths``).
How every plan writer names a file is ``plan.linking.plan_name`` (below the plan reader, which
it serves: this module reads plans).
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.atomic import write_json
from rkspeech.plan.linking import companions, link_or_copy


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
        for g in (f, *companions(f)):
            if g.is_file():
                link_or_copy(g, dest / os.path.relpath(g, base))
    plan = dest / src.name
    if not (plan.exists() and os.path.samefile(plan, src)):
        write_json(plan, raw)
    return plan
