"""``rkspeech doctor`` on a board: what the runtime, the driver and the clocks are, and whether a
plan's .rknn files suit them.

Readings (every path below ``root``, "/" on a board; tests pass a faked tree): the chip
(``/proc/device-tree/compatible``), librknnrt's version (the ``X.Y.Z (commit@date)`` string
inside the library file, as its own log line prints it: "librknnrt version: 2.3.2
(429f97ae6b@2025-04-09T09:09:27)"), the rknpu driver version, the NPU and DDR devfreq nodes
(governor, current / available frequencies), the driver's debugfs ``freq`` / ``load``, memory
(``/proc/meminfo``), and the CPU: which cores are big (``core.cpus``: ``cpu_capacity``, else the
max clock) and each cpufreq policy's governor (``ondemand`` costs 26-32 % of a TTS real-time
factor on RK3588, public: ``compat.SOURCES["cpu-governor"]``).  Each rule of ``board.compat``
gives a one-line verdict with its fix (a CPU governor: one per cpufreq policy).  Off a Rockchip
board the readings say so and the plan's .rknn files are still checked (chip, toolkit version,
the plan's integrity).  Standard library only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rkspeech.board import compat
from rkspeech.convert.toolkit import LIBRKNNRT_FROM
from rkspeech.core.errors import RkspeechError

_RT_VERSION = re.compile(rb"(\d+\.\d+\.\d+(?:b\d+)?) \(([0-9a-f]{6,}@\d{4}-\d\d-\d\dT[\d:]+)\)")


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None


def chip(root: Path) -> str | None:
    from rkspeech.core.targets import TARGETS

    text = _read(root, "proc/device-tree/compatible")
    if not text or "rockchip" not in text:
        return None
    return next((t for t in TARGETS if t in text), "rockchip (unknown chip)")


def librknnrt(root: Path) -> dict:
    """The first librknnrt.so found and the version string inside it."""
    env = os.environ.get("LIBRKNNRT_PATH")
    candidates = ([Path(env)] if env and str(root) == "/" else []) + [root / p for p in compat.LIBRKNNRT_PATHS]
    for p in candidates:
        if p.is_file():
            m = _RT_VERSION.search(p.read_bytes())
            return {"path": str(p), "version": m.group(1).decode() if m else None,
                    "build": m.group(2).decode() if m else None}
    return {"path": None, "version": None}


def driver_version(root: Path) -> str | None:
    for rel in compat.DRIVER_VERSION_PATHS:
        text = _read(root, rel)
        if text:
            v = compat.version_tuple(text)
            return ".".join(map(str, v)) if v else text
    return None


def _devfreq(node: Path) -> dict:
    def get(name):
        try:
            return (node / name).read_text().strip()
        except OSError:
            return None

    avail = [int(x) for x in (get("available_frequencies") or "").split() if x.isdigit()]
    cur = get("cur_freq")
    return {"node": str(node), "governor": get("governor"), "cur_hz": int(cur) if cur and cur.isdigit() else None,
            "max_hz": max(avail) if avail else None, "available_hz": avail}


def clocks(root: Path) -> dict:
    base = root / compat.DEVFREQ
    nodes = sorted(base.iterdir()) if base.is_dir() else []
    npu = [n for n in nodes if n.name.endswith(".npu") or n.name == "npu"]
    dmc = [n for n in nodes if n.name == "dmc"]
    out = {"npu": _devfreq(npu[0]) if npu else None, "ddr": _devfreq(dmc[0]) if dmc else None}
    for name in ("freq", "load"):
        text = _read(root, f"{compat.NPU_DEBUGFS}/{name}")
        if text:
            out[f"debugfs_{name}"] = text
    return out


def memory(root: Path) -> dict:
    out = {}
    for line in (_read(root, "proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable") and rest.split():
            out[key] = int(rest.split()[0]) // 1024  # MB
    return {"total_mb": out.get("MemTotal"), "available_mb": out.get("MemAvailable")}


def cpus(root: Path) -> dict:
    """The cores (``core.cpus.core_info``: which are big, from what) and each cpufreq policy:
    its cores, governor, current and top clock (kHz)."""
    from rkspeech.core.cpus import core_info

    info = core_info(root)
    policies = []
    base = root / compat.CPUFREQ
    for node in sorted(base.glob("policy*"), key=lambda p: int(p.name[6:]) if p.name[6:].isdigit() else 0):
        def get(name):
            return _read(node, name)

        cores = (get("related_cpus") or get("affected_cpus") or "").split()
        num = (lambda v: int(v) if v and v.isdigit() else None)
        policies.append({"policy": node.name, "node": str(node),
                         "cpus": [int(c) for c in cores if c.isdigit()],
                         "governor": get("scaling_governor"), "cur_khz": num(get("scaling_cur_freq")),
                         "max_khz": num(get("cpuinfo_max_freq"))})
    return {"cpus": list(info.cpus), "big": list(info.big), "little": list(info.little), "source": info.source,
            "figures": {str(k): v for k, v in info.figures.items()}, "policies": policies}


def _cpu_findings(reading: dict) -> list[dict]:
    """One finding per cpufreq policy not held at its top clock, and which cores speak / serve pin to."""
    from rkspeech.core.cpus import format_cpus

    out = []
    for pol in reading["policies"]:
        gov, cur, top = pol["governor"], pol["cur_khz"], pol["max_khz"]
        if gov == "performance" or (gov == "userspace" and cur is not None and top is not None and cur >= top):
            continue
        kind = "big" if set(pol["cpus"]) <= set(reading["big"]) and reading["big"] != reading["cpus"] else \
            "little" if set(pol["cpus"]) <= set(reading["little"]) else "CPU"
        cost = " (public RK3588: ondemand costs 26-32 % of a TTS real-time factor)" if gov == "ondemand" else ""
        out.append({"id": "cpu-governor", "severity": "warning",
                    "message": (f"cpufreq {pol['policy']} ({kind} cores {format_cpus(pol['cpus'])}) governor {gov}: "
                                f"the clock follows the load{cost}; as root: echo performance > "
                                f"{pol['node']}/scaling_governor"),
                    "source": compat.SOURCES["cpu-governor"]})
    if reading["big"] != reading["cpus"]:
        figures = reading["figures"]
        fig = (lambda cs: "/".join(sorted({str(figures[str(c)]) for c in cs if str(c) in figures})))
        out.append({"id": "cpu-big-cores", "severity": "info",
                    "message": (f"big cores {format_cpus(reading['big'])} ({reading['source']} {fig(reading['big'])} "
                                f"vs {fig(reading['little'])} on {format_cpus(reading['little'])}): speak and "
                                "serve pin their CPU stages there (--cpu-affinity big, the default); keep other CPU-heavy work "
                                "off them"),
                    "source": compat.SOURCES["cpu-big-cores"]})
    elif reading["source"] == "none" and len(reading["cpus"]) > 1:
        out.append({"id": "cpu-big-cores-unknown", "severity": "warning",
                    "message": ("which cores are big is unknown (no cpu_capacity or cpuinfo_max_freq readable): "
                                "speak and serve leave the scheduler free; pass --cpu-affinity LIST (RK3588: 4-7)"),
                    "source": compat.SOURCES["cpu-big-cores"]})
    return out


def _clock_finding(kind: str, reading: dict | None) -> dict | None:
    if reading is None:
        return None
    gov, cur, top = reading["governor"], reading["cur_hz"], reading["max_hz"]
    node = reading["node"]
    pinned = gov in compat.PINNED_GOVERNORS and (cur is None or top is None or cur >= top)
    if pinned:
        return None
    mhz = (lambda v: "?" if v is None else f"{v / 1e6:.0f} MHz")
    return {"id": f"{kind.lower()}-clock-unpinned", "severity": "warning",
            "message": (f"{kind} clock not pinned (governor {gov}, now {mhz(cur)} of {mhz(top)}): boards run 2-3x "
                        f"slower than published figures until it is; pin it as root: echo userspace > "
                        f"{node}/governor && echo {top or 'MAX_HZ'} > {node}/userspace/set_freq"),
            "source": compat.SOURCES["clock-unpinned"]}


def plan_rknn_files(plan_path: str | os.PathLike) -> tuple[list[Path], list[dict]]:
    """The .rknn files a plan names that are there (after its integrity check), and findings: a
    damaged file, and each file the plan names (or its integrity record lists) that is missing:
    an error when a board runs it (``plan.integrity.board_files``: .rknn graphs, CPU stages'
    ONNX), a warning otherwise (ONNX for ort/sim; golden replays for check-board).  A missing
    .rknn used to be left out of the list silently, and doctor exited 0 (issue 37)."""
    from rkspeech.board.check import plan_graphs
    from rkspeech.plan.integrity import board_files, expected_files
    from rkspeech.plan.plan import read_plan

    p = Path(plan_path)
    try:
        raw = read_plan(p)
        board, expected = board_files(raw, p.parent), expected_files(raw, p.parent)
        graphs = plan_graphs(raw, p.parent)
    except RkspeechError as exc:
        return [], [{"id": "plan-unreadable", "severity": "error", "message": str(exc), "source": "plan.json integrity"}]
    findings = []
    for f in expected:
        if f.is_file():
            continue
        needed = f in board or (f.suffix == ".data" and f.with_suffix("") in board)
        findings.append({"id": "plan-file-missing", "severity": "error" if needed else "warning",
                         "message": f"{f} is missing (the plan names it"
                                    + ("; a board runs it): copy the whole plan folder" if needed else
                                       "; only ort/sim or check-board use it)"),
                         "source": str(p)})
    return [g.rknn for g in graphs if g.rknn is not None and g.rknn.is_file()], findings


def board_report(*, root: str | os.PathLike = "/", plan: str | os.PathLike | None = None,
                 lite_version: str | None = None, installed: dict | None = None) -> dict:
    """Readings and findings; ``lite_version``: the installed rknn-toolkit-lite2 (None: absent);
    ``installed``: package -> installed version (``plan.versions.installed_versions``; None: read
    here), compared with the versions the plan was built with (``plan.versions.version_skews``)."""
    root = Path(root)
    board = chip(root)
    rt = librknnrt(root)
    readings = {"chip": board, "librknnrt": rt, "rknpu_driver": driver_version(root),
                "clocks": clocks(root), "memory": memory(root), "cpu": cpus(root),
                "rknn_toolkit_lite2": lite_version}
    findings: list[dict] = []
    if board is None:
        findings.append({"id": "not-a-board", "severity": "info",
                         "message": "not a Rockchip board (no rockchip in /proc/device-tree/compatible): board "
                                    "readings skipped; the plan's .rknn files are still checked", "source": "-"})
    else:
        if rt["path"] is None:
            findings.append({"id": "librknnrt-missing", "severity": "error",
                             "message": f"librknnrt.so not found: {LIBRKNNRT_FROM}",
                             "source": compat.SOURCES["librknnrt-missing"]})
        drv = compat.version_tuple(readings["rknpu_driver"])
        if drv is not None and drv < compat.MIN_DRIVER:
            findings.append({"id": "driver-old", "severity": "warning",
                             "message": f"rknpu driver {readings['rknpu_driver']} is older than "
                                        f"{'.'.join(map(str, compat.MIN_DRIVER))}: update the board's kernel (the "
                                        "driver is built into it; airockchip/rknn-llm rknpu-driver/)",
                             "source": compat.SOURCES["driver-old"]})
        for kind, reading in (("NPU", readings["clocks"]["npu"]), ("DDR", readings["clocks"]["ddr"])):
            f = _clock_finding(kind, reading)
            if f:
                findings.append(f)
        findings += _cpu_findings(readings["cpu"])
        lite = compat.version_tuple(lite_version)
        rtv = compat.version_tuple(rt.get("version"))
        if lite and rtv and lite[:2] != rtv[:2]:
            findings.append({"id": "lite-runtime-skew", "severity": "warning",
                             "message": f"rknn-toolkit-lite2 {lite_version} over librknnrt {rt['version']}: install "
                                        "the librknnrt.so of the same release", "source": compat.SOURCES["lite-runtime-skew"]})
    models = []
    if plan is not None:
        files, bad = plan_rknn_files(plan)
        findings += bad
        from rkspeech.contracts.rknn_file import read_container

        rtv = compat.version_tuple(rt.get("version"))
        for f in files:
            c = read_container(f)
            tk = compat.version_tuple(c.toolkit_version)
            models.append({"file": str(f), "chip": c.target_platform, "toolkit_version": c.toolkit_version})
            if board and board in [t for t in compat_targets()] and board not in c.target_platform:
                findings.append({"id": "chip-mismatch", "severity": "error",
                                 "message": f"{f.name} was built for {', '.join(c.target_platform)}, this board is "
                                            f"{board}: rebuild with --target {board}", "source": compat.SOURCES["chip-mismatch"]})
            if compat.runtime_older_than_toolkit(rtv, tk):
                findings.append({"id": "runtime-older-than-toolkit", "severity": "error",
                                 "message": f"{f.name} was built by rknn-toolkit2 {c.toolkit_version}, librknnrt is "
                                            f"{rt['version']} (\"Invalid RKNN model version\"): replace {rt['path']} with "
                                            f"the librknnrt.so of rknn-toolkit2 {c.toolkit_version}",
                                 "source": compat.SOURCES["runtime-older-than-toolkit"]})
        findings += _version_findings(plan, installed, lite_version, rt.get("version"), board is not None)
        versions = sorted({m["toolkit_version"] for m in models if m["toolkit_version"]})
        if len(versions) > 1:
            findings.append({"id": "mixed-toolkits", "severity": "warning",
                             "message": f"the plan's .rknn files come from several toolkit versions ({', '.join(versions)}): "
                                        "the runtime must be at least the newest; rebuild them with one", "source": "-"})
    return {"board": readings, "models": models, "findings": findings}


def _version_findings(plan, installed: dict | None, lite_version: str | None, librknnrt: str | None,
                      board: bool) -> list[dict]:
    """The plan's recorded runtime versions against this machine's (``plan.versions``); nothing
    when the plan cannot be read (``plan_rknn_files`` said so)."""
    from rkspeech.plan.plan import read_plan
    from rkspeech.plan.versions import installed_versions, version_skews

    try:
        raw = read_plan(plan)
    except RkspeechError:
        return []
    have = dict(installed if installed is not None else installed_versions())
    have.setdefault("rknn-toolkit-lite2", lite_version)
    have["librknnrt"] = librknnrt
    return version_skews(raw, plan, have, board=board)


def compat_targets() -> tuple[str, ...]:
    from rkspeech.core.targets import TARGETS

    return tuple(TARGETS)
