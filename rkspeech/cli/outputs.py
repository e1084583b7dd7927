"""Every output location a command was given is checked before the command runs.

``transcribe --out-dir`` at a file or a read-only folder ran the whole transcription and then
ended in a traceback (issue 37): each command checked (or forgot) its own outputs.  Now each
output flag says what it names when it is added (``Flags.add(..., writes="file" | "folder")``,
required in the OUTPUT group), and :func:`check_outputs`, called by ``rkspeech.cli.main`` before
any command's ``run``, refuses one that cannot be written in one line (``core.atomic.check_writable``:
a probe file, because permission bits do not tell for root or read-only mounts).  A command's
own checks (suffixes, two flags naming one file) still run after.  A write that fails at the
end anyway (the disk filled, the folder went away) is one line too: ``core.atomic.atomic_path``,
which writes every output.

Standard library only.
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import OUTPUTS_DEST


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse (RkspeechError, one line naming the flag) an output of ``args`` that cannot be
    written; ``-`` (stdout) and unset flags are skipped; a file's missing folders are fine when
    their nearest existing parent accepts a new entry (``atomic_path`` creates them)."""
    from rkspeech.core.atomic import check_writable

    for dest, kind, flag in getattr(args, OUTPUTS_DEST, ()):
        value = getattr(args, dest, None)
        if value is None or value == "-" or value == "":
            continue
        check_writable(value, what=flag, folder=kind == "folder", make_parents=kind == "file")
