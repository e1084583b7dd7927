"""Seed vs NPU step formulation on one checkpoint / B / target: what the conversion costs and where
the ops run.

For each formulation: torch and onnxruntime stepwise SNR against the full decode, conversion
time, peak RSS of the converter child, .rknn size, NPU / CPU op counts (CPU op types), REGTASK
overflow lines, and optionally (``--sim``) the rknn-toolkit2 simulator's stepwise SNR, which
builds the graph a second time in-process.  Prints a table and writes JSON.

    .venv/bin/python benchmarks/bench_formulations.py --synthetic reduced --B 16 --target rk3588 \\
        --out bench_formulations.json [--sim] [--formulations seed,npu] [--disable snake,rope]

Formulations: ``seed`` (the reference graph), ``npu`` (its default Snake), ``npu-phase`` /
``npu-reflect`` (the npu graph with that Snake form,
``step_npu.SNAKE_FORMS``), optionally ``@DEGREE`` (``npu-phase@3``).  Each converted
graph is also priced by ``rkspeech.estimate`` (planned traffic reads + writes, ideal step time,
MB per audio second, realtime factor on one core at the default assumptions).

The reduced size converts in minutes, < 2 GB; the published size (``--synthetic published``)
needs 3-4 GB per npu conversion at B=16 and ~10 minutes each: run it under the heavy-job lock.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_one(model, cfg, formulation: str, B: int, targets: list[str], work: Path, sim: bool,
            disable: tuple[str, ...], memory_limit_mb: float, tails: str = "time_major",
            timeout: float | None = None) -> dict:
    from rkspeech.export.vocoder_onnx import export_step_onnx, graph_summary
    from rkspeech.convert.conversion import convert
    from rkspeech.estimate.steptime import estimate_path
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
    from rkspeech.runtime.runners.sim_process import SimulatorProcess
    from rkspeech.runtime.tts.streaming import Engine
    from rkspeech.stepgraph.step_npu import make_step
    from rkspeech.runtime.runners.torch_step import TorchStepRunner
    from rkspeech.verify.stepwise import check_tokens, full_decode, random_codes, stepwise_check

    base, _, form = formulation.partition("-")
    kw = {"disable": disable, "tails": tails} if base == "npu" else {}
    form, _, degree = form.partition("@")
    if form:
        kw["snake_form"] = form
    if degree:
        kw["sin2_degree"] = int(degree)
    t0 = time.perf_counter()
    step = make_step(model, B, base, **kw)
    row: dict = {"formulation": formulation, "B": B, "disable": list(disable),
                 "tails": tails if base == "npu" else "channel",
                 "step_build_s": round(time.perf_counter() - t0, 2)}
    codes = random_codes(check_tokens(B, None), cfg.num_quantizers, cfg.codebook_size, seed=0)
    ref = full_decode(model, codes)
    row["torch_snr_db"] = round(stepwise_check(ref, codes, Engine(TorchStepRunner(step), step.contract)).snr_db, 2)
    onnx_path = work / f"{formulation}_B{B}.onnx"
    export_step_onnx(step, onnx_path)
    summary = graph_summary(onnx_path)
    row["onnx_nodes"] = summary["nodes"]
    with OnnxRuntimeRunner(onnx_path, threads=2) as rt:
        row["ort_snr_db"] = round(stepwise_check(ref, codes, Engine(rt, step.contract)).snr_db, 2)
    row["targets"] = {}
    for target in targets:
        res = convert(onnx_path, work / f"{formulation}_B{B}_{target}.rknn", target=target,
                      custom_string=step.contract.to_json(), memory_limit_mb=memory_limit_mb, timeout=timeout, show_progress=False)
        rep = res.to_report()
        t = {
            "convert_s": rep["build"]["seconds"],
            "peak_rss_mb": rep["build"]["peak_rss_mb"],
            "rknn_bytes": rep["rknn"]["bytes"],
            "npu_ops": rep["placement"]["npu_ops"],
            "cpu_ops": rep["placement"]["cpu_ops"],
            "cpu_op_types": rep["placement"]["cpu_op_types"],
            "regtask_lines": rep["build"]["regtask_overflow_lines"],
            "conv_cycles_est": rep["placement"]["estimate"]["cycles_total"],
            "rw_mb_est": rep["placement"]["estimate"]["rw_mb_total"],
        }
        est = estimate_path(res.rknn_path).to_report()
        t.update(traffic_mb=round(est["traffic_mb"], 1), est_step_ms=round(est["est_step_ms"], 1),
                 audio_s=est.get("audio_s"), rtf_1core=est.get("rtf_one_core"))
        if est.get("audio_s"):
            t["traffic_mb_per_audio_s"] = round(est["traffic_mb"] / est["audio_s"], 1)
        if sim:
            with SimulatorProcess(onnx_path, target=target, dtype="fp16") as rt:
                t["sim_snr_db"] = round(stepwise_check(ref, codes, Engine(rt, step.contract)).snr_db, 2)
                t["sim_peak_rss_mb"] = round(rt.peak_rss_mb, 1)
        row["targets"][target] = t
    return row


def table(rows: list[dict]) -> str:
    head = f"{'formulation':12s} {'target':7s} {'ort dB':>7s} {'sim dB':>7s} {'conv s':>7s} {'RSS MB':>7s} " \
           f"{'rknn MB':>8s} {'NPU':>5s} {'CPU':>5s} {'REGTASK':>8s} {'Mcycles':>8s} {'RW MB':>7s} {'r+w MB':>7s} " \
           f"{'MB/aud s':>8s} {'est ms':>7s} {'RTF 1c':>6s}  CPU op types"
    lines = [head, "-" * len(head)]
    for r in rows:
        name = r["formulation"] + ("/no-" + "-".join(r["disable"]) if r["disable"] else "")
        for tgt, t in r["targets"].items():
            lines.append(
                f"{name:12s} {tgt:7s} {r['ort_snr_db']:7.1f} {t.get('sim_snr_db', float('nan')):7.1f} "
                f"{t['convert_s']:7.1f} {t['peak_rss_mb'] or 0:7.0f} {t['rknn_bytes'] / 2**20:8.2f} "
                f"{t['npu_ops']:5d} {t['cpu_ops']:5d} {t['regtask_lines']:8d} {t['conv_cycles_est'] / 1e6:8.2f} "
                f"{t['rw_mb_est']:7.1f} {t['traffic_mb']:7.1f} {t.get('traffic_mb_per_audio_s', float('nan')):8.1f} "
                f"{t['est_step_ms']:7.1f} {t.get('rtf_1core') or float('nan'):6.3f}  {t['cpu_op_types']}")
    return "\n".join(lines)


def _write(report: dict, out: str) -> None:
    tmp_out = Path(out).with_name(f".{Path(out).name}.tmp")
    tmp_out.write_text(json.dumps(report, indent=1))
    os.replace(tmp_out, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="checkpoint folder (speech_tokenizer layout)")
    src.add_argument("--synthetic", choices=["reduced", "published"], help="write a synthetic checkpoint first")
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--target", action="append", help="rk3588 (default), rk3576, rk3566, ...; repeatable")
    ap.add_argument("--formulations", default="seed,npu")
    ap.add_argument("--disable", default="", help="npu parts to switch off (ablation), comma-separated")
    ap.add_argument("--tails", choices=["channel", "time_major"], default="time_major",
                    help="npu cache-tail layout (time_major: see docs/npu-formulation.md)")
    ap.add_argument("--timeout", type=float, default=1200, help="per conversion, seconds")
    ap.add_argument("--sim", action="store_true", help="also run the simulator stepwise check")
    ap.add_argument("--memory-limit-mb", type=float, default=5000)
    ap.add_argument("--out", default="bench_formulations.json")
    ap.add_argument("--keep", help="keep the ONNX / .rknn / build logs in this folder (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(2)
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder

    with tempfile.TemporaryDirectory(prefix="bench_form_") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        ckpt = args.checkpoint
        if args.synthetic:
            from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

            ckpt = work / "ckpt"
            ckpt.mkdir(exist_ok=True)
            write_checkpoint(ckpt, args.synthetic, seed=0)
        model, cfg, _ = load_vocoder(ckpt)
        disable = tuple(x for x in args.disable.split(",") if x)
        rows: list[dict] = []
        report = {"date": datetime.date.today().isoformat(), "checkpoint": str(args.checkpoint or args.synthetic),
                  "B": args.B, "host_cpus": os.cpu_count(), "rows": rows}
        for f in args.formulations.split(","):
            try:
                rows.append(run_one(model, cfg, f, args.B, args.target or ["rk3588"], work, args.sim, disable,
                                    args.memory_limit_mb, args.tails, args.timeout))
            except RkspeechError as e:  # one formulation's failure (e.g. memory) keeps the others
                report.setdefault("failed", {})[f] = str(e)
                print(f"{f}: {e}", file=sys.stderr)
            _write(report, args.out)  # after every row: a later failure keeps the measured ones
    print(table(rows))
    for f, e in report.get("failed", {}).items():
        print(f"{f}: FAILED: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
