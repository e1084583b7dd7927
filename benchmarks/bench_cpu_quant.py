"""CPU variants of the talker and code-predictor step graphs side by side (issue 26, deliver 1).

    .venv/bin/python benchmarks/bench_cpu_quant.py [--frames 16] [--repeats 30] [--threads 2]
        [--published | --published-only] [--out bench_cpu_quant.json]

On the reduced synthetic custom-voice root (seed 0) it exports the talker prefill / decode pair
(capacity 128, B=16), the code predictor's step graph and its frame graph, writes each graph's
CPU variants with ``convert.cpu_quant`` (fp32 copy, int8 dynamic per channel and per tensor, int4
block 32 and 128 with int8 compute (``accuracy_level`` 4), int4 block 32 with fp32 compute) and
prints per stage and variant: file size, onnxruntime CPU time of one call (median over
``--repeats`` after 3 warm-up calls, ``--threads`` intra-op threads, through ``open_runner('ort')``,
random inputs of the graph's shapes), and the greedy top-1 agreement and logit SNR against the
fp32 graph over ``--frames`` teacher-forced frames of three texts
(``accuracy.quantized_stage``), with ratios to fp32.  Then text -> codes end to end with both
stages quantized (free running, greedy) against the fp32 graphs' codes.

``--published``: also the talker decode step (28 layers, capacity 256) and the code predictor
step (5 layers, capacity 16) at the published 0.6B size (random weights: a ``DecoderStack`` of the
published config, initialised as the synthetic checkpoint writer does): size and step time per
variant (no agreement: that needs the whole published model, ~9 GB in torch).

This is an x86 host, not the board's Cortex-A76 cores: times are this host's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

#: (label, CpuQuantOptions keywords)
VARIANTS = (
    ("fp32", {"variant": "fp32"}),
    ("int8 per-channel", {"variant": "int8", "per_channel": True}),
    ("int8 per-tensor", {"variant": "int8", "per_channel": False}),
    ("int4 b32 acc4", {"variant": "int4", "block_size": 32, "accuracy_level": 4}),
    ("int4 b128 acc4", {"variant": "int4", "block_size": 128, "accuracy_level": 4}),
    ("int4 b32 acc0", {"variant": "int4", "block_size": 32, "accuracy_level": 0}),
    ("int4 b32 sym acc4", {"variant": "int4", "block_size": 32, "accuracy_level": 4, "symmetric": True}),
)

#: variants left out at the published size (time and memory)
SKIP_PUBLISHED = ("int8 per-tensor", "int4 b32 sym acc4")


def step_times_ms(paths: dict[str, Path], threads: int, repeats: int) -> dict[str, float]:
    """Median ms of one call per graph; the graphs are timed in turn, one call each per round, so a
    change of the machine's load falls on every variant alike."""
    import contextlib

    from rkspeech.runtime.runners import open_runner

    gen = np.random.default_rng(0)
    with contextlib.ExitStack() as stack:
        runners = {k: stack.enter_context(open_runner("ort", p, threads=threads)) for k, p in paths.items()}
        specs = next(iter(runners.values())).input_specs()
        feed = {n: (gen.standard_normal(s) * (0.0 if n == "mask" else 1.0)).astype(d) for n, (s, d) in specs.items()}
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(3):
            for r in runners.values():
                r.infer(feed)
        for _ in range(repeats):
            for k, r in runners.items():
                t0 = time.perf_counter()
                r.infer(feed)
                times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v) * 1000) for k, v in times.items()}


def variants_of(src: Path, out: Path, skip=()) -> dict[str, tuple[Path, dict]]:
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph

    res = {}
    for label, kw in VARIANTS:
        if skip and label in skip:
            continue
        dst = out / f"{src.stem}.{label.replace(' ', '_')}.onnx"
        res[label] = (dst, quantize_step_graph(src, dst, CpuQuantOptions(**kw)))
    return res


