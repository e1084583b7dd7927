"""``rkspeech doctor`` on a faked RK3588 sysfs: the CPU governors (one finding per cpufreq policy
with its fix), the DDR governor, and which cores are big (issue 40).  No plan, no rknn-toolkit2."""

from __future__ import annotations

import json
from pathlib import Path

from rkfixtures import fake_rk3588_cpus


def _board(root: Path, **kw) -> Path:
    fake_rk3588_cpus(root, **kw)
    (root / "proc/device-tree").mkdir(parents=True, exist_ok=True)
    (root / "proc/device-tree/compatible").write_text("radxa,rock-5b\x00rockchip,rk3588\x00")
    return root


def _doctor(root: Path, capsys, *extra) -> tuple[int, dict]:
    from rkspeech.cli import main

    rc = main(["doctor", "--json", "--root", str(root), *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_doctor_flags_ondemand_per_policy_and_names_the_big_cores(tmp_path, capsys):
    root = _board(tmp_path / "board", governors=("ondemand", "ondemand", "performance"))
    _, info = _doctor(root, capsys)
    cpu = info["board"]["cpu"]
    assert cpu["big"] == [4, 5, 6, 7] and cpu["little"] == [0, 1, 2, 3] and cpu["source"] == "cpu_capacity"
    assert [(p["policy"], p["cpus"], p["governor"]) for p in cpu["policies"]] == [
        ("policy0", [0, 1, 2, 3], "ondemand"), ("policy4", [4, 5], "ondemand"), ("policy6", [6, 7], "performance")]
    gov = [f for f in info["findings"] if f["id"] == "cpu-governor"]
    assert len(gov) == 2  # one per policy not at performance; policy6 is
    assert gov[0]["message"].startswith("cpufreq policy0 (little cores 0-3) governor ondemand")
    assert gov[1]["message"].startswith("cpufreq policy4 (big cores 4-5) governor ondemand")
    fix = f"echo performance > {root}/sys/devices/system/cpu/cpufreq/policy4/scaling_governor"
    assert gov[1]["message"].endswith(fix)
    assert "26-32 %" in gov[1]["message"] and "HOST-RK3588.md" in gov[1]["source"]
    big = next(f for f in info["findings"] if f["id"] == "cpu-big-cores")
    assert big["message"].startswith("big cores 4-7 (cpu_capacity 1024 vs 414 on 0-3)"), big
    # the DDR governor, from the same tree
    assert info["board"]["clocks"]["ddr"]["governor"] == "dmc_ondemand"
    ddr = next(f for f in info["findings"] if f["id"] == "ddr-clock-unpinned")
    assert f"echo userspace > {root}/sys/class/devfreq/dmc/governor" in ddr["message"]


def test_doctor_is_quiet_when_every_policy_is_performance_and_prints_the_cores(tmp_path, capsys):
    from rkspeech.cli import main

    root = _board(tmp_path / "board", governors=("performance",) * 3)
    _, info = _doctor(root, capsys)
    assert not [f for f in info["findings"] if f["id"] == "cpu-governor"]
    main(["doctor", "--root", str(root)])
    out = capsys.readouterr().out
    assert "big 4-7, little 0-3 (from cpu_capacity)" in out
    assert "CPU policy4          cores 4-5: 408 of 2400 MHz, governor performance" in out


def test_doctor_big_cores_from_the_max_clock_and_unknown(tmp_path, capsys):
    _, info = _doctor(_board(tmp_path / "a", capacity=False), capsys)
    big = next(f for f in info["findings"] if f["id"] == "cpu-big-cores")
    assert big["message"].startswith("big cores 4-7 (cpuinfo_max_freq 2400000 vs 1800000 on 0-3)")
    _, info = _doctor(_board(tmp_path / "b", capacity=False, max_freq=False), capsys)
    ids = {f["id"] for f in info["findings"]}
    assert "cpu-big-cores-unknown" in ids and "cpu-big-cores" not in ids
