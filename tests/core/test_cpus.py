"""``core.cpus``: the big cores from a faked sysfs (capacity, then max clock, then none), the
``--cpu-affinity`` words and lists, and pinning only where the cores differ (issue 40)."""

from __future__ import annotations

import pytest

from rkfixtures import fake_rk3588_cpus
from rkspeech.core.cpus import (
    apply_affinity,
    core_info,
    format_cpus,
    parse_cpu_list,
    resolve_affinity,
)
from rkspeech.core.errors import RkspeechError


def test_big_cores_from_capacity(tmp_path):
    info = core_info(fake_rk3588_cpus(tmp_path))
    assert info.cpus == tuple(range(8)) and info.big == (4, 5, 6, 7) and info.little == (0, 1, 2, 3)
    assert info.source == "cpu_capacity" and info.heterogeneous
    assert info.figures[4] == 1024 and info.figures[0] == 414


def test_big_cores_fall_back_to_max_clock_then_to_all(tmp_path):
    info = core_info(fake_rk3588_cpus(tmp_path / "a", capacity=False))
    assert (info.big, info.source) == ((4, 5, 6, 7), "cpuinfo_max_freq")
    info = core_info(fake_rk3588_cpus(tmp_path / "b", capacity=False, max_freq=False))
    assert (info.big, info.source, info.heterogeneous) == (tuple(range(8)), "none", False)
    # two A76 clusters clocked differently (2.256 / 2.4 GHz) are both big: above the midpoint
    root = fake_rk3588_cpus(tmp_path / "c", capacity=False)
    for c in (4, 5):
        (root / f"sys/devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq").write_text("2256000\n")
    assert core_info(root).big == (4, 5, 6, 7)


def test_affinity_words_and_lists(tmp_path):
    info = core_info(fake_rk3588_cpus(tmp_path))
    assert resolve_affinity("big", info) == (4, 5, 6, 7)
    assert resolve_affinity("all", info) is None
    assert resolve_affinity("4-5,7", info) == (4, 5, 7)
    assert parse_cpu_list("4,5,6,7") == parse_cpu_list("4-7") == (4, 5, 6, 7)
    assert format_cpus((0, 1, 4, 5, 6, 7)) == "0-1,4-7"
    for bad in ("fast", "7-4", "4-", "-1"):
        with pytest.raises(RkspeechError, match="--cpu-affinity") as e:
            resolve_affinity(bad, info)
        assert "\n" not in str(e.value)
    with pytest.raises(RkspeechError, match=r"no core 8-9 here \(cores 0-7; big 4-7\)"):
        resolve_affinity("4-9", info)


def test_pinning_sets_the_big_cores_and_is_a_no_op_on_equal_cores(tmp_path):
    calls = []
    setter = lambda pid, cpus: calls.append((pid, cpus))  # noqa: E731
    assert apply_affinity("big", root=fake_rk3588_cpus(tmp_path / "board"), setter=setter) == (4, 5, 6, 7)
    assert calls == [(0, {4, 5, 6, 7})]
    calls.clear()
    equal = tmp_path / "x86"
    for c in range(2):
        (equal / f"sys/devices/system/cpu/cpu{c}").mkdir(parents=True)
        (equal / f"sys/devices/system/cpu/cpu{c}/cpu_capacity").write_text("1024\n")
    assert apply_affinity("big", root=equal, setter=setter) is None and calls == []
    assert apply_affinity("all", root=tmp_path / "board", setter=setter) is None and calls == []
    assert apply_affinity("1", root=equal, setter=setter) == (1,) and calls == [(0, {1})]


def test_speak_and_serve_take_the_flag(tmp_path):
    from rkspeech.cli import build_parser

    p = build_parser()
    assert p.parse_args(["speak", "hi", "--plan", "p.json", "-o", "x.wav"]).cpu_affinity == "big"
    speak = ["speak", "hi", "--plan", "p.json", "-o", "x.wav"]
    assert p.parse_args(speak + ["--cpu-affinity", "4-7"]).cpu_affinity == "4-7"
    assert p.parse_args(["serve", "--cpu-affinity", "all"]).cpu_affinity == "all"


def test_speak_refuses_a_bad_list_in_one_line_before_loading(tmp_path, capsys):
    from rkspeech.cli import main

    rc = main(["speak", "hi", "--plan", str(tmp_path / "p.json"), "-o", str(tmp_path / "x.wav"),
               "--cpu-affinity", "4-"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "error: --cpu-affinity '4-': give big, all, or a list" in err[0], err


@pytest.mark.skipif(len(getattr(__import__("os"), "sched_getaffinity", lambda _: ())(0)) < 2,
                    reason="needs 2 cores to pin to one")
def test_onnxruntime_threads_inherit_the_pinned_mask(tmp_path):
    """The claim the flag rests on, on this host: pinned before the session is made, every thread of
    the process (onnxruntime's 2 intra-op threads among them) is allowed only the pinned core."""
    import subprocess
    import sys

    from rkfixtures import conv_relu_sin

    onnx = conv_relu_sin(tmp_path / "m.onnx")
    code = f"""
import glob
from rkspeech.core.cpus import apply_affinity
assert apply_affinity("1") == (1,)
from rkspeech.runtime.runners import open_runner
r = open_runner("ort", {str(onnx)!r}, threads=2)
lists = [open(f).read().split("Cpus_allowed_list:")[1].split()[0] for f in glob.glob("/proc/self/task/*/status")]
print(len(lists), sorted(set(lists)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "PYTHONPATH": str(__import__("rkfixtures").REPO)})
    assert out.returncode == 0, out.stderr
    n, allowed = out.stdout.split(" ", 1)
    assert int(n) >= 2 and allowed.strip() == "['1']", out.stdout