def published_steps(work: Path, threads: int, repeats: int) -> list[dict]:
    """The published talker decode step (capacity 256) and code predictor step (capacity 16), each
    a ``DecoderStack`` of the published config initialised as the synthetic checkpoint writer does
    (fan-in scaled, norms near 1), exported as the build exports them (heads layout, flat cache)."""
    import dataclasses

    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.models.qwen3_tts.synthetic_tts import PUBLISHED, _init
    from rkspeech.models.qwen3_tts.talker import DecoderStack
    from rkspeech.models.qwen3_tts.tts_config import DecoderStackConfig
    from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL as MODEL_NAME
    from rkspeech.stepgraph.talker_step import TalkerStep

    names = {f.name for f in dataclasses.fields(DecoderStackConfig)}
    rows = []
    for stage, section, kw in (("talker decode (published)", "talker", {"capacity": 256}),
                               ("code predictor step (published)", "code_predictor",
                                {"capacity": PUBLISHED["code_predictor"]["num_code_groups"], "name": MODEL_NAME})):
        t0 = time.perf_counter()
        cfg = DecoderStackConfig(**{k: v for k, v in PUBLISHED[section].items() if k in names})
        stack = DecoderStack(cfg).eval()
        _init(stack, 0)
        src = export_talker_onnx(TalkerStep(stack, B=1, **kw), work / f"pub_{section}_step.onnx")
        del stack
        print(f"# {stage} exported in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        vs = variants_of(src, work, SKIP_PUBLISHED)
        src.unlink()
        ms = step_times_ms({label: path for label, (path, _) in vs.items()}, threads, repeats)
        rows += [{"stage": stage, "variant": label, "bytes": rec["bytes_after"], "ms": ms[label], "record": rec}
                 for label, (_, rec) in vs.items()]
        for path, _ in vs.values():
            path.unlink()
    return rows


def reduced(work: Path, args, rows: list[dict]) -> dict:
    """The reduced root's four graphs: rows per stage and variant; returns the end-to-end figures."""
    import torch

    torch.set_num_threads(args.threads)
    from rkspeech.accuracy.quantized_stage import (DEFAULT_TEXTS, code_predictor_agreement,
                                                   record_greedy_reference, talker_agreement)
    from rkspeech.core.capture import sample_request
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.models.qwen3_tts.generate import GenerationOptions, TTSModel
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor
    from rkspeech.runtime.tts.talker_backend import open_graph_talker
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    tts = TTSModel.load(write_tts_checkpoint(work / "ckpt", "reduced", "custom-voice", 0))
    cp = tts.net.talker.code_predictor
    talker = export_talker_pair(tts.net.talker.model, work / "g", capacity=128, prefill_B=16)
    graphs = {"talker decode": talker["decode"], "talker prefill": talker["prefill"],
              "code predictor step": export_talker_onnx(code_predictor_step(cp), work / "g" / "cp_step.onnx"),
              "code predictor frame": export_code_predictor_onnx(CodePredictorFrame(cp).eval(),
                                                                 work / "g" / "cp_frame.onnx")}
    var = {stage: variants_of(path, work / "v") for stage, path in graphs.items()}

    ref_talker = open_graph_talker(talker["decode"], talker["prefill"], threads=args.threads)
    ref_cp = CodebookCodePredictor(graphs["code predictor step"], "ort", model=tts, threads=args.threads)
    runs = record_greedy_reference(tts, talker=ref_talker, code_predictor=ref_cp, texts=DEFAULT_TEXTS,
                                   frames=args.frames)
    ref_codes = [r.frames for r in runs]
    acc: dict[tuple[str, str], dict] = {}
    for label in var["talker decode"]:
        g = open_graph_talker(var["talker decode"][label][0], var["talker prefill"][label][0],
                              model=tts.net.talker.model, threads=args.threads)
        acc["talker", label] = talker_agreement(tts, runs, g)
        g.close()
        with CodebookCodePredictor(var["code predictor step"][label][0], "ort", model=tts,
                                   threads=args.threads) as c:
            acc["code predictor step", label] = code_predictor_agreement(runs, c)
        with GraphCodePredictor(var["code predictor frame"][label][0], "ort", model=tts,
                                threads=args.threads) as c:
            acc["code predictor frame", label] = code_predictor_agreement(runs, c)

    for stage, vs in var.items():
        key = "talker" if stage.startswith("talker") else stage
        ms = step_times_ms({label: path for label, (path, _) in vs.items()}, args.threads, args.repeats)
        for label, (path, rec) in vs.items():
            a = acc[key, label]
            rows.append({"stage": stage, "variant": label, "bytes": rec["bytes_after"],
                         "ms": ms[label], "agreement": a["agreement"],
                         "logit_snr_db": a["logit_snr_db"], "same_stop": a.get("same_stop"),
                         "first_diverging_frame": a["first_diverging_frame"], "margin": a["margin"],
                         "record": rec})

    # end to end: text -> codes with both stages quantized, free running
    e2e = {}
    opts = GenerationOptions.greedy(max_new_tokens=args.frames + 1)
    for label in ("fp32", "int8 per-channel", "int4 b32 acc4", "int4 b128 acc4"):
        g = open_graph_talker(var["talker decode"][label][0], var["talker prefill"][label][0],
                              model=tts.net.talker.model, threads=args.threads)
        c = CodebookCodePredictor(var["code predictor step"][label][0], "ort", model=tts, threads=args.threads)
        saved = (tts.talker_backend, tts.code_predictor_backend)
        tts.use_backends(talker=g, code_predictor=c)
        eq = tot = 0
        t0 = time.perf_counter()
        nframes = []
        try:
            for text, ref in zip(DEFAULT_TEXTS, ref_codes):
                got = tts.generate_codes(text, options=opts, **sample_request(tts))  # the reference's request
                n = min(len(got), len(ref))
                eq += int((got[:n] == ref[:n]).sum())
                tot += int(ref.size)
                nframes.append(len(got))
        finally:
            tts.talker_backend, tts.code_predictor_backend = saved
            g.close()
            c.close()
        e2e[label] = {"frames": nframes, "code_agreement_free_running": round(eq / tot, 4),
                      "seconds": round(time.perf_counter() - t0, 2)}
    ref_talker.close()
    ref_cp.close()
    return e2e


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--published", action="store_true",
                    help="also the published talker decode and code predictor steps (size and time)")
    ap.add_argument("--published-only", action="store_true", help="only the published steps")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import onnxruntime

    from rkspeech.accuracy.quantized_stage import DEFAULT_TEXTS

    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    rows: list[dict] = []
    e2e: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_cpu_quant.") as tmp:
        work = Path(tmp)
        if args.published_only:
            rows += published_steps(work, args.threads, args.repeats)
        else:
            e2e = reduced(work, args, rows)
            if args.published:
                rows += published_steps(work, args.threads, args.repeats)

    load1 = os.getloadavg()
    print(f"# bench_cpu_quant {started:%Y-%m-%d %H:%M} UTC; onnxruntime {onnxruntime.__version__} CPU, "
          f"{args.threads} threads, median of {args.repeats} calls; load average {load0[0]:.2f} -> {load1[0]:.2f} "
          f"({os.cpu_count()} cores)")
    print("# x86 host (not the board's Cortex-A76 cores): times are this host's, not a board's")
    if rows and "agreement" in rows[0]:
        print(f"# agreement / SNR: vs the fp32 graph, {args.frames} teacher-forced greedy frames x {len(DEFAULT_TEXTS)} "
              "texts, reduced synthetic weights (random: flat logits, see margin); the frame graph feeds its own "
              "argmax back inside a frame (not teacher forced there)")
    hdr = (f"{'stage':<27} {'variant':<18} {'bytes':>10} {'x fp32':>7} {'ms/call':>8} {'x fp32':>7} "
           f"{'agree':>6} {'SNR dB':>7} {'1st div':>7} {'stop=':>5} {'margin p10/med':>15}")
    print(hdr)
    base = {r["stage"]: r for r in rows if r["variant"] == "fp32"}
    for r in rows:
        b = base[r["stage"]]
        m = r.get("margin") or {}
        snr = r.get("logit_snr_db")
        print(f"{r['stage']:<27} {r['variant']:<18} {r['bytes']:>10,} {r['bytes'] / b['bytes']:>7.3f} "
              f"{r['ms']:>8.3f} {r['ms'] / b['ms']:>7.2f} "
              f"{'' if r.get('agreement') is None else format(r['agreement'], '.3f'):>6} "
              f"{'' if snr is None else format(snr, '.1f'):>7} "
              f"{'' if r.get('first_diverging_frame') is None else r['first_diverging_frame']:>7} "
              f"{'' if r.get('same_stop') is None else ('yes' if r['same_stop'] else 'NO'):>5} "
              f"{(str(m.get('p10')) + '/' + str(m.get('median'))) if m else '':>15}")
    print("# end to end, text -> codes, both stages on onnxruntime CPU, free running vs the fp32 graphs' codes:")
    for label, e in e2e.items():
        print(f"#   {label:<18} frames {e['frames']}, code agreement {e['code_agreement_free_running']:.3f}, "
              f"{e['seconds']:.2f} s")
    if args.out:
        from rkspeech.core.atomic import write_json

        write_json(args.out, {"started": started.isoformat(), "load_before": load0, "load_after": load1,
                              "threads": args.threads, "repeats": args.repeats, "frames": args.frames,
                              "onnxruntime": onnxruntime.__version__, "rows": rows, "end_to_end": e2e})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
