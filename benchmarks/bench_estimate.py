"""Estimated board step time per formulation and B, from the compiler's layer tables
(``rkspeech estimate``), plus where the npu formulation's traffic goes and what cutting it would
give (issue #16, parts 1/3/4).

    .venv/bin/python benchmarks/bench_estimate.py --rknn OUT/rknn/vocoder_npu_step_B16_rk3588.rknn \\
        [--rknn more.rknn ...] [--board-factor 8] [--out bench_estimate.json]

Every .rknn needs its build log beside it (``FILE.rknn.build.log``, written by ``rkspeech convert``
/ ``build``).  Rows for graphs whose log is not on this machine come from figures recorded in
``docs/npu-formulation.md`` (RW column summed, conv cycles summed): only bounds can be given for
them (see ``recorded_rows``).  ``--board-factor K`` adds a second set of estimates with the NPU's
compute and DDR rates both divided by K (every NPU layer K times slower: the Whisper calibration in
docs/estimate.md; CPU layers unchanged).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Published-size rk3588 fp16 figures recorded in docs/npu-formulation.md (2026-11-29; the logs
#: are not kept).  rw_mb = the RW(KB) column summed (reads only), conv_mcycles = Total cycles summed.
RECORDED = [
    {"formulation": "reference", "B": 16, "conv_mcycles": 125.3, "rw_mb": 1261.0, "rw_mb_cpu": 121.0,
     "cpu_ops": 69, "regtask_lines": 931920, "sim_db": 47.3, "source": "docs/npu-formulation.md table"},
    {"formulation": "npu", "B": 64, "conv_mcycles": 421.7, "rw_mb": 16846.0, "rw_mb_cpu": 0.0,
     "cpu_ops": 0, "regtask_lines": 0, "sim_db": 47.1, "source": "docs/npu-formulation.md table"},
    {"formulation": "reference", "B": 64, "conv_mcycles": None, "rw_mb": None, "rw_mb_cpu": None,
     "cpu_ops": 69, "regtask_lines": 3928400, "sim_db": 47.3, "source": "docs/npu-formulation.md (no cycles / RW)"},
]
SIM_DB = {("npu", 16): 47.3, ("reference", 16): 47.3, ("npu", 64): 47.1, ("reference", 64): 47.3}
SNAKE = re.compile(r":/s(\d+)/")


def measured_row(est, factor: float | None) -> dict:
    from rkspeech.estimate.steptime import with_assumptions

    rep = est.to_report()
    row = {"source": rep["source"], "model": rep["model"], "audio_s": rep["audio_s"],
           "npu_mcycles": round(rep["npu_cycles"] / 1e6, 1), "ddr_mcycles": round(rep["ddr_cycles"] / 1e6, 1),
           "total_mcycles": round(rep["total_cycles"] / 1e6, 1), "rw_mb": rep["rw_mb"],
           "traffic_mb": rep["traffic_mb"], "traffic_mb_per_audio_s": rep.get("traffic_mb_per_audio_s"),
           "est_step_ms": rep["est_step_ms"], "est_step_ms_by_cores": rep["est_step_ms_by_cores"],
           "rtf_by_cores": rep.get("rtf_by_cores"), "cpu_ops": rep["cpu_ops"],
           "regtask_lines": rep["regtask_lines"], "compiler_ddr_gbps": rep["assumptions"]["compiler_ddr_gbps"]}
    if factor:
        a = est.assumptions
        cal = with_assumptions(est, npu_efficiency=a.npu_efficiency / factor, ddr_gbps=a.ddr_gbps / factor).to_report()
        row["calibrated"] = {"board_factor": factor, "est_step_ms": cal["est_step_ms"],
                             "est_step_ms_by_cores": cal["est_step_ms_by_cores"],
                             "rtf_by_cores": cal.get("rtf_by_cores")}
    return row


def recorded_rows(assumptions, write_ratio: dict, factor: float | None) -> list[dict]:
    """Bounds from recorded totals: conv cycles C at the clock, traffic T = RW x (1 + writes/reads,
    taken from a measured log of the same formulation, else 1) at the bandwidth:
    est >= max(C, T) (all overlapped) and est <= C + T (nothing overlapped)."""
    out = []
    for r in RECORDED:
        row = dict(r)
        audio = r["B"] * 1920 / 24000
        row["audio_s"] = audio
        if r["conv_mcycles"] is None:
            row["note"] = "no cycles / RW recorded and no log here: not estimated"
            out.append(row)
            continue
        ratio = write_ratio.get(r["formulation"], 1.0)
        for tag, k in (("ideal", 1.0), ("calibrated", factor)):
            if not k:
                continue
            c = k * r["conv_mcycles"] * 1e6 / (assumptions.npu_mhz * 1e6) * 1e3
            npu_rw = (r["rw_mb"] - r["rw_mb_cpu"]) * (1 + ratio)
            t = k * npu_rw * 2 ** 20 / (assumptions.ddr_gbps * 1e9) * 1e3
            cpu = r["rw_mb_cpu"] * 2 * 2 ** 20 / (assumptions.cpu_gbps * 1e9) * 1e3
            lo, hi = max(c, t) + cpu, c + t + cpu
            row[tag] = {"est_step_ms_range": [round(lo, 1), round(hi, 1)],
                        "rtf_one_core_range": [round(lo / (audio * 1e3), 3), round(hi / (audio * 1e3), 3)]}
        row["write_ratio_assumed"] = ratio
        row["traffic_mb"] = round(r["rw_mb"] * (1 + ratio), 0)
        row["traffic_mb_per_audio_s"] = round(row["traffic_mb"] / audio, 0)
        out.append(row)
    return out


# ---- part 3: where the npu formulation's traffic goes ----------------------------------------

def part_of(r: dict) -> str:
    if r["class"] == "cpu":
        return "CPU ops"
    if SNAKE.search(r["full_name"]):
        return "Snake polynomial (/sN/ ops)"
    if r["class"] in ("conv", "matmul"):
        return "conv / matmul"
    if r["class"] == "data movement":
        return "data movement (tails, rows, folds, concat)"
    return "other elementwise (residual adds, norms, RoPE, codebook)"


def breakdown(est) -> dict:
    parts: dict[str, dict] = {}
    for r in est.layers:
        p = parts.setdefault(part_of(r), {"layers": 0, "traffic_mb": 0.0, "est_ms": 0.0})
        p["layers"] += 1
        p["traffic_mb"] += (r["rw_kb"] + r["write_kb"]) / 1024
        p["est_ms"] += r["est_ms"]
    snakes: dict[str, list] = {}
    for r in est.layers:
        m = SNAKE.search(r["full_name"])
        if m:
            snakes.setdefault(m.group(1), []).append(r)
    per_snake = [len(v) for v in snakes.values()]
    ops: dict[str, int] = {}
    for v in snakes.values():
        for r in v:
            ops[r["op_type"]] = ops.get(r["op_type"], 0) + 1
    total = est.est_step_ms
    return {"parts": {k: {**v, "traffic_mb": round(v["traffic_mb"], 1), "est_ms": round(v["est_ms"], 2),
                          "share": round(v["est_ms"] / total, 3)} for k, v in parts.items()},
            "snakes": len(snakes), "layers_per_snake": [min(per_snake or [0]), max(per_snake or [0])],
            "snake_op_types": ops}


def _reprice(est, rows):
    from dataclasses import replace

    from rkspeech.estimate.steptime import _layer_ms

    out = replace(est, layers=[dict(r) for r in rows])
    for r in out.layers:
        c, t, total = _layer_ms(r, out.assumptions)
        r.update(compute_ms=c, traffic_ms=t, est_ms=total)
    return out


#: Cuts of the Snake polynomial, in activation-sized transfers ("A": one read or one write of the
#: Snake's fp16 activation) per Snake: a unary pass moves 2A (read, write), a binary one 3A.
SNAKE_CUTS = {
    "degree 4 polynomial (-1 Horner step: Mul, Add)": 5,
    "one reflection fewer (-Clip, Mul, Sub; margin x2 not x4)": 7,
    "scale / gain folded into the neighbouring convs (-2 Mul)": 4,
    "all three above": 16,
    "fused Snake (one read, one write: the floor)": None,
}


def scenario(est, name: str, cut_a: int | None = None) -> dict:
    """Re-price the step with the Snakes' (or the data movement's) traffic cut; compute unchanged."""
    rows = [dict(r) for r in est.layers]
    groups: dict[str, list] = {}
    for r in rows:
        m = SNAKE.search(r["full_name"])
        if m:
            groups.setdefault(m.group(1), []).append(r)
    if name == "data movement halved":
        for r in rows:
            if r["class"] == "data movement":
                r["rw_kb"] /= 2
                r["write_kb"] /= 2
    else:
        for g in groups.values():
            act = max(r["write_kb"] for r in g)  # A, KB
            now = sum(r["rw_kb"] + r["write_kb"] for r in g)
            target = 2 * act if cut_a is None else max(2 * act, now - cut_a * act)
            f = target / now if now else 1.0
            for r in g:
                r["rw_kb"] *= f
                r["write_kb"] *= f
    new = _reprice(est, rows).to_report()
    return {"name": name, "traffic_mb": new["traffic_mb"], "traffic_mb_per_audio_s": new.get("traffic_mb_per_audio_s"),
            "est_step_ms": new["est_step_ms"], "rtf_by_cores": new.get("rtf_by_cores")}


def scenarios(est) -> list[dict]:
    out = [scenario(est, n, a) for n, a in SNAKE_CUTS.items()]
    out.append(scenario(est, "data movement halved"))
    return out


def snake_units(est) -> list[float]:
    """Each Snake's traffic in A (activation transfers)."""
    groups: dict[str, list] = {}
    for r in est.layers:
        m = SNAKE.search(r["full_name"])
        if m:
            groups.setdefault(m.group(1), []).append(r)
    return sorted(round(sum(r["rw_kb"] + r["write_kb"] for r in g) / max(r["write_kb"] for r in g), 1)
                  for g in groups.values())


