"""``rkspeech lint MODEL.onnx --target rk3588``: preflight check before a conversion."""

from __future__ import annotations

import argparse

from rkspeech.core.targets import DEFAULT_TARGET, TARGETS


def register(subparsers) -> None:
    p = subparsers.add_parser("lint", help="preflight an ONNX graph for the RKNN compiler "
                                           "(crashing patterns, dynamic dims, CPU ops, fp16 range)")
    p.add_argument("onnx", metavar="MODEL.onnx")
    p.add_argument("--target", default=DEFAULT_TARGET, choices=TARGETS)
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.add_argument("--sample-input-check", action="store_true",
                   help="run onnxruntime on a sample input and flag activations beyond fp16 range")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rkspeech.contracts.read import check_onnx_file
    from rkspeech.lint.checker import lint_model

    check_onnx_file(args.onnx)
    report = lint_model(args.onnx, target=args.target, sample_input_check=args.sample_input_check)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        for f in report.findings:
            where = f" [{f.op_type} {f.node}]" if f.node else ""
            print(f"{f.severity.upper():<7} {f.rule:<26} {f.message}{where}")
        print(f"{len(report.errors)} errors, {len(report.warnings)} warnings "
              f"({args.onnx}, {args.target}{', fp16 range checked' if report.checked_fp16 else ''})")
    return 1 if report.errors else 0
