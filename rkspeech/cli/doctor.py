"""``rkspeech doctor [--plan plan.json]``: versions of the toolchain and known-bad combinations;
on a board also the runtime, driver, clocks and memory, and whether the plan's .rknn files suit
them (``rkspeech.board.doctor``; off a board it says so and still checks the plan's .rknn files).

Versions are read with ``importlib.metadata`` (nothing heavy is imported).  The rules are data
(``RULES``), each with its source; they come from rknn-toolkit2 2.5.0's own metadata
(``Requires-Dist``: numpy<=1.26.4, onnx>=1.16.1,<=1.18.0, protobuf>=4.21.6,<=4.25.4,
onnxruntime>=1.17.0, torch<=2.4.0) and from what was measured to work here (shared field notes:
torch 2.13 CPU beside rknn-toolkit2 installed with --no-deps).
"""

from __future__ import annotations

import argparse

PACKAGES = ("numpy", "torch", "onnx", "onnxruntime", "protobuf", "setuptools", "psutil",
            "rknn-toolkit2", "rknn-toolkit-lite2", "rich", "hypothesis")

FIELD_NOTES = "shared/docs/field-notes.md"
TOOLKIT_META = "rknn-toolkit2 2.5.0 Requires-Dist (importlib.metadata.requires)"

#: (id, severity, when-package, check, message, source).  ``check(versions) -> bool`` is True
#: when the problem is present.  Versions are tuples of ints (missing package = None).
RULES = [
    ("numpy-2", "error", "rknn-toolkit2",
     lambda v: v["numpy"] is not None and v["numpy"] >= (2,),
     "numpy >= 2 with rknn-toolkit2 2.5.0: it pins numpy<=1.26.4; `pip install numpy==1.26.4`",
     TOOLKIT_META),
    ("onnx-too-new", "error", "rknn-toolkit2",
     lambda v: v["onnx"] is not None and v["onnx"] > (1, 18, 0),
     "onnx > 1.18.0 with rknn-toolkit2 2.5.0 (pins onnx<=1.18.0); `pip install onnx==1.18.0`",
     TOOLKIT_META),
    ("protobuf-too-new", "error", "rknn-toolkit2",
     lambda v: v["protobuf"] is not None and v["protobuf"] > (4, 25, 4),
     "protobuf > 4.25.4 with rknn-toolkit2 2.5.0 (pins protobuf<=4.25.4); `pip install protobuf==4.25.4`",
     TOOLKIT_META),
    ("setuptools-81", "error", "rknn-toolkit2",
     lambda v: v["setuptools"] is None or v["setuptools"] >= (81,),
     "setuptools >= 81 (or absent) has no pkg_resources, which rknn-toolkit2 imports; "
     "`pip install 'setuptools<81'`",
     f"{FIELD_NOTES}: rknn-toolkit2 imports pkg_resources (measured here)"),
    ("onnxruntime-old", "warning", "rknn-toolkit2",
     lambda v: v["onnxruntime"] is not None and v["onnxruntime"] < (1, 17),
     "onnxruntime < 1.17 (rknn-toolkit2 2.5.0 wants >= 1.17.0)", TOOLKIT_META),
    ("psutil-missing", "warning", "rknn-toolkit2",
     lambda v: v["psutil"] is None,
     "psutil is missing: rknn-toolkit2 needs it and `rkspeech convert` uses it for peak RSS",
     TOOLKIT_META),
    ("torch-cuda", "warning", "torch",
     lambda v: v.get("_torch_cuda", False),
     "torch is a CUDA build (several GB; rknn-toolkit2's torch<=2.4 pin pulls one when pip resolves "
     "it): install the CPU wheel and rknn-toolkit2 with --no-deps",
     f"{FIELD_NOTES}: install rknn-toolkit2 with --no-deps; torch 2.13 CPU works beside it"),
    ("torch-pin", "info", "rknn-toolkit2",
     lambda v: v["torch"] is not None and v["torch"] > (2, 4, 0),
     "torch > 2.4.0 is outside rknn-toolkit2's declared pin; measured to work here "
     "(torch 2.13 CPU, install the toolkit with --no-deps)",
     f"{TOOLKIT_META}; {FIELD_NOTES}"),
]


def register(subparsers) -> None:
    import argparse as _argparse

    from rkspeech.cli.vocabulary import Flags

    p = subparsers.add_parser("doctor", help="show toolchain versions and known-bad combinations; on a board: "
                                             "runtime, driver, NPU / DDR / CPU clocks, big cores, and the plan's "
                                             ".rknn files against them")
    f = Flags(p, "doctor")
    f.add(None, "--json", action="store_true")
    f.add(None, "--plan", default=None, help="also check this plan's .rknn files (chip, toolkit version vs the "
                                             "runtime) and its files' integrity")
    f.add(None, "--root", default="/", help=_argparse.SUPPRESS)  # tests: a faked sysfs/proc tree
    p.set_defaults(func=run)


