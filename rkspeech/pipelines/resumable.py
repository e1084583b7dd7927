"""Resumable build stages: a stage re-runs only when its inputs changed or its outputs are gone.

A stage's fingerprint hashes its name, its arguments and the (path, size, mtime) of its input
files; ``build-state.json`` in the output folder keeps, per stage, the fingerprint, the outputs'
(path, size, mtime) and the stage's report.  Each stage writes its outputs atomically, so an
interrupted build resumes from the last stage that finished.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Callable

from rkspeech.core import progress
from rkspeech.core.atomic import write_json

STATE_FILE = "build-state.json"


def _stat(path: Path) -> list:
    """``[absolute path, size, mtime]``: absolute, so a build resumes whichever folder it is run
    from and however its paths are spelled."""
    path = Path(path).resolve()
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def fingerprint(stage: str, args: dict, inputs: list[Path]) -> str:
    data = json.dumps({"stage": stage, "args": args, "inputs": [_stat(p) for p in inputs]}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()


class StageRunner:
    """Runs named stages in ``out``, skipping the fresh ones; ``timings`` records what ran
    (``seconds``) and what was skipped (with ``built_seconds``, the time it took when it ran)."""

    def __init__(self, out: Path, force: bool = False):
        self.path = out / STATE_FILE
        self.force = force
        try:
            self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            self.data = {}
        self.timings: dict[str, dict] = {}

    def _fresh(self, stage: str, fp: str) -> dict | None:
        entry = self.data.get(stage)
        if self.force or not entry or entry.get("fingerprint") != fp:
            return None
        for out in entry.get("outputs", []):
            p = Path(out[0])
            if not p.is_file() or _stat(p) != out:
                return None
        return entry

    def run(self, name: str, args: dict, inputs: list[Path], outputs: Callable[[], list[Path]],
            work: Callable[[], dict]) -> dict:
        """The stage's report: recorded when fresh, else ``work()``'s (then recorded)."""
        fp = fingerprint(name, args, inputs)
        entry = self._fresh(name, fp)
        if entry is not None:
            progress.info(f"skip: {name} (inputs unchanged)")
            # what the stage took when it ran, kept: a resumed build's report still says it
            self.timings[name] = {"skipped": True, **({"built_seconds": entry["seconds"]} if "seconds" in entry else {})}
            return entry["report"]
        progress.info(f"== {name}")
        start = time.perf_counter()
        report = work()
        seconds = round(time.perf_counter() - start, 1)
        self.data[name] = {"fingerprint": fp, "outputs": [_stat(p) for p in outputs()], "report": report,
                           "seconds": seconds}
        write_json(self.path, self.data)
        self.timings[name] = {"seconds": seconds}
        return report


class RunEveryStage:
    """``StageRunner.run`` without the record: every stage's work runs and nothing is written
    (for scripts that keep their own cache, e.g. the benchmarks)."""

    timings: dict = {}

    @staticmethod
    def run(name: str, args: dict, inputs: list, outputs, work):
        return work()
