"""Streaming runtime benchmark (not a test): realtime factor, time to first audio, host share.

On the published-size synthetic checkpoint (written to ``--workdir``, default
/tmp/rkspeech_bench), over onnxruntime:

* ``first B=4 + main B=64`` - StreamingVocoder with a small first step,
* ``main-only B=64``        - StreamingVocoder, one graph,
* ``official chunked``      - the official ``chunked_decode(chunk_size=64, left_context_size=25)``
                              (torch, stateless: re-decodes 25 context tokens per chunk).

Codes are all available at t=0 and pushed one step at a time.  Time to first audio (TTFA) is the
time until the first PCM comes back (for the official decoder: the end of its first chunk's
forward, recorded with a forward hook).  Realtime factor = decode time / audio time (< 1 is
faster than realtime).  Host share = time outside the engine call / step time, from
``StreamingVocoder.timings``, over all steps of a run.  Medians over ``--repeats``.  Load
average is recorded at start and end: the machine is shared, and other jobs slow every row.

Cost here (2 cores): exporting the published B=64 step takes ~1-2 min and ~3 GB.

    .venv/bin/python benchmarks/bench_streaming.py --threads 2 --json benchmarks/streaming.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def prepare(workdir: Path, main_B: int, first_B: int, threads: int, config: str = "published") -> dict[str, Path]:
    import torch

    torch.set_num_threads(threads)
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint
    from rkspeech.stepgraph.step import VocoderStep

    workdir.mkdir(parents=True, exist_ok=True)
    ckpt = workdir / f"ckpt_{config}"
    if not (ckpt / "speech_tokenizer" / "model.safetensors").exists():
        t = time.perf_counter()
        write_checkpoint(ckpt, config, seed=0)
        print(f"checkpoint written in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    paths = {"ckpt": ckpt, "main": workdir / f"{config}_step_B{main_B}.onnx",
             "first": workdir / f"{config}_step_B{first_B}.onnx"}
    if not (paths["main"].exists() and paths["first"].exists()):
        model, _, _ = load_vocoder(ckpt)
        for role, B in (("main", main_B), ("first", first_B)):
            if not paths[role].exists():
                t = time.perf_counter()
                export_step_onnx(VocoderStep(model, B), paths[role])
                print(f"exported B={B} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        del model
        gc.collect()
    return paths


def run_stream(main, first, codes) -> dict:
    from rkspeech.runtime.tts.streaming import StreamingVocoder

    sv = StreamingVocoder(main, first)
    c = main.contract
    pieces, i = [], 0
    if first is not None:
        pieces.append(codes[:first.B])
        i = first.B
    pieces += [codes[j:j + main.B] for j in range(i, len(codes), main.B)]
    out, ttfa = [], None
    start = time.perf_counter()
    for p in pieces:
        pcm = sv.push(p)
        if pcm.size and ttfa is None:
            ttfa = time.perf_counter() - start
        out.append(pcm)
    out.append(sv.flush())
    total = time.perf_counter() - start
    audio = np.concatenate(out)
    audio_s = audio.size / c.sample_rate
    steps = [t for t in sv.timings]
    step_s = sum(t.total_s for t in steps)
    host_s = sum(t.host_s for t in steps)
    main_steps = [t for t in steps if t.tokens == main.B] or steps
    return {
        "decode_s": total, "audio_s": audio_s, "rtf": total / audio_s, "ttfa_s": ttfa,
        "host_share": host_s / step_s, "host_ms_per_step": 1e3 * host_s / len(steps),
        "main_step_s": statistics.median(t.total_s for t in main_steps),
        "main_step_host_share": statistics.median(t.host_s / t.total_s for t in main_steps),
        "outside_steps_share": (total - step_s) / total,  # push/concat work outside any step
        "steps": len(steps), "audio": audio,
    }


def run_official(decoder, codes, chunk: int, left: int) -> dict:
    import torch

    marks: list[float] = []
    hook = decoder.register_forward_hook(lambda *a: marks.append(time.perf_counter()))
    x = torch.from_numpy(np.ascontiguousarray(codes.T[None]))
    try:
        start = time.perf_counter()
        with torch.no_grad():
            wav = decoder.chunked_decode(x, chunk_size=chunk, left_context_size=left)
        total = time.perf_counter() - start
    finally:
        hook.remove()
    audio = wav.numpy().reshape(-1)
    audio_s = audio.size / 24000
    return {"decode_s": total, "audio_s": audio_s, "rtf": total / audio_s, "ttfa_s": marks[0] - start,
            "host_share": None, "host_ms_per_step": None, "main_step_s": None, "main_step_host_share": None,
            "outside_steps_share": None, "steps": len(marks), "audio": audio}


def median_row(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if k != "audio"]
    row = {}
    for k in keys:
        vals = [r[k] for r in runs if r[k] is not None]
        row[k] = statistics.median(vals) if vals else None
    row["runs"] = [{k: r[k] for k in keys} for r in runs]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/rkspeech_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--main-B", type=int, default=64)
    ap.add_argument("--first-B", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=4 + 3 * 64, help="tokens per run (default 196 = 15.7 s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--left-context", type=int, default=25)
    ap.add_argument("--skip-official", action="store_true")
    ap.add_argument("--config", choices=("published", "reduced"), default="published",
                    help="synthetic checkpoint size (reduced: a quick smoke run)")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "streaming.json"))
    args = ap.parse_args(argv)

    load_start = loadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    paths = prepare(Path(args.workdir), args.main_B, args.first_B, args.threads, args.config)

    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
    from rkspeech.runtime.tts.streaming import Engine
    from rkspeech.verify.stepwise import random_codes

    main = Engine(OnnxRuntimeRunner(paths["main"], threads=args.threads), read_contract(paths["main"]))
    first = Engine(OnnxRuntimeRunner(paths["first"], threads=args.threads), read_contract(paths["first"]))
    c = main.contract
    codes = random_codes(args.tokens, c.num_quantizers, c.codebook_size, seed=0)
    # warm-up: one step each (first runs pay session/arena set-up)
    run_stream(main, first, codes[: args.first_B + args.main_B])

    rows: dict[str, dict] = {}
    configs = [(f"first B={args.first_B} + main B={args.main_B}", lambda: run_stream(main, first, codes)),
               (f"main-only B={args.main_B}", lambda: run_stream(main, None, codes))]
    decoder = None
    if not args.skip_official:
        import torch

        torch.set_num_threads(args.threads)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/official_reference.py
        from tests.official_reference import load_official_decoder

        decoder = load_official_decoder(paths["ckpt"])
        configs.append((f"official chunked_decode({args.main_B}, left {args.left_context})",
                        lambda: run_official(decoder, codes, args.main_B, args.left_context)))
    runs: dict[str, list[dict]] = {name: [] for name, _ in configs}
    for rep in range(args.repeats):  # interleaved so slow phases of the shared machine hit every row
        for name, fn in configs:
            r = fn()
            runs[name].append(r)
            print(f"  rep {rep + 1} {name}: {r['decode_s']:.2f} s, RTF {r['rtf']:.3f}, "
                  f"TTFA {r['ttfa_s']:.3f} s", file=sys.stderr, flush=True)
    streams = [runs[name][-1]["audio"] for name, _ in configs[:2]]
    from rkspeech.core.compare import json_number, snr_db

    first_vs_main_db = json_number(snr_db(streams[1], streams[0]), 1)
    for name, _ in configs:
        rows[name] = median_row(runs[name])
    load_end = loadavg()
    report = {
        "benchmark": "streaming runtime (issue 4)", "date": started, "host": os.uname().nodename,
        "cpu_count": os.cpu_count(), "threads": args.threads, "tokens": args.tokens,
        "audio_s": args.tokens / 12.5, "repeats": args.repeats, "model": f"{args.config}-size synthetic",
        "loadavg_start": load_start, "loadavg_end": load_end,
        "config": args.config, "snr_first_plus_main_vs_main_only_db": first_vs_main_db, "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.json).with_name(f".{Path(args.json).name}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, args.json)

    print(f"\nStreaming runtime, {args.config}-size synthetic, onnxruntime {args.threads} threads, "
          f"{args.tokens} tokens ({args.tokens / 12.5:.1f} s audio), median of {args.repeats}; "
          f"load {load_start} -> {load_end}")
    hdr = f"{'config':<44} {'decode s':>9} {'RTF':>7} {'TTFA s':>8} {'step s':>7} {'host share':>11} {'host ms/step':>12}"
    print(hdr)
    print("-" * len(hdr))
    for name, r in rows.items():
        hs = f"{100 * r['host_share']:.3f} %" if r["host_share"] is not None else "-"
        hm = f"{r['host_ms_per_step']:.2f}" if r["host_ms_per_step"] is not None else "-"
        st = f"{r['main_step_s']:.2f}" if r["main_step_s"] is not None else "-"
        print(f"{name:<44} {r['decode_s']:>9.2f} {r['rtf']:>7.3f} {r['ttfa_s']:>8.3f} {st:>7} {hs:>11} {hm:>12}")
    print(f"first+main vs main-only PCM: {first_vs_main_db} dB SNR; JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
