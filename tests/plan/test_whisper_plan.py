"""The Whisper encoder record of a plan (plan.whisper): window buckets listed, old plans still load."""

from __future__ import annotations

import json

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.plan import write_plan_data
from rkspeech.plan.record import FORMAT_1, PLAN_FORMAT
from rkspeech.plan.whisper import is_whisper_plan, load_whisper_plan, windows_section


def _plan(folder, roles: dict[str, str], windows: dict | None, *, placement="cpu-fp32", rknn=False,
          format_1=False) -> object:
    """A plan as ``build whisper-encoder`` writes it, over placeholder files (role -> file stem);
    ``format_1``: as the builds before the stage record wrote it (``impl``)."""
    arts = {}
    for role, stem in roles.items():
        (folder / f"{stem}.onnx").write_bytes(b"onnx " + role.encode())
        arts[role] = {"onnx": f"{stem}.onnx"}
        if rknn:
            (folder / f"{stem}.rknn").write_bytes(b"rknn " + role.encode())
            arts[role]["rknn"] = f"{stem}.rknn"
    where = {"impl": "rknn" if placement == "npu" else "onnx"} if format_1 else {"placement": placement}
    sec = {**where, "target": "rk3588", "artifacts": arts, "custom_string": "{}",
           **(windows_section(windows) if windows is not None else {})}
    fmt = FORMAT_1 if format_1 else PLAN_FORMAT
    return write_plan_data(folder / "plan.json", {"format": fmt, "whisper_encoder": sec})


@pytest.mark.parametrize("format_1", [False, True], ids=["format-2", "format-1"])
def test_plan_lists_its_window_buckets(tmp_path, format_1):
    path = _plan(tmp_path, {"encoder": "encoder", "10s": "encoder.10s", "5s": "encoder.5s"},
                 {"encoder": 30, "10s": 10, "5s": 5}, placement="npu", rknn=True, format_1=format_1)
    assert json.loads(path.read_text())["whisper_encoder"]["windows"] == {"encoder": 30, "10s": 10, "5s": 5}
    plan = load_whisper_plan(path)
    assert [(g.seconds, g.role) for g in plan.windows] == [(5, "5s"), (10, "10s"), (30, "encoder")]
    assert plan.buckets == (5, 10) and plan.on_npu and plan.placement == "npu" and not plan.pieces
    assert plan.files("rknn") == {5: tmp_path / "encoder.5s.rknn", 10: tmp_path / "encoder.10s.rknn",
                                  30: tmp_path / "encoder.rknn"}
    assert plan.files("onnx")[10] == tmp_path / "encoder.10s.onnx"
    assert is_whisper_plan(path) and not is_whisper_plan(tmp_path / "encoder.onnx")


def test_old_single_window_plan_loads(tmp_path):
    """A plan written before buckets: no ``windows``, one ``encoder`` role -- the 30 s window."""
    path = _plan(tmp_path, {"encoder": "encoder"}, None, format_1=True)
    assert "windows" not in json.loads(path.read_text())["whisper_encoder"]
    plan = load_whisper_plan(path)
    assert [(g.seconds, g.role, g.onnx.name) for g in plan.windows] == [(30, "encoder", "encoder.onnx")]
    assert plan.buckets == ()
    # one window writes no "windows": a build without buckets writes the plan it wrote before them
    assert windows_section({"encoder": 30}) == {}


def test_pieces_plan_loads_in_order(tmp_path):
    path = _plan(tmp_path, {"part1": "encoder.part1", "part0": "encoder.part0"}, None)
    plan = load_whisper_plan(path)
    assert plan.windows == () and [g.role for g in plan.pieces] == ["part0", "part1"]


@pytest.mark.parametrize("roles, windows, match", [
    ({"encoder": "e", "10s": "e10"}, None, "without 'windows'"),
    ({"encoder": "e", "10s": "e10"}, {"encoder": 30}, "every artifact role"),
    ({"encoder": "e", "10s": "e10"}, {"encoder": 30, "10s": 31}, "whole seconds"),
    ({"encoder": "e", "10s": "e10"}, {"encoder": 30, "10s": 30}, "twice"),
    ({"encoder": "e", "10s": "e10"}, {"encoder": 20, "10s": 10}, "no 30 s window"),
])
def test_bad_windows_are_one_line(tmp_path, roles, windows, match):
    path = _plan(tmp_path, roles, None)
    raw = json.loads(path.read_text())
    if windows is not None:
        raw["whisper_encoder"]["windows"] = windows
    path.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match=match):
        load_whisper_plan(path)


def test_missing_bucket_file_is_named(tmp_path):
    path = _plan(tmp_path, {"encoder": "encoder", "10s": "encoder.10s"}, {"encoder": 30, "10s": 10})
    raw = json.loads(path.read_text())
    raw.pop("integrity")  # the integrity check would name it first; here: the reader's own message
    path.write_text(json.dumps(raw))
    (tmp_path / "encoder.10s.onnx").unlink()
    with pytest.raises(RkspeechError, match="10 s encoder's encoder.10s.onnx is missing"):
        load_whisper_plan(path).files("onnx")
    with pytest.raises(RkspeechError, match="no .rknn"):
        load_whisper_plan(path).files("rknn")
