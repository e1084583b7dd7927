"""The one reading of a file name in a plan: relative to the plan's folder, and inside it.

A ``build qwen3-tts --vocoder-plan`` plan named ``../../tts/vocoder/...``: the folder copied to a
board broke, and ``doctor --plan`` left the files it could not find out of its list (issue 37).
A plan folder is what gets copied, so every file a plan names must lie in it: an absolute path
or one that climbs out with ``..`` is refused in one line (``rebuild``), never followed.  The
check is on the name as written (not through symlinks: a folder of symlinks, as tests mirror a
build, is still a folder that holds every name).  Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: a build's folder: its plan, and its JSON report (every build, the Whisper encoder's too)
PLAN_FILE = "plan.json"
BUILD_REPORT = "build-report.json"


def plan_file(base: str | os.PathLike, name: str, where: str) -> Path:
    """``base / name`` for a file ``name`` a plan in folder ``base`` names; ``where`` says which
    entry, for the one-line refusal of a name that is absolute or leaves the folder."""
    if os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] == os.pardir:
        raise RkspeechError(f"{where} names {name!r}, outside the plan's folder: a plan folder must hold "
                            "every file it names (it is what gets copied to a board); rebuild it")
    return Path(base) / name


def inside(base: str | os.PathLike, name: str) -> bool:
    """Whether ``name`` (as a plan names it) stays inside the plan's folder ``base``."""
    try:
        plan_file(base, name, "")
    except RkspeechError:
        return False
    return True
