"""``plan.versions``: the runtime versions a plan was built with, against those installed where it
runs (issue 40): one finding per skew, what it means and what to do.  Pure data: plans as dicts."""

from __future__ import annotations

import pytest

from rkspeech.plan.versions import build_versions, version_skews, version_tuple

BUILT = {"onnxruntime": "1.19.2", "numpy": "1.26.4", "rknn-toolkit2": "2.5.0", "librknnrt": "2.5.0"}
SAME = {"onnxruntime": "1.19.2", "numpy": "1.26.4", "rknn-toolkit-lite2": "2.5.0", "librknnrt": "2.5.0"}


def _plan(cpu: bool = True, npu: bool = True, versions=BUILT) -> dict:
    raw = {"format": "rkspeech-plan/2", "build": {} if versions is None else {"runtime_versions": dict(versions)}}
    if npu:
        raw["vocoder"] = {"placement": "npu", "artifacts": {}}
    if cpu:
        raw["talker"] = {"placement": "cpu-int4", "artifacts": {}}
    return raw


def _ids(findings) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in findings}


def test_matching_versions_raise_nothing():
    assert version_skews(_plan(), "p.json", SAME, board=True) == []


def test_the_board_extra_versions_are_named_with_their_fix():
    board = {**SAME, "onnxruntime": "1.32.0", "numpy": "2.4.6"}
    found = version_skews(_plan(), "p.json", board, board=False)
    assert _ids(found) == {"version-skew-onnxruntime": "warning", "version-skew-numpy": "warning"}
    ort = next(f["message"] for f in found if f["id"] == "version-skew-onnxruntime")
    assert ort.startswith("onnxruntime 1.32.0 here, the plan's CPU stages (talker) were built and checked with 1.19.2")
    assert "rkspeech check-board --plan p.json --backend ort" in ort and "pip install onnxruntime==1.19.2" in ort
    assert "NEP 50" in next(f["message"] for f in found if f["id"] == "version-skew-numpy")


def test_a_patch_release_is_info_and_onnxruntime_only_matters_with_cpu_stages():
    found = version_skews(_plan(), "p.json", {**SAME, "onnxruntime": "1.19.0", "numpy": "1.26.0"}, board=True)
    assert _ids(found) == {"version-skew-onnxruntime": "info", "version-skew-numpy": "info"}
    assert version_skews(_plan(cpu=False), "p.json", {**SAME, "onnxruntime": "1.32.0"}, board=True) == []
    missing = version_skews(_plan(), "p.json", {**SAME, "onnxruntime": None}, board=True)
    assert _ids(missing) == {"version-skew-onnxruntime": "error"}
    assert "onnxruntime is not installed" in missing[0]["message"]


def test_npu_runtime_skews():
    found = version_skews(_plan(), "p.json", {**SAME, "rknn-toolkit-lite2": "2.3.2", "librknnrt": "2.3.2"}, board=True)
    assert _ids(found) == {"version-skew-rknn-toolkit-lite2": "warning", "version-skew-librknnrt": "error"}
    assert "Invalid RKNN model version" in next(f["message"] for f in found if f["id"] == "version-skew-librknnrt")
    newer = version_skews(_plan(), "p.json", {**SAME, "librknnrt": "2.6.0"}, board=True)
    assert _ids(newer) == {"version-skew-librknnrt": "warning"}
    # off a board the NPU runtime is not looked for; a plan without NPU stages has nothing to skew
    assert version_skews(_plan(), "p.json", {**SAME, "librknnrt": "2.3.2"}, board=False) == []
    assert version_skews(_plan(npu=False), "p.json", {**SAME, "rknn-toolkit-lite2": "2.3.2",
                                                      "librknnrt": "2.3.2"}, board=True) == []


def test_a_plan_without_the_record_says_so_in_one_line():
    found = version_skews(_plan(versions=None), "p.json", SAME, board=True)
    assert [f["id"] for f in found] == ["versions-unrecorded"] and "rebuild" in found[0]["message"]


def test_build_versions_record_the_toolkit_only_for_npu_plans(monkeypatch):
    import importlib.metadata as md

    fake = {"onnxruntime": "1.19.2", "numpy": "1.26.4", "rknn-toolkit2": "2.5.0"}
    monkeypatch.setattr(md, "version", lambda name: fake[name])
    assert build_versions(_plan()) == BUILT
    assert build_versions(_plan(npu=False)) == {"onnxruntime": "1.19.2", "numpy": "1.26.4"}


@pytest.mark.parametrize("text, want", [("1.19.2", (1, 19, 2)), ("2.3.2 (429f97ae6b@2025-04-09)", (2, 3, 2)),
                                        ("v0.9.8", (0, 9, 8)), ("2.4", (2, 4)), ("", None), (None, None)])
def test_version_tuple(text, want):
    assert version_tuple(text) == want
