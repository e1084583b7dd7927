"""plan.integrity: the hash cache never vouches for a changed file (issue 37, item 8)."""

from __future__ import annotations

import os
import time

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.plan import integrity


@pytest.fixture(autouse=True)
def _hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))


def test_same_size_rewrite_with_mtime_put_back_is_refused(tmp_path):
    raw = {"speech_decoder": {"artifacts": {"main": "main.rknn"}}}
    graph = tmp_path / "main.rknn"
    graph.write_bytes(b"A" * 4096)
    raw["integrity"] = integrity.record(raw, tmp_path)  # hashes it and caches the hash
    plan = tmp_path / "plan.json"
    assert integrity.check(raw, plan) == 1  # a cache hit
    st = graph.stat()
    time.sleep(0.05)  # past the kernel's timestamp tick
    with open(graph, "r+b") as f:  # same inode, same size, another byte
        f.seek(100)
        f.write(b"B")
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back, as cp -p / rsync -t do
    assert graph.stat().st_size == st.st_size and graph.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(RkspeechError, match=r"main\.rknn differs from the file the plan was built with"):
        integrity.check(raw, plan)
