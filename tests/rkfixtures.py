"""Tiny ONNX graphs and a once-per-session .rknn for the rknn tests (helper, not a test module)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

_CACHE: dict[str, Path] = {}

REPO = Path(__file__).resolve().parents[1]


def listing(folder: Path) -> set[str]:
    """Every file under ``folder``, as paths relative to it."""
    return {p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if not p.is_dir()}


#: training steps of the session's trained (confident) root (conftest ``trained_tts_ckpt``; the
#: CLI's default trains 400)
TRAINED_TEST_STEPS = 150


def run_relative(cwd: Path, argv: list[str], capsys=None) -> tuple[int, str, set[str]]:
    """``rkspeech ARGV`` in-process with ``cwd`` as the working folder, as a user runs it from a
    folder of their own with relative paths: ``(exit code, stderr, files it added under cwd)``."""
    import os

    from rkspeech.cli import main

    before = listing(cwd)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        rc = main(list(argv))
    finally:
        os.chdir(here)
    err = capsys.readouterr().err if capsys is not None else ""
    return rc, err, listing(cwd) - before


def serve_process(args: list[str], cwd, timeout: float = 120.0):
    """``rkspeech serve ARGS`` in ``cwd`` as a user starts it, both front ends on free loopback
    ports: ``(process, {kind: address}, stderr lines so far)``; the caller stops the process."""
    import os
    import re
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "rkspeech", "serve", *args, "--http", "127.0.0.1:0",
                             "--wyoming", "tcp://127.0.0.1:0"], cwd=cwd, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RKSPEECH_API_KEY": ""})
    addresses, lines, deadline = {}, [], time.monotonic() + timeout
    while len(addresses) < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"rkspeech serve: (\w+) on (\S+)", line)
        if m:
            addresses[m.group(1)] = m.group(2)
    if len(addresses) < 2:
        proc.kill()
        raise AssertionError("".join(lines))
    return proc, addresses, lines


def have_rknn() -> bool:
    from rkspeech.convert.toolkit import have_toolkit

    return have_toolkit()


def save(model, path: Path) -> Path:
    import onnx

    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def graph(nodes, inputs, outputs, inits=(), opset=13):
    from onnx import helper

    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, elem=1):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def conv_relu_sin(path: Path, with_sin: bool = True) -> Path:
    """x[1,4,16,16] -> Conv 3x3 -> Relu -> (Sin) -> Mul -> y[1,8,16,16]."""
    from onnx import helper, numpy_helper

    rng = np.random.RandomState(0)
    w = numpy_helper.from_array((rng.randn(8, 4, 3, 3) * 0.3).astype(np.float32), "W")
    b = numpy_helper.from_array((rng.randn(8) * 0.1).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu0")]
    if with_sin:
        nodes += [helper.make_node("Sin", ["r"], ["s"], name="sin0"),
                  helper.make_node("Mul", ["s", "r"], ["y"], name="mul0")]
    else:
        nodes += [helper.make_node("Mul", ["r", "r"], ["y"], name="mul0")]
    return save(graph(nodes, [vi("x", [1, 4, 16, 16])], [vi("y", [1, 8, 16, 16])], [w, b]), path)


def session_rknn(tmp_path_factory) -> Path:
    """One real rk3588 fp16 .rknn of the Conv/Relu/Sin graph per test session."""
    if "rknn" not in _CACHE:
        from rkspeech.convert.conversion import convert

        d = tmp_path_factory.mktemp("rknn_session")
        onnx_path = conv_relu_sin(d / "tiny.onnx")
        res = convert(onnx_path, d / "tiny_rk3588.rknn", target="rk3588", show_progress=False,
                      custom_string='{"format":"other-model/1","note":"not a step contract"}')
        _CACHE["rknn"] = Path(res.rknn_path)
        _CACHE["onnx"] = onnx_path
        _CACHE["result"] = res  # type: ignore[assignment]
    return _CACHE["rknn"]


def session_result(tmp_path_factory):
    session_rknn(tmp_path_factory)
    return _CACHE["result"]


def kill_parent_expect_child_gone(parent, child, what: str, within_s: float = 5.0) -> None:
    """SIGKILL ``parent`` (a Popen) and fail unless ``child`` (a psutil.Process) is gone or a
    zombie within ``within_s``: a toolkit child must die with its parent."""
    import os
    import signal
    import time

    import psutil
    import pytest

    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.1)
    pytest.fail(f"{what} {child.pid} still runs {within_s:g} s after its parent was SIGKILLed")


def cli_commands(parser=None) -> dict:
    """Every command's parser of ``rkspeech.cli.build_parser()``, by the words that select it
    ("build qwen3-tts")."""
    import argparse

    if parser is None:
        from rkspeech.cli import build_parser

        parser = build_parser()
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found = cli_commands(sub)
                out.update({f"{name} {k}": v for k, v in found.items()})
                # flags of its own beside its subcommands: runnable alone too (voices; voices save)
                if not found or any(a.option_strings and a.dest != "help" for a in sub._actions):
                    out[name] = sub
    return out


def format_1(raw: dict) -> dict:
    """The format-1 JSON the writers before the stage record wrote for the plan ``raw``."""
    out = {k: v for k, v in raw.items() if k not in ("vocoder", "talker", "code_predictor", "whisper_encoder")}
    out["format"] = "rkspeech-plan/1"
    v = raw["vocoder"]
    sd = {"impl": "rknn" if v["placement"] == "npu" else "onnx",
          **{k: x for k, x in v.items() if k not in ("placement", "artifacts", "backends")}}
    for section, kind in (("artifacts", "rknn"), ("onnx", "onnx"), ("host_onnx", "host_onnx")):
        sd[section] = {role: files[kind] for role, files in v["artifacts"].items() if kind in files}
    if "backends" in v:
        sd["backends"] = {b: {"rknn": "artifacts"}.get(k, k) for b, k in v["backends"].items()}
    out["speech_decoder"] = sd
    for name in ("talker", "code_predictor"):
        if name in raw:
            rec = raw[name]
            sec = {**rec, "impl": "rknn" if rec["placement"] == "npu" else "onnx"}
            sec["artifacts"] = {r: f for r, f in rec["artifacts"].items() if r in ("prefill", "decode", "step", "frame")}
            heads = {r[4:]: f["onnx"] for r, f in rec["artifacts"].items() if r.startswith("head")}
            if heads:
                sec["heads"] = heads
            if "start" in rec["artifacts"]:
                sec["start"] = rec["artifacts"]["start"]["onnx"]
            out[name] = sec
    return out


def fake_rk3588_cpus(root: Path, *, governors=("ondemand", "ondemand", "ondemand"), capacity: bool = True,
                     max_freq: bool = True, ddr_governor: str | None = "dmc_ondemand") -> Path:
    """A faked RK3588 CPU sysfs under ``root``: cpus 0-3 Cortex-A55 (``cpu_capacity`` 414, 1.8 GHz),
    4-7 Cortex-A76 (1024, 2.4 GHz); cpufreq policies 0 (cpus 0-3), 4 (4-5), 6 (6-7) with
    ``governors``; the DDR devfreq node ``dmc`` with ``ddr_governor`` (None: no node).
    ``capacity`` / ``max_freq`` False leave those files out (the fallbacks of ``core.cpus``)."""
    cpu = root / "sys/devices/system/cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    (cpu / "online").write_text("0-7\n")
    for c in range(8):
        big = c >= 4
        d = cpu / f"cpu{c}"
        (d / "cpufreq").mkdir(parents=True, exist_ok=True)
        if capacity:
            (d / "cpu_capacity").write_text("1024\n" if big else "414\n")
        if max_freq:
            (d / "cpufreq/cpuinfo_max_freq").write_text("2400000\n" if big else "1800000\n")
    for (policy, cpus, top), gov in zip(((0, "0 1 2 3", 1800000), (4, "4 5", 2400000), (6, "6 7", 2400000)),
                                        governors):
        p = cpu / f"cpufreq/policy{policy}"
        p.mkdir(parents=True, exist_ok=True)
        for name, text in (("scaling_governor", gov), ("related_cpus", cpus), ("affected_cpus", cpus),
                           ("cpuinfo_max_freq", top), ("scaling_max_freq", top), ("scaling_cur_freq", 408000),
                           ("scaling_available_governors", "ondemand userspace powersave performance schedutil")):
            (p / name).write_text(f"{text}\n")
    if ddr_governor is not None:
        dmc = root / "sys/class/devfreq/dmc"
        dmc.mkdir(parents=True, exist_ok=True)
        (dmc / "governor").write_text(f"{ddr_governor}\n")
        (dmc / "cur_freq").write_text("528000000\n")
        (dmc / "available_frequencies").write_text("528000000 1068000000 1560000000 2112000000\n")
    return root


#: Python source that makes torch unimportable in the interpreter that runs it (a child process of a
#: test): every ``import torch...`` raises ImportError and is counted in ``attempts``.
TORCH_BLOCKER = """
import sys, importlib.abc
attempts = []
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            attempts.append(name)
            raise ImportError(f"torch is blocked in this test: {name}")
        return None
