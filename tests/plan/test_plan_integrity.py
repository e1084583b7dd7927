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
    raw = {"vocoder": {"placement": "npu", "artifacts": {"main": {"rknn": "main.rknn"}}}}
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


@pytest.mark.parametrize("name", ["../voc/main.onnx", "/abs/main.onnx", "a/../../main.onnx"])
def test_a_plan_naming_a_file_outside_its_folder_is_refused(tmp_path, name):
    """A plan folder is what gets copied to a board: a name that leaves it is one line, never followed."""
    import json

    from rkspeech.plan.plan import load_plan

    (tmp_path / "voc").mkdir()
    d = tmp_path / "plan"
    d.mkdir()
    plan = d / "plan.json"
    plan.write_text(json.dumps({"speech_decoder": {"impl": "onnx", "onnx": {"main": name}}}))
    with pytest.raises(RkspeechError, match=r"vocoder\.artifacts\.main\.onnx names .*outside the plan's folder") as e:
        load_plan(plan, backend="ort")
    assert "\n" not in str(e.value)
    plan.write_text(json.dumps({"speech_decoder": {}, "integrity": {"files": {name: {"bytes": 1, "sha256": "0"}}}}))
    with pytest.raises(RkspeechError, match=r"integrity\.files names .*outside the plan's folder"):
        integrity.check(json.loads(plan.read_text()), plan)


def test_a_plan_written_over_outside_files_links_them_in(tmp_path):
    """The writer makes any plan self-contained: a file handed to it from elsewhere is linked in."""
    import json

    from rkspeech.plan.linking import plan_name

    src = tmp_path / "elsewhere" / "g.onnx"
    src.parent.mkdir()
    src.write_bytes(b"graph")
    (tmp_path / "elsewhere" / "g.onnx.data").write_bytes(b"weights")
    d = tmp_path / "plan"
    d.mkdir()
    assert plan_name(src, d) == "g.onnx"
    assert os.path.samefile(d / "g.onnx", src) and (d / "g.onnx.data").read_bytes() == b"weights"
    assert plan_name(d / "g.onnx", d) == "g.onnx"  # inside already: named as it is
    json.dumps(plan_name(src, d))
