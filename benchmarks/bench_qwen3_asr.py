"""Qwen3-ASR: ``transcribe --plan`` vs the official qwen-asr on the host CPU (issue 53, deliver 5; a
benchmark, not a test).

One run, one synthetic root (``--config``; seed 0), the same audio (a tone over noise of each
``--seconds``), greedy with ``--max-new-tokens`` (random weights never stop, so every side
generates exactly that many tokens), these sides, each in its own child process (its own peak RSS):

* ``official``: ``Qwen3ASRModel.from_pretrained(root)`` (transformers, torch fp32) ``.transcribe``;
* ``fp32`` / ``int4``: ``ASRTranscriber`` over a plan built with ``--decoder cpu-fp32`` / ``cpu-int4``
  (the encoder window graphs on onnxruntime in fp32: the NPU's work done by the host CPU here).

Per side and length: seconds per transcription (median of ``--repeats`` after one untimed warm-up),
the real-time factor, the ratio to the official, whether the text equals the official's, and the
child's peak RSS (``VmHWM``).  Load average before and after each side.  Nothing here says how fast
a board is (``rkspeech estimate``).

    .venv/bin/python benchmarks/bench_qwen3_asr.py --config reduced --seconds 3,10 --repeats 3 --json R.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDES = ("official", "fp32", "int4")
DECODERS = {"fp32": "cpu-fp32", "int4": "cpu-int4"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def audio(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    rng = np.random.default_rng(0)
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_side(side: str, work: Path, args) -> dict:
    """In the child: load the side, warm up, time each length; JSON-able."""
    if side == "official":
        from tests.asr_reference import official_asr

        model = official_asr(work / "root")
        model.max_new_tokens = args.max_new_tokens

        def transcribe(wave):
            r = model.transcribe((wave, 16000))[0]
            return r.text
    else:
        from rkspeech.core.threads import default_threads
        from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

        asr = ASRTranscriber(work / f"plan-{side}" / "plan.json", backend="ort", threads=default_threads())

        def transcribe(wave):
            return asr.transcribe(wave, max_new_tokens=args.max_new_tokens).text
    rows = {}
    for s in args.seconds:
        wave = audio(s)
        text = transcribe(wave)  # warm-up (and the text compared)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            transcribe(wave)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows[str(s)] = {"seconds": med, "rtf": med / s, "text": text, "all": times}
    return {"side": side, "lengths": rows, "peak_rss_mb": peak_rss_mb()}


def prepare(work: Path, args) -> None:
    from rkspeech.models.qwen3_asr.synthetic_asr import write_asr_checkpoint
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    if not (work / "root" / "config.json").is_file():
        log(f"writing the {args.config} root")
        write_asr_checkpoint(work / "root", args.config, seed=0)
    for side, decoder in DECODERS.items():
        if side in args.sides and not (work / f"plan-{side}" / "plan.json").is_file():
            log(f"building plan-{side} ({decoder}, encoder on the CPU)")
            build_qwen3_asr(ASRBuildOptions(model_dir=str(work / "root"), out_dir=str(work / f"plan-{side}"),
                                            encoder="cpu-fp32", decoder=decoder))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="reduced", choices=("reduced", "published", "published-1.7b"))
    ap.add_argument("--work", default=None, help="folder for the root and plans (default out/bench-qwen3-asr-CONFIG)")
    ap.add_argument("--seconds", default="3,10", help="audio lengths, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.seconds = [float(x) for x in args.seconds.split(",") if x]
    args.sides = [s for s in args.sides.split(",") if s]
    work = Path(args.work or ROOT / "out" / f"bench-qwen3-asr-{args.config}")
    if args.side:
        Path(args.child_out).write_text(json.dumps(run_side(args.side, work, args)))
        return 0
    work.mkdir(parents=True, exist_ok=True)
    prepare(work, args)
    report = {"config": args.config, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
              "cpus": os.cpu_count(), "sides": {}}
    for side in args.sides:
        out = work / f"result-{side}.json"
        load0 = os.getloadavg()
        log(f"side {side} (load {load0[0]:.2f})")
        cmd = [sys.executable, __file__, "--side", side, "--child-out", str(out), "--config", args.config,
               "--work", str(work), "--seconds", ",".join(str(s) for s in args.seconds),
               "--max-new-tokens", str(args.max_new_tokens), "--repeats", str(args.repeats)]
        subprocess.run(cmd, check=True)
        rep = json.loads(out.read_text())
        rep["load"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
        report["sides"][side] = rep
    ref = report["sides"].get("official")
    print(f"Qwen3-ASR {args.config}, {args.max_new_tokens} new tokens, median of {args.repeats}")
    print("| side | audio s | s per transcription | real-time factor | vs official | text = official | peak RSS MB | load |")
    print("|---|---|---|---|---|---|---|---|")
    for side, rep in report["sides"].items():
        for s, row in rep["lengths"].items():
            base = ref["lengths"][s] if ref else None
            ratio = f"{base['seconds'] / row['seconds']:.2f}x faster" if base else "-"
            same = (row["text"] == base["text"]) if base else "-"
            print(f"| {side} | {s} | {row['seconds']:.3f} | {row['rtf']:.3f} | {ratio} | {same} | "
                  f"{rep['peak_rss_mb']:.0f} | {rep['load'][0]} -> {rep['load'][1]} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