sys.meta_path.insert(0, Block())
"""


def tts_base_build_argv(root, vocoder_plan, home) -> list[str]:
    """``build qwen3-tts`` of a reduced Base root (``conftest.tts_base_build``), relative to ``home``:
    its vocoder plan reused, talker and code predictor cpu-fp32, no gate."""
    import os

    return ["build", "qwen3-tts", "--model-dir", os.path.relpath(root, home), "--out-dir", "out", "--vocoder-plan",
            os.path.relpath(vocoder_plan, home), "--talker", "cpu-fp32", "--code-predictor", "cpu-fp32",
            "--talker-capacity", "160", "--talker-prefill", "16", "--gate", "off"]


def rkspeech_child(argv: list[str], *, blocked: bool = False):
    """``python -m rkspeech ARGV`` in a child interpreter (torch made unimportable when ``blocked``,
    :data:`TORCH_BLOCKER`); its stderr ends with ``TORCH-MODULES [...] ATTEMPTS n``: the torch
    modules loaded and the blocked imports tried.  The ``subprocess.CompletedProcess``."""
    import subprocess
    import sys
    import textwrap

    code = (TORCH_BLOCKER if blocked else "import sys\nattempts = []\n") + textwrap.dedent(f"""
        import runpy
        sys.argv = {["rkspeech", *argv]!r}
        try:
            runpy.run_module("rkspeech", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            torch_loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch")
            print("TORCH-MODULES", torch_loaded, "ATTEMPTS", len(attempts), file=sys.stderr)
            sys.exit(e.code)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def write_small_code_predictor_root(root: Path, *, layers: int, groups: int) -> Path:
    """A reduced custom-voice root (seed 0) whose code predictor has ``layers`` layers and ``groups``
    code groups (the talker's too): the code predictor's conversions take a fraction of the reduced
    root's (the int16-hybrid build: 17 s with 1 layer and 4 groups, 176 s reduced)."""
    import copy

    import pytest

    from rkspeech.models.qwen3_tts import synthetic_tts

    small = copy.deepcopy(synthetic_tts.REDUCED)
    small["talker"]["num_code_groups"] = groups
    small["code_predictor"].update(num_code_groups=groups, num_hidden_layers=layers)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(synthetic_tts.CONFIGS, "reduced", small)
        synthetic_tts.write_tts_checkpoint(root, "reduced", "custom-voice", 0)
    return root
