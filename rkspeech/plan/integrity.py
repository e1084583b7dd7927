"""Artifact integrity: the size and sha256 of every file a plan names, recorded when the plan is
written and checked when it is read, so a file damaged in copying to a board is refused in one
line naming it before anything runs.

``plan.json`` holds ``"integrity": {"files": {relative path: {"bytes": n, "sha256": hex}}}``:
every graph of every stage record (``plan.record``: each role's ``rknn``, ``onnx`` and
``host_onnx`` files), an ONNX graph's external ``.data`` file, and each graph's golden replay
(:func:`golden_path`; a CPU stage's are also listed in its record's ``goldens``).

Checking is cheap: the size of every file always (one ``stat``), the hash once per file, cached
in :func:`hash_cache_path` (a small JSON file; a published-size plan's ~1 GB of graphs hashes in
a few seconds, once) by absolute path and :func:`stat_key`: size, mtime, and also device, inode
and ctime, because a same-size rewrite with its mtime put back (``os.utime``, ``cp -p``,
``rsync -t``) kept a size+mtime key and its stale hash (issue 37); any write or ``utime`` sets
ctime to now, and a user cannot set it.  Plans written before 2026-12-01 have no
``integrity`` and load as before (nothing to check against).  Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.paths import plan_file
from rkspeech.plan.record import is_npu, record_files, record_goldens, stage_records

INTEGRITY_KEY = "integrity"
#: the golden replay file beside a graph: ``X.rknn`` -> ``X.golden.npz``
GOLDEN_SUFFIX = ".golden.npz"
_CHUNK = 1 << 20


def golden_path(graph: str | os.PathLike) -> Path:
    """The golden replay file of ``graph`` (a .rknn, or the .onnx of an unconverted build)."""
    g = Path(graph)
    return g.with_name(g.stem + GOLDEN_SUFFIX)


def hash_cache_path() -> Path:
    """``$RKSPEECH_CACHE_DIR/sha256.json`` (default ``~/.cache/rkspeech``)."""
    root = os.environ.get("RKSPEECH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rkspeech")
    return Path(root) / "sha256.json"


def plan_files(raw: dict, base: Path) -> list[Path]:
    """Every file the plan ``raw`` (its JSON, format 2, in folder ``base``) names, with each
    graph's external data file and golden replay when they exist; in a stable order, without
    repeats."""
    records = stage_records(raw)
    named = [f for rec in records.values() for f in record_files(rec)]
    out: dict[Path, None] = {}
    for v in named:
        p = plan_file(base, v, f"plan in {base}")
        out[p] = None
        for extra in (p.with_name(p.name + ".data"), golden_path(p)):
            if extra.is_file():
                out[extra] = None
    for name, rec in records.items():  # a CPU stage's goldens, listed (beside their graphs as a rule)
        for v in (record_goldens(rec, f"plan in {base}: {name}") or {}).values():
            out[plan_file(base, v, f"plan in {base}: {name}.goldens")] = None
    return list(out)


def board_files(raw: dict, base: Path) -> set[Path]:
    """The files of :func:`plan_files` a board runs (``rknnlite``): each NPU-placed stage's
    .rknn graphs, and each CPU-placed stage's ONNX (with a code predictor's heads and start
    graph).  The rest (the vocoder's exact host graphs, the ONNX an .rknn came from) serve
    ``ort`` and ``sim`` on a host; a board copy may leave them out."""
    return {plan_file(base, v, f"plan in {base}") for rec in stage_records(raw).values()
            for v in record_files(rec, ("rknn", "host") if is_npu(rec) else ("onnx", "host"))}


def expected_files(raw: dict, base: Path) -> list[Path]:
    """Every file the plan names (:func:`plan_files`) and every file its ``integrity`` record
    lists (external data, golden replays), whether or not it is there now."""
    out = dict.fromkeys(plan_files(raw, base))
    files = (raw.get(INTEGRITY_KEY) or {}).get("files") if isinstance(raw.get(INTEGRITY_KEY), dict) else None
    for rel in files if isinstance(files, dict) else ():
        out[plan_file(base, rel, f"plan in {base}: integrity.files")] = None
    return list(out)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def stat_key(st: os.stat_result) -> list[int]:
    """What a cached hash is valid for: a file with this size, mtime, device, inode and ctime.
    A rewrite in place changes ctime (the kernel sets it on every write and ``utime``); a
    rewrite by rename changes the inode."""
    return [st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns]


class _HashCache:
    """(absolute path, :func:`stat_key`) -> sha256, kept in a small JSON file; unreadable or
    unwritable cache files only cost a re-hash (entries of the older size+mtime key never match)."""

    def __init__(self, path: Path):
        self.path = path
        self.dirty = False
        try:
            self.data = json.loads(path.read_text())
            if not isinstance(self.data, dict):
                self.data = {}
        except (OSError, ValueError):
            self.data = {}

    def sha256(self, p: Path, st: os.stat_result) -> str:
        key = str(p.resolve())
        hit, want = self.data.get(key), stat_key(st)
        if isinstance(hit, list) and len(hit) == len(want) + 1 and hit[:-1] == want:
            return hit[-1]
        digest = sha256_file(p)
        self.data[key] = [*want, digest]
        self.dirty = True
        return digest

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            from rkspeech.core.atomic import write_json

            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, self.data, indent=0)
        except OSError:
            pass


def record(raw: dict, base: Path) -> dict:
    """The ``integrity`` section for the plan ``raw`` written in folder ``base``."""
    cache = _HashCache(hash_cache_path())
    files = {}
    for p in plan_files(raw, base):
        if not p.is_file():
            continue
        st = p.stat()
        # as named, not through symlinks: a folder of links (a mirror) records its own names
        files[os.path.relpath(p, base)] = {"bytes": st.st_size, "sha256": cache.sha256(p, st)}
    cache.save()
    return {"files": files}


def check(raw: dict, plan_path: Path) -> int:
    """Refuse (one line naming the file) any file whose size or sha256 differs from the plan's
    ``integrity`` record; returns how many files were checked (0: a plan without the record).
    A file that is absent is left to the loaders, which refuse it only when the backend in use
    needs it (a board copy may leave out the ONNX graphs)."""
    sec = raw.get(INTEGRITY_KEY)
    if sec is None:
        return 0
    files = sec.get("files") if isinstance(sec, dict) else None
    if not isinstance(files, dict):
        raise RkspeechError(f"plan {plan_path}: integrity must hold files (path -> bytes, sha256); rebuild the plan")
    base = plan_path.parent
    todo = []
    for rel, want in files.items():  # sizes first: one stat each, before any file is read
        if not isinstance(want, dict) or not isinstance(want.get("bytes"), int) or not isinstance(want.get("sha256"), str):
            raise RkspeechError(f"plan {plan_path}: integrity.files[{rel!r}] must hold bytes and sha256")
        p = plan_file(base, rel, f"plan {plan_path}: integrity.files")
        try:
            st = p.stat()
        except OSError:
            continue  # not copied: the loaders say so when the backend in use needs it (a board needs no ONNX)
        if st.st_size != want["bytes"]:
            raise RkspeechError(f"plan {plan_path}: {p} has {st.st_size} bytes, the plan records {want['bytes']} "
                                "(damaged or incomplete copy); copy it again")
        todo.append((p, st, want["sha256"]))
    cache = _HashCache(hash_cache_path())
    try:
        for p, st, want in todo:
            if cache.sha256(p, st) != want:
                raise RkspeechError(f"plan {plan_path}: {p} differs from the file the plan was built with "
                                    "(sha256 mismatch: damaged copy, or changed since); copy it again or rebuild")
    finally:
        cache.save()
    return len(todo)
