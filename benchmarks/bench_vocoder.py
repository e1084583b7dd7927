"""Benchmark: official full decode and chunked_decode vs our torch and onnxruntime steps.

One process, same codes, same threads: for each method, seconds of compute per second of
audio, the realtime factor (audio seconds per compute second) and the SNR against the official
full decode over the whole signal.  Medians over ``--repeats``; the load average is printed at
start and end because these machines are shared.

    .venv/bin/python benchmarks/bench_vocoder.py --config published --tokens 150 --threads 2

Needs the test extras (qwen-tts reference).  Writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="published", choices=("published", "reduced"))
    ap.add_argument("--model-dir", default=None, help="existing checkpoint (default: synthetic, written to a temp dir)")
    ap.add_argument("--tokens", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--B", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/official_reference.py
    from tests.official_reference import load_official_decoder
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
    from rkspeech.runtime.tts.streaming import Engine, StreamingVocoder
    from rkspeech.stepgraph.step import VocoderStep
    from rkspeech.runtime.runners.torch_step import TorchStepRunner
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.core.compare import json_number, snr_db
    from rkspeech.verify.stepwise import random_codes

    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="rkspeech-bench-"))
    model_dir = args.model_dir or write_checkpoint(work / "ckpt", args.config, seed=0).parent
    official = load_official_decoder(model_dir)
    ours, cfg, _ = load_vocoder(model_dir)
    codes = random_codes(args.tokens, cfg.num_quantizers, cfg.codebook_size, seed=0)
    codes_t = torch.from_numpy(np.ascontiguousarray(codes.T[None]))
    audio_s = args.tokens * cfg.samples_per_token / cfg.sample_rate

    def timed(fn):
        times, out = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), np.asarray(out, dtype=np.float32).reshape(-1)

    rows = []
    with torch.no_grad():
        t, reference = timed(lambda: official(codes_t).numpy())
    rows.append(("official full decode", t, reference))
    for chunk, ctx in ((25, 25), (300, 25)):
        with torch.no_grad():
            t, out = timed(lambda: official.chunked_decode(codes_t, chunk_size=chunk, left_context_size=ctx).numpy())
        rows.append((f"official chunked_decode({chunk}, {ctx})", t, out))
    for B in args.B:
        step = VocoderStep(ours, B)
        sv = StreamingVocoder(Engine(TorchStepRunner(step), step.contract))
        t, out = timed(lambda: sv.decode(codes))
        rows.append((f"ours: torch step B={B}", t, out))
        onnx_path = export_step_onnx(step, work / f"step_B{B}.onnx")
        with OnnxRuntimeRunner(onnx_path, threads=args.threads) as runner:
            sv = StreamingVocoder(Engine(runner, step.contract))
            t, out = timed(lambda: sv.decode(codes))
        rows.append((f"ours: onnxruntime step B={B}", t, out))
        onnx_path.unlink()
        del step
    load_end = os.getloadavg()

    results = []
    print(f"\n{args.config} synthetic checkpoint, {args.tokens} tokens = {audio_s:.1f} s audio, "
          f"{args.threads} threads, median of {args.repeats}; load average start {load_start[0]:.2f}, end {load_end[0]:.2f}")
    print(f"{'method':<36} {'s / audio s':>12} {'x realtime':>11} {'SNR vs full':>12}")
    for name, t, out in rows:
        snr = snr_db(reference, out) if out.size == reference.size else float("nan")
        results.append({"method": name, "seconds": t, "seconds_per_audio_second": t / audio_s,
                        "realtime_factor": audio_s / t, "snr_db_vs_full": json_number(snr, None)})
        print(f"{name:<36} {t / audio_s:>12.3f} {audio_s / t:>10.2f}x {snr:>10.1f} dB")
    by = {r["method"]: r for r in results}
    base = by["official chunked_decode(25, 25)"]["seconds"]
    for B in args.B:
        ours_t = by[f"ours: onnxruntime step B={B}"]["seconds"]
        print(f"onnxruntime step B={B} vs official chunked_decode(25, 25): {base / ours_t:.2f}x faster")
    if args.json:
        Path(args.json).write_text(json.dumps({"config": args.config, "tokens": args.tokens, "threads": args.threads,
                                               "repeats": args.repeats, "load_start": load_start, "load_end": load_end,
                                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                               "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
