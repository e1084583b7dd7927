"""``rkspeech convert MODEL.onnx --target rk3588``: build an .rknn and report where ops run."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import TARGETS


def register(subparsers) -> None:
    p = subparsers.add_parser("convert", help="ONNX -> .rknn in a child process, with a placement report")
    f = Flags(p, "convert")
    f.add(INPUT, "onnx", metavar="MODEL.onnx")
    f.add(INPUT, "--dataset", metavar="FILE", help="calibration list for int8 (rknn-toolkit2 format)")
    f.add(INPUT, "--custom-string", metavar="TEXT",
          help="custom string for the .rknn (default: the ONNX 'rkspeech.contract' metadata)")
    f.add(OUTPUT, "--output", "-o", writes="file", metavar="X.rknn", help="default: MODEL_<target>.rknn beside the ONNX")
    f.add(OUTPUT, "--report", writes="file", metavar="FILE.json", help="write the JSON report here")
    f.add(OUTPUT, "--json", action="store_true", help="print the JSON report on stdout")
    f.add(NPU, "--target", required=True, choices=TARGETS)
    f.add(NPU, "--dtype", default="fp16", choices=("fp16", "int8"))
    f.add(NPU, "--fail-on-cpu", action="store_true",
          help="exit non-zero when compute ops land on the CPU (after writing the report)")
    f.add(ADVANCED, "--opt-level", type=int, metavar="N", help="rknn-toolkit2 optimization_level (default 3)")
    f.add(ADVANCED, "--timeout", type=float, metavar="S", help="kill the build after S seconds")
    f.add(ADVANCED, "--memory-limit-mb", type=float, metavar="MB", help="kill the build above MB of RSS")
    p.set_defaults(func=run)


def print_summary(report: dict) -> None:
    pl, b, r = report["placement"], report["build"], report["rknn"]
    rss = "?" if b["peak_rss_mb"] is None else f"{b['peak_rss_mb'] / 1024:.2f} GB"
    rows = [
        ("rknn", f"{r['path']} ({r['bytes'] / 2**20:.2f} MB, {report['target']} {report['dtype']})"),
        ("build", f"{b['seconds']:.1f} s, peak RSS {rss}"),
        ("ops", f"{pl.get('npu_ops', 0)} NPU, {pl.get('cpu_ops', 0)} CPU, {pl.get('io_ops', 0)} I/O"),
    ]
    if pl.get("cpu_op_types"):
        rows.append(("CPU op types", ", ".join(f"{k} x{v}" for k, v in pl["cpu_op_types"].items())))
        rows.append(("CPU by position", ", ".join(f"{k} {v}" for k, v in pl["cpu_by_position"].items())))
    if b["regtask_overflow_lines"]:
        rows.append(("REGTASK", f"{b['regtask_overflow_lines']:,} 'bit width exceeds the limit' lines: "
                                "such layers are known to fail on a board"))
    rows.append(("crosscheck", str(pl.get("crosscheck", {}).get("status"))))
    rows.append(("log", b["log"]))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    cpu = pl.get("cpu_op_list") or []
    for op in cpu[:25]:
        print(f"  CPU  #{op['id']:<5} {op['op_type']:<18} {op['position']:<6} {op['output_shapes']:<22} "
              f"{op['onnx_node'] or op['full_name']}")
    if len(cpu) > 25:
        print(f"  ... {len(cpu) - 25} more CPU ops in the report")


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.convert.conversion import convert, default_output
    from rkspeech.core.atomic import check_writable, write_json
    from rkspeech.core.errors import RkspeechError
    from rkspeech.contracts.read import check_onnx_file, read_onnx_metadata
    from rkspeech.contracts.base import CONTRACT_KEY

    check_onnx_file(args.onnx)
    output = args.output or str(default_output(args.onnx, args.target))
    check_writable(output, what="output .rknn")
    if args.report:
        check_writable(args.report, what="report")
    custom = args.custom_string
    if custom is None:
        custom = read_onnx_metadata(args.onnx).get(CONTRACT_KEY)
    res = convert(args.onnx, output, target=args.target, dtype=args.dtype, dataset=args.dataset,
                  opt_level=args.opt_level, timeout=args.timeout, custom_string=custom,
                  memory_limit_mb=args.memory_limit_mb)
    report = res.to_report()
    if args.report:
        write_json(args.report, report, indent=1)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_summary(report)
    if args.fail_on_cpu and res.cpu_compute_ops:
        types = ", ".join(f"{k} x{v}" for k, v in report["placement"]["cpu_op_types"].items())
        raise RkspeechError(f"{res.cpu_compute_ops} compute ops run on the CPU ({types}); "
                            f"see {args.report or 'the placement list above'}")
    return 0
