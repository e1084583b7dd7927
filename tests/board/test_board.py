"""First contact with a board, tested without one (issue 28): golden replays beside every graph,
the plan's integrity record, ``rkspeech check-board``, ``rkspeech doctor`` on a faked board tree,
and the rknn-lite runner against a stand-in of rknn-toolkit-lite2 2.5.0 (``board_standin``).

Everything here reuses the session's reduced vocoder build (``reduced_vocoder_build``); the
qwen3-tts and Whisper plans are checked in their own modules' tests (test_build_tts.py,
test_whisper_rknn.py, test_whisper_pieces.py), on the builds those modules already make.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from board_standin import StandInRKNNLite
from rkfixtures import have_rknn

pytestmark = pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")


@pytest.fixture(autouse=True)
def _hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))


def _mirror(src: Path, dst: Path, copy: tuple[str, ...] = ()) -> Path:
    """``src`` rebuilt under ``dst`` from symlinks, except the files named in ``copy`` (copied,
    so a test may change them)."""
    import shutil

    for p in src.rglob("*"):
        if p.is_file():
            rel = p.relative_to(src)
            q = dst / rel
            q.parent.mkdir(parents=True, exist_ok=True)
            if p.name in copy or rel.as_posix() in copy:
                shutil.copy2(p, q)
            else:
                q.symlink_to(p)
    return dst


def _rewrite_plan(plan: Path) -> None:
    """The plan re-recorded over its files as they are now (a consistent but different build)."""
    from rkspeech.plan.plan import write_plan_data

    plan_json = json.loads(plan.read_text())
    plan.unlink()
    write_plan_data(plan, plan_json)


def test_build_writes_goldens_and_the_plan_records_every_file(reduced_vocoder_build):
    from rkspeech.runtime.golden import load_golden
    from rkspeech.plan.integrity import golden_path

    out, report = reduced_vocoder_build
    raw = json.loads((out / "plan.json").read_text())
    files = raw["integrity"]["files"]
    for role, kinds in raw["vocoder"]["artifacts"].items():
        g = golden_path(out / kinds["rknn"])
        assert g.is_file(), role
        assert files[os.path.relpath(g, out)]["bytes"] == g.stat().st_size
        golden = load_golden(g)
        assert golden.meta["source"] == "sim" and golden.steps == 3
        assert golden.chain == [{"kind": "state", "input": "cache_in", "output": "cache_out"}]
        assert "cache_in" in golden.inputs[0] and "cache_in" not in golden.inputs[1]  # chained after step 0
        assert "cache_out" in golden.outputs[-1] and "cache_out" not in golden.outputs[0]
        assert g.stat().st_size < 2_000_000
    for role, kinds in raw["vocoder"]["artifacts"].items():
        assert set(kinds) == {"rknn", "onnx", "host_onnx"}, role
        for kind, rel in kinds.items():
            assert rel in files, (kind, rel)
    assert set(report["golden"]) == {"main", "first"}


def test_check_board_passes_on_the_vocoder_plan(reduced_vocoder_build, tmp_path, capsys):
    from rkspeech.cli import main

    out, _ = reduced_vocoder_build
    rc = main(["check-board", "--plan", str(out / "plan.json"), "--backend", "ort", "--repeats", "2",
               "-o", str(tmp_path / "report.json")])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["ok"] and [g["graph"] for g in rep["graphs"]] == ["vocoder first", "vocoder main"]
    for g in rep["graphs"]:
        assert len(g["steps"]) == 3 and all(s["ok"] for s in g["steps"])
        snr = [r["snr_db"] for s in g["steps"] for r in s["outputs"]]
        assert min(snr) > 40, snr  # onnxruntime fp32 against the simulator's fp16
        assert g["timing"]["calls"] == 6 and g["timing"]["median_ms"] > 0
        assert g["estimate"]["est_step_ms"] > 0  # the build log beside the .rknn
    assert printed.startswith("check-board, ort on ") and "report: " in printed


def test_one_changed_golden_value_fails_naming_graph_and_step(reduced_vocoder_build, tmp_path, capsys):
    from rkspeech.runtime.golden import load_golden, save_golden
    from rkspeech.cli import main
    from rkspeech.plan.integrity import golden_path

    out, _ = reduced_vocoder_build
    main_rknn = json.loads((out / "plan.json").read_text())["vocoder"]["artifacts"]["main"]["rknn"]
    g_rel = os.path.relpath(golden_path(out / main_rknn), out)
    d = _mirror(out, tmp_path / "copy", copy=(g_rel, "plan.json"))
    golden = load_golden(d / g_rel)
    a = golden.outputs[1]["audio_values"]
    a.reshape(-1)[100] += 1000 * float(np.abs(a).max())  # one value of step 1
    save_golden(d / g_rel, golden)
    _rewrite_plan(d / "plan.json")
    rc = main(["check-board", "--plan", str(d / "plan.json"), "--backend", "ort", "--repeats", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("rkspeech: check-board: vocoder main, step 1: output audio_values differs"), err


def test_a_byte_changed_anywhere_is_refused_when_the_plan_loads(reduced_vocoder_build, tmp_path, capsys):
    from rkspeech.cli import main
    from rkspeech.core.errors import RkspeechError
    from rkspeech.plan.plan import load_plan

    out, _ = reduced_vocoder_build
    sd = json.loads((out / "plan.json").read_text())["vocoder"]
    rknn = sd["artifacts"]["main"]["rknn"]
    d = _mirror(out, tmp_path / "copy", copy=(rknn, "plan.json"))
    assert load_plan(d / "plan.json", backend="ort").contract  # the mirror loads as it is
    p = d / rknn
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 1  # one bit, same size: only the hash can tell
    p.write_bytes(bytes(data))
    with pytest.raises(RkspeechError, match=r"vocoder_npu_step_B16_rk3588\.rknn differs from the file the plan") as e:
        load_plan(d / "plan.json", backend="ort")
    assert "\n" not in str(e.value)
    assert main(["check-board", "--plan", str(d / "plan.json"), "--backend", "ort"]) == 2
    assert "rknn differs" in capsys.readouterr().err
    p.write_bytes(bytes(data[:-1]))  # a truncated copy: the size says it, no hash needed
    with pytest.raises(RkspeechError, match=r"has \d+ bytes, the plan records \d+"):
        load_plan(d / "plan.json", backend="ort")
    # a plan written before the integrity record loads without the check
    raw = json.loads((d / "plan.json").read_text())
    del raw["integrity"]
    (d / "plan.json").write_text(json.dumps(raw))
    assert load_plan(d / "plan.json", backend="ort").contract


@pytest.fixture
def standin(reduced_vocoder_build, monkeypatch):
    import rkspeech.convert.toolkit as toolkit

    out, _ = reduced_vocoder_build
    sd = json.loads((out / "plan.json").read_text())["vocoder"]
    graphs = {str(out / f["rknn"]): str(out / f["onnx"]) for f in sd["artifacts"].values()}
    monkeypatch.setattr(StandInRKNNLite, "GRAPHS", graphs)
    monkeypatch.setattr(StandInRKNNLite, "calls", [])
    monkeypatch.setattr(StandInRKNNLite, "core_masks", [])
    monkeypatch.setattr(StandInRKNNLite, "fail", False)
    monkeypatch.setattr(toolkit, "rknn_lite_class", lambda: StandInRKNNLite)
    return out


def test_check_board_on_rknnlite_passes_through_the_cache_and_reuses_outputs(standin):
    from rkspeech.board.check import CheckBoardOptions, check_board

    rep = check_board(CheckBoardOptions(plan=standin / "plan.json", backend="rknnlite", core_mask="1", repeats=1))
    assert rep["ok"], [g.get("failure") for g in rep["graphs"]]
    assert StandInRKNNLite.core_masks == [StandInRKNNLite.NPU_CORE_1] * 2
    (path, data_type, data_format, flags, reuse, dtypes), = StandInRKNNLite.calls[:1]
    # inputs: audio_codes [1,16,B], freqs_in [B,32], cache_valid [1], cache_in [N]: fp16, none 4-D
    assert flags == [1, 1, 1, 1] and reuse is True and data_format is None
    assert dtypes == [np.float16] * 4
    assert all(g["timing"]["runner_overhead_ms"] >= 0 for g in rep["graphs"])


def test_runner_without_pass_through_feeds_float32_and_copies(standin):
    from rkspeech.runtime.runners import open_runner

    rknn = next(iter(StandInRKNNLite.GRAPHS))
    with open_runner("rknnlite", rknn) as r:
        feed = {n: np.zeros(s, d) for n, (s, d) in r.input_specs().items()}
        a = r.infer(feed)
        b = r.infer(feed)
    assert all(c[3] is None and c[4] is False for c in StandInRKNNLite.calls)
    assert all(d == np.float32 for d in StandInRKNNLite.calls[0][5])
    assert all(a[n] is not b[n] for n in a)


def test_none_from_inference_is_one_line_naming_graph_and_step(standin):
    from rkspeech.board.check import CheckBoardOptions, check_board
    from rkspeech.core.errors import RkspeechError

    StandInRKNNLite.fail = True
    with pytest.raises(RkspeechError, match=r"^vocoder first, step 0: vocoder_npu_step_B16_first_B4_rk3588\.rknn: "
                                            r"rknn-lite inference returned no outputs") as e:
        check_board(CheckBoardOptions(plan=standin / "plan.json", backend="rknnlite", repeats=1))
    assert "\n" not in str(e.value)


def _fake_board(root: Path, *, governor="rknpu_ondemand", cur=300_000_000, runtime="1.5.0", driver="0.9.3") -> Path:
    files = {
        "proc/device-tree/compatible": "radxa,rock-5b\x00rockchip,rk3588\x00",
        "proc/meminfo": "MemTotal:       16318496 kB\nMemFree:  100 kB\nMemAvailable:   12000000 kB\n",
        "sys/kernel/debug/rknpu/version": f"RKNPU driver: v{driver}\n",
        "sys/kernel/debug/rknpu/load": "NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,\n",
        "sys/class/devfreq/fdab0000.npu/governor": f"{governor}\n",
        "sys/class/devfreq/fdab0000.npu/cur_freq": f"{cur}\n",
        "sys/class/devfreq/fdab0000.npu/available_frequencies": "300000000 600000000 800000000 1000000000\n",
        "sys/class/devfreq/dmc/governor": "userspace\n",
        "sys/class/devfreq/dmc/cur_freq": "2112000000\n",
        "sys/class/devfreq/dmc/available_frequencies": "528000000 1068000000 1560000000 2112000000\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    lib = root / "usr/lib/librknnrt.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(b"\x7fELF\x00junk\x00" + f"{runtime} (e6fe0c678@2023-05-25T08:09:20)".encode() + b"\x00more")
    return root


def test_doctor_on_a_faked_board_flags_unpinned_clock_and_version_skew(reduced_vocoder_build, tmp_path, capsys):
    from rkspeech.cli import main

    out, _ = reduced_vocoder_build
    root = _fake_board(tmp_path / "board")
    rc = main(["doctor", "--json", "--root", str(root), "--plan", str(out / "plan.json")])
    info = json.loads(capsys.readouterr().out)
    b = info["board"]
    assert b["chip"] == "rk3588" and b["librknnrt"]["version"] == "1.5.0" and b["rknpu_driver"] == "0.9.3"
    assert b["clocks"]["npu"]["governor"] == "rknpu_ondemand" and b["clocks"]["npu"]["max_hz"] == 1_000_000_000
    assert b["memory"] == {"total_mb": 15936, "available_mb": 11718}
    ids = {f["id"]: f for f in info["findings"]}
    assert "npu-clock-unpinned" in ids and "ddr-clock-unpinned" not in ids
    assert "echo userspace > " in ids["npu-clock-unpinned"]["message"]
    skew = ids["runtime-older-than-toolkit"]
    assert "toolkit2 2.5.0, librknnrt is 1.5.0" in skew["message"] and "#281" in skew["source"]
    assert "driver-old" in ids
    assert [m["chip"] for m in info["models"]] == [["rk3588"], ["rk3588"]]
    assert rc == 1  # errors found
    # pinned clocks and a runtime as new as the toolkit: none of those findings
    root2 = _fake_board(tmp_path / "board2", governor="userspace", cur=1_000_000_000, runtime="2.5.0", driver="0.9.8")
    main(["doctor", "--json", "--root", str(root2), "--plan", str(out / "plan.json")])
    ids2 = {f["id"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert not ids2 & {"npu-clock-unpinned", "runtime-older-than-toolkit", "driver-old"}, ids2


def test_doctor_off_a_board_says_so_and_checks_the_plan(reduced_vocoder_build, tmp_path, capsys):
    from rkspeech.cli import main

    out, _ = reduced_vocoder_build
    main(["doctor", "--root", str(tmp_path), "--plan", str(out / "plan.json")])
    printed = capsys.readouterr().out
    assert "not a Rockchip board" in printed
    assert printed.count("toolkit 2.5.0") == 2


def test_doctor_names_every_missing_file_of_the_plan(reduced_vocoder_build, tmp_path, capsys):
    """A plan folder copied without one .rknn: doctor used to leave it out of its list and exit 0
    (issue 37); now an error naming it, exit 1.  A missing ONNX (a board copy may leave those
    out) is a warning only."""
    from rkspeech.cli import main

    out, _ = reduced_vocoder_build
    sd = json.loads((out / "plan.json").read_text())["vocoder"]
    d = _mirror(out, tmp_path / "copy")
    (d / sd["artifacts"]["first"]["onnx"]).unlink()
    main(["doctor", "--json", "--root", str(tmp_path / "no-board"), "--plan", str(d / "plan.json")])
    missing = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "plan-file-missing"]
    assert [(f["severity"], Path(f["message"].split()[0]).name) for f in missing] == \
        [("warning", Path(sd["artifacts"]["first"]["onnx"]).name)], missing
    (d / sd["artifacts"]["main"]["rknn"]).unlink()
    rc = main(["doctor", "--root", str(tmp_path / "no-board"), "--plan", str(d / "plan.json")])
    printed = capsys.readouterr().out
    assert rc == 1
    line = next(x for x in printed.splitlines() if x.startswith("ERROR") and "plan-file-missing" in x)
    assert Path(sd["artifacts"]["main"]["rknn"]).name in line and "a board runs it" in line, printed
    assert printed.count("toolkit 2.5.0") == 1  # the .rknn that is there is still checked
