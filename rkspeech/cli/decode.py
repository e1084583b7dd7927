"""``rkspeech decode --plan plan.json CODES -o out.wav``: codec tokens -> 24 kHz 16-bit wav.

Backends: ``ort`` (onnxruntime over the plan's exact host step graphs, ``host_onnx``, or its
ONNX in a plan written before them), ``sim`` (rknn-toolkit2's x86 simulator, which builds from
the ONNX the .rknn was converted from: it costs one conversion per graph), ``rknnlite`` (the
plan's .rknn on a board); ``Plan.graphs`` picks the graph.  With ``ort`` nothing imports torch
or onnx (tested), so a runtime-only install decodes.  Codes are pushed one step at a time, as a
streaming caller would, so the time to first audio is the time of the first (small-B) step, and
each step's audio goes straight to the wav (``runtime.wav.WavWriter``): memory stays flat with
length.
Every output location is checked before the plan loads.  A codes file of several utterances
(``[N, T, 16]``, each padded with -1: what ``speak --codes-out`` writes for several sentences)
decodes each from a fresh vocoder state, as speak spoke them, one after the other into the wav.
"""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, Flags
from rkspeech.core.targets import CORE_MASKS
from rkspeech.runtime.runners import BACKENDS


def register(subparsers) -> None:
    p = subparsers.add_parser("decode", help="decode codec tokens to a 24 kHz wav through a plan's step graphs")
    f = Flags(p, "decode")
    f.add(INPUT, "codes", help="codes file: .npy, .json or .pt, [T,16] or [16,T] integers (-1 = end padding); "
               "[N,T,16]: N utterances, each -1 padded, decoded apart (speak --codes-out of several sentences)")
    f.add(INPUT, "--plan", required=True, help="plan.json written by `rkspeech build qwen3-tts-vocoder`")
    f.add(OUTPUT, "-o", "--output", writes="file", required=True, help="output .wav (16-bit PCM)")
    f.add(OUTPUT, "--report", writes="file", default=None, help="write the timing report JSON here")
    f.add(NPU, "--backend", choices=BACKENDS, default="ort",
          help="ort = onnxruntime over the plan's exact host graphs (default); sim = rknn-toolkit2 "
               "simulator (builds from the NPU ONNX: slow); rknnlite = the .rknn on a board")
    f.add(NPU, "--target", default=None, help="chip for sim/rknnlite (default: the plan's target)")
    f.add(NPU, "--core-mask", default="auto", choices=CORE_MASKS,
          help="rknnlite NPU core(s): " + ", ".join(CORE_MASKS))
    f.threads(ADVANCED, "onnxruntime (intra-op)")
    f.add(ADVANCED, "--as-spoken", action="store_true",
          help="speak's step schedule (codes pushed frame by frame, small steps after the first): the wav "
               "of speak's --codes-out sample for sample; default: main steps, speak's to one 16-bit step")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable, output_lock, write_json
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.core.targets import board_target
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.tts.codes import load_codes_file, utterances
    from rkspeech.runtime.tts.pool import open_pool
    from rkspeech.runtime.wav import WavWriter

    out = Path(args.output)
    if out.suffix.lower() != ".wav":
        raise RkspeechError(f"output {out} must end in .wav")
    check_writable(out, what="output wav")
    if args.report:
        check_writable(args.report, what="report")
        if Path(args.report).resolve() == out.resolve():
            raise RkspeechError(f"--report {args.report} is the output wav; pick another name")
    if args.threads is not None and args.threads < 1:
        raise RkspeechError(f"--threads must be >= 1, got {args.threads}")
    target = args.target
    if args.backend == "rknnlite" and target is None:
        target = board_target()
    with output_lock(out, what="output wav"):  # a second decode to this path is refused
        plan = load_plan(args.plan, backend=args.backend,
                         expect_target=target if args.backend == "rknnlite" else None)
        c = plan.contract
        # [N, T, 16] (speak --codes-out of several sentences): N utterances, each from a fresh state
        parts = utterances(load_codes_file(args.codes), c.num_quantizers, c.codebook_size)
        tokens = sum(len(u) for u in parts)
        roles = ", ".join(f"{r} B={plan.contracts[r].codes_length}" for r in plan.roles())
        what = {"ort": "onnxruntime sessions", "sim": "simulator builds (one conversion per graph)",
                "rknnlite": "rknn-lite contexts"}[args.backend]
        with progress.stage(f"load {what}: {roles}"):
            pool = open_pool(plan, args.backend, size=1, threads=args.threads,
                             core_mask=[args.core_mask], target=target)
        try:
            first_B = plan.contracts["first"].codes_length if "first" in plan.contracts else 0
            B = c.codes_length
            # (utterance, start, end) of each push: views into the codes, no copies held
            if args.as_spoken:  # as speak pushes: one frame at a time into an eager stream
                bounds = [(u, j, j + 1) for u, codes in enumerate(parts) for j in range(len(codes))]
            else:
                bounds = [(u, lo, hi) for u, codes in enumerate(parts)
                          for lo, hi in ([(0, first_B)] if first_B else []) + [(j, j + B) for j in range(first_B, len(codes), B)]]
            first_audio, timings, sv = None, [], None
            start = time.perf_counter()
            what = f"decode {tokens} tokens" + (f" ({len(parts)} utterances)" if len(parts) > 1 else "")
            with WavWriter(out, c.sample_rate) as wav:
                for u, lo, hi in progress.track(bounds, what):
                    if lo == 0:  # a new utterance: a new stream (cache from zero), as speak spoke it
                        sv = pool.open_stream(eager=args.as_spoken)
                    pcm = sv.push(parts[u][lo:hi])
                    if pcm.size and first_audio is None:
                        first_audio = time.perf_counter() - start
                    wav.write(pcm)
                    if hi >= len(parts[u]):
                        tail = sv.flush()
                        if tail.size and first_audio is None:
                            first_audio = time.perf_counter() - start
                        wav.write(tail)
                        timings += sv.timings
            seconds = time.perf_counter() - start
        finally:
            pool.close()
        samples = wav.frames
        audio_s = samples / c.sample_rate
        engine_s = sum(t.engine_s for t in timings)
        report = {
            "plan": str(plan.path), "backend": args.backend, "output": str(out),
            "tokens": int(tokens), "utterances": len(parts), "samples": int(samples), "sample_rate": c.sample_rate,
            "audio_seconds": round(audio_s, 4), "decode_seconds": round(seconds, 4),
            "realtime_factor": round(seconds / audio_s, 4) if audio_s else None,
            "time_to_first_audio_s": round(first_audio, 4) if first_audio is not None else None,
            "steps": len(timings), "engine_seconds": round(engine_s, 4),
            "host_share": round(1 - engine_s / seconds, 5) if seconds else None,
            "steps_B": [t.tokens for t in timings],
        }
        if args.report:
            write_json(args.report, report)
    print_table("rkspeech decode", [
        ("output", f"{out} ({audio_s:.2f} s of audio, {c.sample_rate} Hz, 16-bit)"),
        ("backend / steps", f"{args.backend}, {len(timings)} steps ({roles})"),
        ("decode time", f"{seconds:.2f} s"),
        ("realtime factor", f"{report['realtime_factor']} (decode time / audio time; "
                            f"{audio_s / seconds:.2f}x realtime)" if seconds else "-"),
        ("time to first audio", f"{first_audio:.3f} s" if first_audio is not None else "-"),
        ("host share of step time", f"{100 * report['host_share']:.2f} %" if seconds else "-"),
    ])
    return 0