def _load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _fmt_range(d: dict | None, key: str) -> str:
    return "-" if not d else f"{d[key][0]:g}-{d[key][1]:g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rknn", action="append", default=[], help="[LABEL=].rknn (or build log); repeat")
    ap.add_argument("--board-factor", type=float, default=None,
                    help="also estimate with every NPU layer this many times slower (calibration)")
    ap.add_argument("--ddr-gbps", type=float, default=17.0)
    ap.add_argument("--npu-mhz", type=float, default=1000.0)
    ap.add_argument("--out", default=None, help="JSON report")
    args = ap.parse_args(argv)

    from rkspeech.estimate.steptime import Assumptions, estimate_path

    a = Assumptions(npu_mhz=args.npu_mhz, ddr_gbps=args.ddr_gbps)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report: dict = {"date": started, "uptime": _load(), "assumptions": a.describe(), "measured": [],
                    "recorded": [], "part3": []}
    write_ratio: dict = {}
    for item in args.rknn:
        label, _, path = item.rpartition("=") if "=" in item else ("", "", item)
        est = estimate_path(path, a)
        if label:
            est.model = f"{label}: {est.model}"
        row = measured_row(est, args.board_factor)
        report["measured"].append(row)
        form = "npu" if "(npu" in est.model else "reference" if "(reference" in est.model else None
        if form and est.rw_mb:
            write_ratio.setdefault(form, round((est.traffic_mb - est.rw_mb) / est.rw_mb, 3))
        if form == "npu":
            report["part3"].append({"model": est.model, "base": {"traffic_mb": row["traffic_mb"],
                                                                 "est_step_ms": row["est_step_ms"],
                                                                 "traffic_mb_per_audio_s": row["traffic_mb_per_audio_s"]},
                                    "breakdown": breakdown(est),
                                    "blocks": [{k: g[k] for k in ("name", "layers", "traffic_mb", "est_ms", "share")}
                                               for g in est.to_report()["blocks"]],
                                    "snake_units_A": snake_units(est),
                                    "scenarios": scenarios(est)})
    report["recorded"] = recorded_rows(a, write_ratio, args.board_factor)
    report["write_ratio"] = write_ratio

    print(f"# bench_estimate {started}; {report['uptime']}")
    print("| graph | NPU Mcycles | DDR Mcycles | RW MB (reads) | traffic MB (r+w) | MB / audio s | est. ms | "
          "RTF 1 core | RTF 3 cores | CPU ops | REGTASK |" + (" cal. ms | cal. RTF 1 / 3 |" if args.board_factor else ""))
    print("|---" * (11 + (2 if args.board_factor else 0)) + "|")
    for r in report["measured"]:
        rtf = r["rtf_by_cores"] or {}
        line = (f"| {r['model']} | {r['npu_mcycles']} | {r['ddr_mcycles']} | {r['rw_mb']:,.0f} | {r['traffic_mb']:,.0f} | "
                f"{r['traffic_mb_per_audio_s'] or 0:,.0f} | {r['est_step_ms']:.1f} | {rtf.get(1, '-')} | {rtf.get(3, '-')} | "
                f"{r['cpu_ops']} | {r['regtask_lines']:,} |")
        if args.board_factor:
            c = r["calibrated"]
            crtf = c["rtf_by_cores"] or {}
            line += f" {c['est_step_ms']:.0f} | {crtf.get(1, '-')} / {crtf.get(3, '-')} |"
        print(line)
    for r in report["recorded"]:
        print(f"| {r['formulation']} B={r['B']} (recorded totals) | conv {r['conv_mcycles'] or '-'} (Total) | - | "
              f"{r['rw_mb'] or '-'} | {r.get('traffic_mb', '-')} | {r.get('traffic_mb_per_audio_s', '-')} | "
              f"{_fmt_range(r.get('ideal'), 'est_step_ms_range')} | {_fmt_range(r.get('ideal'), 'rtf_one_core_range')} | "
              f"- | {r['cpu_ops']} | {r['regtask_lines']:,} |"
              + (f" {_fmt_range(r.get('calibrated'), 'est_step_ms_range')} | "
                 f"{_fmt_range(r.get('calibrated'), 'rtf_one_core_range')} / - |" if args.board_factor else ""))
    for p in report["part3"]:
        print(f"\n## where the traffic goes: {p['model']}")
        for k, v in sorted(p["breakdown"]["parts"].items(), key=lambda kv: -kv[1]["est_ms"]):
            print(f"  {k:<58} {v['layers']:>5} layers {v['traffic_mb']:>9,.1f} MB {v['est_ms']:>8.2f} ms "
                  f"{100 * v['share']:>5.1f} %")
        print(f"  Snakes: {p['breakdown']['snakes']}, {p['breakdown']['layers_per_snake']} layers each; "
              f"op types {p['breakdown']['snake_op_types']}")
        u = p["snake_units_A"]
        print(f"  traffic per Snake in activation transfers A: {u[0]}-{u[-1]} (median {u[len(u) // 2]})")
        for s in p["scenarios"]:
            rtf = (s["rtf_by_cores"] or {}).get(1)
            print(f"  {s['name']:<58} traffic {s['traffic_mb']:>9,.1f} MB "
                  f"({s['traffic_mb_per_audio_s'] or 0:,.0f} MB/audio s), est {s['est_step_ms']:.1f} ms, RTF 1 core {rtf}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