def _vt(text: str | None):
    if text is None:
        return None
    out = []
    for part in text.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part else ""
        if not digits or not part[0].isdigit():
            break
        out.append(int(digits))
    return tuple(out)


def collect() -> dict:
    import importlib.metadata as md
    import platform
    import sys

    from rkspeech.plan.versions import installed_versions

    raw = installed_versions(PACKAGES)
    versions = {k: _vt(v) for k, v in raw.items()}
    cuda = False
    if raw["torch"]:
        cuda = "+cu" in raw["torch"]
        if not cuda:
            try:
                cuda = any(str(r).startswith("nvidia-") for r in (md.requires("torch") or [])
                           if "extra ==" not in str(r))
            except md.PackageNotFoundError:
                pass
    versions["_torch_cuda"] = cuda
    findings = []
    for rid, sev, when, check, msg, source in RULES:
        if raw.get(when) is None:
            continue
        try:
            hit = check(versions)
        except TypeError:
            hit = False
        if hit:
            findings.append({"id": rid, "severity": sev, "message": msg, "source": source})
    return {"python": sys.version.split()[0], "platform": f"{platform.system()} {platform.machine()}",
            "packages": raw, "torch_cuda_build": cuda, "findings": findings}


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.board.doctor import board_report

    info = collect()
    board = board_report(root=args.root, plan=args.plan, lite_version=info["packages"].get("rknn-toolkit-lite2"),
                         installed={k: info["packages"].get(k) for k in ("onnxruntime", "numpy", "rknn-toolkit-lite2")})
    info["board"], info["models"] = board["board"], board["models"]
    info["findings"] += board["findings"]
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(f"{'python':<20} {info['python']} ({info['platform']})")
        for k, v in info["packages"].items():
            extra = " (CUDA build)" if k == "torch" and info["torch_cuda_build"] else ""
            print(f"{k:<20} {v or '-'}{extra}")
        _print_board(info["board"], info["models"])
        for f in info["findings"]:
            print(f"{f['severity'].upper():<7} {f['id']}: {f['message']}")
        if not info["findings"]:
            print("no known-bad combinations found")
    return 1 if any(f["severity"] == "error" for f in info["findings"]) else 0


def _print_cpu(cpu: dict | None) -> None:
    from rkspeech.core.cpus import format_cpus

    if not cpu:
        return
    if cpu["big"] != cpu["cpus"]:
        print(f"{'CPU cores':<20} big {format_cpus(cpu['big'])}, little {format_cpus(cpu['little'])} "
              f"(from {cpu['source']})")
    else:
        print(f"{'CPU cores':<20} {format_cpus(cpu['cpus']) or '?'}, all alike (from {cpu['source']})")
    for pol in cpu["policies"]:
        top = "?" if pol["max_khz"] is None else f"{pol['max_khz'] / 1e3:.0f}"
        cur = "?" if pol["cur_khz"] is None else f"{pol['cur_khz'] / 1e3:.0f}"
        print(f"{'CPU ' + pol['policy']:<20} cores {format_cpus(pol['cpus'])}: {cur} of {top} MHz, "
              f"governor {pol['governor']}")


def _print_board(b: dict, models: list[dict]) -> None:
    def mhz(r):
        if not r:
            return "-"
        cur = "?" if r["cur_hz"] is None else f"{r['cur_hz'] / 1e6:.0f}"
        top = "?" if r["max_hz"] is None else f"{r['max_hz'] / 1e6:.0f}"
        return f"{cur} of {top} MHz, governor {r['governor']}"

    rt = b["librknnrt"]
    mem = b["memory"]
    print(f"{'board':<20} {b['chip'] or 'not a Rockchip board'}")
    if b["chip"]:
        print(f"{'librknnrt':<20} {rt['version'] or '-'} ({rt['path'] or 'not found'})")
        print(f"{'rknpu driver':<20} {b['rknpu_driver'] or '- (debugfs needs root)'}")
        print(f"{'NPU clock':<20} {mhz(b['clocks']['npu'])}")
        print(f"{'DDR clock':<20} {mhz(b['clocks']['ddr'])}")
        print(f"{'memory':<20} {mem['available_mb'] or '?'} of {mem['total_mb'] or '?'} MB available")
        _print_cpu(b.get("cpu"))
    for m in models:
        print(f"{'rknn':<20} {m['file']}: {', '.join(m['chip'])}, toolkit {m['toolkit_version'] or '?'}")
