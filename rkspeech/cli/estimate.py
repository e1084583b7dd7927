"""``rkspeech estimate FILE.rknn | BUILD_LOG``: board step time from the compiler's layer table."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "estimate", help="estimated board time per run / step from the build log's layer table "
                         "(cycles, traffic), per block, with the assumptions; no board needed")
    f = Flags(p, "estimate")
    f.add(INPUT, "path", metavar="FILE.rknn|BUILD_LOG", nargs="?",
          help="an .rknn (its FILE.rknn.build.log beside it is read) or a build log (or --plan)")
    f.add(OUTPUT, "--report", writes="file", metavar="R.json", help="write the JSON report (every layer) here")
    f.add(OUTPUT, "--json", action="store_true", help="print the JSON report (without layers) on stdout")
    f.add(OUTPUT, "--top", writes=None, type=int, default=8, help="op types to list (default 8)")
    f.add(NPU, "--npu-mhz", type=float, default=1000.0, help="NPU clock (default 1000: RK3588)")
    f.add(NPU, "--ddr-gbps", type=float, default=17.0,
          help="DDR bandwidth the NPU gets, shared by its cores (default 17)")
    f.add(NPU, "--cores", type=int, default=3, help="estimate for 1..N NPU cores (default 3)")
    f.add(NPU, "--npu-efficiency", type=float, default=1.0,
          help="share of the compiler's ideal MAC rate a board reaches (default 1 = ideal; "
               "docs/estimate.md calibrates it)")
    f.add(ADVANCED, "--overlap", choices=("max", "sum"), default="max",
          help="compute and traffic of a layer overlap (max, as the compiler) or add up (sum)")
    f.add(ADVANCED, "--cpu-gbps", type=float, default=1.0, help="speed of CPU-fallback layers (default 1)")
    f.add(ADVANCED, "--layer-us", type=float, default=0.0, help="fixed cost per layer, us (default 0)")
    from rkspeech.cli import estimate_plan

    estimate_plan.add_arguments(f)
    p.set_defaults(func=run)


def _ms(v: float) -> str:
    return f"{v:,.1f} ms" if v >= 1 else f"{v:,.3f} ms"


def rows_for(rep: dict) -> list[tuple[str, str]]:
    """The result rows (also used by ``build``'s summary)."""
    rows = [("est. time per run", _ms(rep["est_step_ms"]) +
             f"  (compute {rep['compute_ms']:,.1f} ms, traffic {rep['traffic_ms']:,.1f} ms if alone)")]
    if rep.get("audio_s"):
        rows.append(("audio per run", f"{rep['audio_s']:g} s ({rep['audio_note']})"))
        rtf = ", ".join(f"{n} core{'s' if n > 1 else ''} {v:.3f}" for n, v in rep["rtf_by_cores"].items())
        rows.append(("realtime factor (time / audio)", rtf))
        need = rep.get("cores_for_realtime")
        rows.append(("cores for real time", str(need) if need else rep.get("cores_note", "-")))
    return rows


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rkspeech.core.atomic import write_json
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.estimate.steptime import Assumptions, estimate_path

    if args.plan is not None or args.path is None:
        if args.path is not None or args.plan is None:
            raise RkspeechError("pass one .rknn / build log, or --plan plan.json (not both, not neither)")
        from rkspeech.cli import estimate_plan

        return estimate_plan.run(args)
    if args.report:
        from rkspeech.core.atomic import check_writable

        check_writable(args.report, what="report")
    if args.top < 0:
        raise RkspeechError(f"--top must be >= 0, got {args.top}")
    a = Assumptions(npu_mhz=args.npu_mhz, ddr_gbps=args.ddr_gbps, overlap=args.overlap, cores=args.cores,
                    npu_efficiency=args.npu_efficiency, cpu_gbps=args.cpu_gbps, layer_us=args.layer_us)
    rep = estimate_path(args.path, a).to_report()
    if args.report:
        write_json(args.report, rep)
    if args.json:
        print(json.dumps({k: v for k, v in rep.items() if k != "layers"}, indent=1))
        return 0
    print_table("assumptions (no board here: these decide the numbers below)",
                [tuple(n.split(": ", 1)) for n in rep["assumptions"]["notes"]]
                + [("compiler's own DDR figure", (f"{rep['assumptions']['compiler_ddr_gbps']} GB/s "
                                                 "(its conv rows' reads + writes / DDR cycles, at this clock)"))])
    head = [("log", rep["source"]), ("model", rep["model"]),
            ("layers", (f"{rep['layers_compute']} compute ({rep['cpu_ops']} on the CPU), "
                       f"{rep['regtask_lines']:,} REGTASK lines")),
            ("compiler cycles", f"NPU {rep['npu_cycles']:,}, DDR {rep['ddr_cycles']:,} (conv-family rows only)"),
            ("planned traffic", f"{rep['traffic_mb']:,.1f} MB = {rep['rw_mb']:,.1f} read (the RW column) + "
                                f"{rep['write_mb']:,.1f} written (outputs)"
             + (f"; {rep['traffic_mb_per_audio_s']:,.0f} MB per audio second" if rep.get("audio_s") else ""))]
    print_table("estimate", head + rows_for(rep))
    total = rep["est_step_ms"] or 1.0
    blocks = [(g["name"], str(g["layers"]), f"{g['traffic_mb']:,.1f}", _ms(g["est_ms"]),
               f"{100 * g['est_ms'] / total:.0f} %") for g in rep["blocks"]]
    print_table("per block", blocks, headers=("block", "layers", "traffic MB", "est.", "share"))
    classes = [(g["name"], str(g["layers"]), f"{g['traffic_mb']:,.1f}", _ms(g["est_ms"]),
                f"{100 * g['est_ms'] / total:.0f} %") for g in rep["classes"]]
    print_table("per layer class", classes, headers=("class", "layers", "traffic MB", "est.", "share"))
    if args.top:
        ops = [(g["name"], str(g["layers"]), f"{g['traffic_mb']:,.1f}", _ms(g["est_ms"]))
               for g in rep["op_types"][: args.top]]
        print_table("op types (most time first)", ops, headers=("op type", "layers", "traffic MB", "est."))
    for n in rep["notes"]:
        print(f"note: {n}", file=sys.stderr)
    return 0
