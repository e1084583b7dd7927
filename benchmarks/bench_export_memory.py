"""Memory of a step graph's export: ours (``export.weights``: the weights stay out of torch's
exporter and are written one by one) vs torch's exporter given the weights, as rkspeech exported
until issue 54 (``do_constant_folding=True``, the proto loaded back to edit and saved); a
benchmark, not a test.

One Qwen3-TTS root (``--model-dir``, any size), its talker's CPU decode graph (``pipelines.cpu_stages``'
export: grouped k/v, per-layer cache inputs) at ``--capacity``.  Each side in its own child process:
the model is loaded (fp32), then exported; per side the RSS after the load (and the load's own
peak), the export's peak RSS (``VmHWM`` reset after the load through ``/proc/self/clear_refs``)
and what the export added to the loaded model, the seconds, the graph's bytes.  Both graphs are run on
the same inputs by onnxruntime and compared (max abs difference: 0 expected).

    .venv/bin/python benchmarks/bench_export_memory.py --model-dir ROOT [--json R.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDES = ("torch", "ours")


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def torch_export(step, path: Path) -> None:
    """The reference: torch's exporter holds the weights, folds them, and the proto is edited."""
    import warnings

    import onnx
    import torch

    from rkspeech.contracts.base import CONTRACT_KEY
    from rkspeech.export.opset import OPSET

    c = step.contract()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(step, step.dummy_inputs(), str(path), input_names=c.input_names,
                          output_names=c.output_names, opset_version=OPSET, do_constant_folding=True, dynamo=False)
    model = onnx.load(str(path))  # over 2 GiB this fails: the reference covers the 0.6B graphs only
    meta = model.metadata_props.add()
    meta.key, meta.value = CONTRACT_KEY, c.to_json()
    onnx.save(model, str(path))


def child(side: str, model_dir: str, capacity: int, out: Path) -> dict:
    from rkspeech.models.qwen3_tts.tts_checkpoint import load_tts_net, read_tts_config, resolve_model_root
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    files = resolve_model_root(model_dir)
    net = load_tts_net(files, read_tts_config(files))
    step = TalkerStep(net.talker.model, capacity=capacity, B=1, **CPU_EXPORT).eval()
    loaded, load_peak = rss_mb("VmRSS"), rss_mb("VmHWM")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS: the export's own peak
    out.mkdir(parents=True, exist_ok=True)
    path = out / "decode.onnx"
    t0 = time.perf_counter()
    if side == "torch":
        torch_export(step, path)
    else:
        from rkspeech.export.talker_onnx import export_talker_onnx

        export_talker_onnx(step, path)
    seconds = time.perf_counter() - t0
    peak = rss_mb("VmHWM")
    size = sum(p.stat().st_size for p in out.iterdir())
    return {"side": side, "loaded_mb": round(loaded), "load_peak_mb": round(load_peak), "export_peak_mb": round(peak),
            "export_added_mb": round(peak - loaded),
            "seconds": round(seconds, 1), "graph_bytes": size, "path": str(path)}


def compare(paths: dict, capacity: int, model_dir: str) -> float:
    import numpy as np
    import onnxruntime as ort

    from rkspeech.models.qwen3_tts.tts_checkpoint import load_tts_net, read_tts_config, resolve_model_root
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    files = resolve_model_root(model_dir)
    step = TalkerStep(load_tts_net(files, read_tts_config(files)).talker.model, capacity=capacity, B=1, **CPU_EXPORT)
    feeds = {n: t.numpy() for n, t in zip(step.contract().input_names, step.dummy_inputs(start=3))}
    del step
    outs = []
    for side in SIDES:
        sess = ort.InferenceSession(paths[side], providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, feeds))
        del sess
    return max(float(np.abs(a - b).max()) for a, b in zip(*outs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--capacity", type=int, default=256)
    ap.add_argument("--work", default="bench-export-memory")
    ap.add_argument("--json")
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.work)
    if args.child:
        print(json.dumps(child(args.child, args.model_dir, args.capacity, work / args.child)))
        return 0
    rows = {}
    for side in SIDES:
        load = os.getloadavg()[0]
        proc = subprocess.run([sys.executable, __file__, "--model-dir", args.model_dir, "--capacity",
                               str(args.capacity), "--work", str(work), "--child", side],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        rows[side] = {**json.loads(proc.stdout.strip().splitlines()[-1]), "load_before": round(load, 2)}
        print(json.dumps(rows[side]))
    diff = compare({s: r["path"] for s, r in rows.items()}, args.capacity, args.model_dir)
    result = {"model_dir": args.model_dir, "capacity": args.capacity, "sides": rows, "max_abs_diff": diff,
              "export_added_ratio": round(rows["ours"]["export_added_mb"] / max(1, rows["torch"]["export_added_mb"]), 3),
              "peak_ratio": round(rows["ours"]["export_peak_mb"] / rows["torch"]["export_peak_mb"], 3)}
    print(f"export peak RSS ours {rows['ours']['export_peak_mb']} MB vs torch's exporter "
          f"{rows['torch']['export_peak_mb']} MB "
          f"({result['peak_ratio']}x); the export added {rows['ours']['export_added_mb']} vs "
          f"{rows['torch']['export_added_mb']} MB; graphs differ by {diff:g}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
