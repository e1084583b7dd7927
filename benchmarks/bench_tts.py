"""Text-to-speech benchmark (not a test): ours streaming vs qwen-tts generate + official decode.

In one run, on the same synthetic Qwen3-TTS model root (custom-voice variant, written to
``--work`` once and cached) and the same text, greedy decoding, ``--frames`` frames per
utterance (synthetic weights never emit codec_eos, so the cap sets the length):

* **ours**: ``rkspeech.runtime.tts.speak.Speaker`` over an onnxruntime plan (step graphs exported
  here with ``export_step_onnx``: first B=``--first-B``, main B=``--main-B``; cached in
  ``--work``).  Frames go to the streaming vocoder as they are generated.  Time to first audio
  (TTFA) is when the first PCM chunk comes back.  Split: talker (its transformer stack + codec
  head, timed by wrappers around those modules' ``forward`` in this script only), code predictor
  (its stack, projection and the 15 heads, same way), generator rest (prompt building, sampling,
  embeddings), vocoder (engine calls), host (the rest of ``Speaker.stream``).
* **reference**: qwen-tts 0.1.1 ``Qwen3TTSForConditionalGeneration.generate`` (all codes first,
  ``tests/official_reference.py``) then the official 12 Hz decoder's one-shot forward over all codes
  (what qwen-tts' ``chunked_decode(300, 25)`` does for up to 300 frames).  It does not stream, so
  its TTFA is its total.  Split: talker (``talker.model.forward``), code predictor
  (``talker.code_predictor.generate``, HF generate included), generate rest (HF generate's loop,
  logits processing), decode.

Both are loaded and their repeats interleaved (ours, reference, ours, ...), so slow phases of
the shared machine hit both; ``--sequential`` instead runs all of ours, frees it, then loads the
reference (one model in memory at a time: for the published size on a small machine).  Load
average is recorded before and after.
Each side gets one untimed warm-up utterance of ``--first-B + 1`` frames.  Realtime factor =
total / audio seconds.  Codes of both sides are compared (greedy: they must be identical).

    .venv/bin/python benchmarks/bench_tts.py --config reduced --frames 40 --repeats 3 --threads 2
    .venv/bin/python benchmarks/bench_tts.py --config published --frames 20 --repeats 1 --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import gc
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

TEXT = "Hello world. This is a test of streaming speech, one frame at a time."
SPEAKER, LANGUAGE = "ryan", "english"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- preparation (cached in --work) -----------------------------------------------------------------

def prepare(work: Path, config: str, first_B: int, main_B: int) -> tuple[Path, Path]:
    """(model root, plan.json) for ``config``; written once."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    work.mkdir(parents=True, exist_ok=True)
    root = work / f"tts_{config}_custom-voice_seed0"
    if not (root / "config.json").exists():
        t = time.perf_counter()
        write_tts_checkpoint(root, config, "custom-voice", seed=0)
        log(f"model root written in {time.perf_counter() - t:.1f} s: {root}")
    graphs = {"first": work / f"{config}_step_B{first_B}.onnx", "main": work / f"{config}_step_B{main_B}.onnx"}
    plan = work / f"plan_{config}_B{first_B}_B{main_B}.json"
    if not all(p.exists() for p in graphs.values()):
        from rkspeech.export.vocoder_onnx import export_step_onnx
        from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
        from rkspeech.stepgraph.step import VocoderStep

        model, _, _ = load_vocoder(root)
        for role, B in (("first", first_B), ("main", main_B)):
            if not graphs[role].exists():
                t = time.perf_counter()
                export_step_onnx(VocoderStep(model, B), graphs[role])
                log(f"exported B={B} in {time.perf_counter() - t:.1f} s")
        del model
        gc.collect()
    if not plan.exists():
        from rkspeech.contracts.read import read_contract
        from rkspeech.plan.plan import write_plan

        contracts = {role: read_contract(p) for role, p in graphs.items()}
        write_plan(plan, placement="cpu-fp32", target=None, contracts=contracts, onnx=graphs)
    return root, plan


# -- timing wrappers (benchmark only) ---------------------------------------------------------------

class Clock:
    """Wraps callables so the wall time inside them accumulates under a name (not re-entrant
    across names: the wrapped calls here do not nest)."""

    def __init__(self):
        self.s: dict[str, float] = {}

    def wrap(self, obj, attr: str, name: str) -> None:
        fn = getattr(obj, attr)
        self.s.setdefault(name, 0.0)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.s[name] += time.perf_counter() - t

        setattr(obj, attr, timed)

    def reset(self) -> None:
        for k in self.s:
            self.s[k] = 0.0


class Side:
    """One implementation, loaded: ``once(frames)`` -> (row, codes, pcm)."""

    def __init__(self, name, load_s, once, close, rate, warm):
        self.name, self.load_s, self.once, self.close, self.rate = name, load_s, once, close, rate
        self.rows: list[dict] = []
        self.codes = None
        once(warm)  # untimed warm-up (ort sessions, torch kernels)

    def rep(self, frames: int, i: int) -> None:
        row, self.codes, _ = self.once(frames)
        self.rows.append(row)
        log(f"  {self.name} rep {i + 1}: TTFA {row['ttfa_s']:.3f} s, total {row['total_s']:.2f} s "
            f"(generate {row['generate_s']:.2f}, vocoder {row['vocoder_s']:.2f}), RTF {row['rtf']:.3f}")

    def result(self) -> dict:
        return {"load_s": self.load_s, "rows": self.rows, "codes": self.codes, "sample_rate": self.rate}


# -- ours --------------------------------------------------------------------------------------------

def setup_ours(root: Path, plan: Path, args) -> Side:
    import torch

    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    speaker = Speaker(root, plan, backend="ort", threads=args.threads)
    load_s = time.perf_counter() - t
    talker = speaker.model.net.talker
    cp = talker.code_predictor
    clock = Clock()
    clock.wrap(talker.model, "forward", "talker")
    clock.wrap(talker.codec_head, "forward", "talker")
    clock.wrap(cp.model, "forward", "code_predictor")
    clock.wrap(cp.small_to_mtp_projection, "forward", "code_predictor")
    for head in cp.lm_head:
        clock.wrap(head, "forward", "code_predictor")
    rate = speaker.sample_rate

    def once(frames: int):
        timing, codes = SpeechTiming(), []
        opts = GenerationOptions.greedy(max_new_tokens=frames + 1)
        clock.reset()
        t0 = time.perf_counter()
        pcm = [c for c in speaker.stream(args.text, speaker=SPEAKER, language=LANGUAGE, options=opts,
                                         codes_out=codes, timing=timing)]
        total = time.perf_counter() - t0
        audio_s = timing.samples / rate
        talk, pred = clock.s["talker"], clock.s["code_predictor"]
        row = {"ttfa_s": timing.first_audio_s, "total_s": total, "audio_s": audio_s, "rtf": total / audio_s,
               "talker_s": talk, "code_predictor_s": pred, "generate_rest_s": timing.generate_s - talk - pred,
               "generate_s": timing.generate_s, "vocoder_s": timing.vocoder_s,
               "host_s": total - timing.generate_s - timing.vocoder_s, "frames": timing.frames}
        return row, np.stack(codes), np.concatenate(pcm)

    def close():
        speaker.close()

    return Side("ours", load_s, once, close, rate, warm=args.first_B + 1)


# -- reference ---------------------------------------------------------------------------------------

def setup_reference(root: Path, args) -> Side:
    import torch

    from tests.official_reference import (
        load_official_decoder,
        load_official_tts,
        official_codes,
    )

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    model, processor = load_official_tts(root)
    decoder = load_official_decoder(root)
    load_s = time.perf_counter() - t
    clock = Clock()
    clock.wrap(model.talker.model, "forward", "talker")
    clock.wrap(model.talker.code_predictor, "generate", "code_predictor")
    rate = int(decoder.config.output_sample_rate) if hasattr(decoder.config, "output_sample_rate") else 24000

    def once(frames: int):
        clock.reset()
        t0 = time.perf_counter()
        codes = official_codes(model, processor, args.text, speaker=SPEAKER, language=LANGUAGE,
                               non_streaming_mode=True, max_new_tokens=frames + 1)
        t1 = time.perf_counter()
        with torch.no_grad():
            wav = decoder(torch.from_numpy(codes.T[None].copy())).numpy().reshape(-1)
        t2 = time.perf_counter()
        audio_s = wav.size / rate
        talk, pred = clock.s["talker"], clock.s["code_predictor"]
        total = t2 - t0
        row = {"ttfa_s": total, "total_s": total, "audio_s": audio_s, "rtf": total / audio_s,
               "talker_s": talk, "code_predictor_s": pred, "generate_rest_s": (t1 - t0) - talk - pred,
               "generate_s": t1 - t0, "vocoder_s": t2 - t1, "host_s": 0.0, "frames": int(codes.shape[0])}
        return row, codes, wav

    def close():
        pass

    return Side("reference", load_s, once, close, rate, warm=args.first_B + 1)


# -- report ------------------------------------------------------------------------------------------

FIELDS = [("time to first audio, s", "ttfa_s"), ("total, s", "total_s"), ("audio, s", "audio_s"),
          ("realtime factor", "rtf"), ("talker, s", "talker_s"), ("code predictor, s", "code_predictor_s"),
          ("generate rest (prompt, sampling), s", "generate_rest_s"), ("= talker + code predictor + rest, s", "generate_s"),
          ("vocoder / decode, s", "vocoder_s"), ("host (rest of the stream), s", "host_s")]


def median_row(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=["reduced", "published"], default="reduced")
    ap.add_argument("--frames", type=int, default=40, help="frames per utterance (12.5 per second of audio)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch and onnxruntime threads")
    ap.add_argument("--work", default="/tmp/rkspeech_bench_tts", help="cache folder (model root, step graphs, plan)")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--first-B", type=int, default=4)
    ap.add_argument("--main-B", type=int, default=16)
    ap.add_argument("--sequential", action="store_true",
                    help="load ours, run its repeats, free it, then the reference (less memory; not interleaved)")
    ap.add_argument("--json", default=None, help="write the report here")
    args = ap.parse_args(argv)

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = uptime()
    log(f"start {started}; {load_before}")
    import torch

    torch.set_num_threads(args.threads)
    root, plan = prepare(Path(args.work), args.config, args.first_B, args.main_B)
    log(f"ours: Speaker, ort plan first B={args.first_B} + main B={args.main_B}")
    if args.sequential:  # one model in memory at a time
        side = setup_ours(root, plan, args)
        for i in range(args.repeats):
            side.rep(args.frames, i)
        side.close()
        ours = side.result()
        del side
        gc.collect()
        log("reference: qwen-tts generate + official decoder")
        side = setup_reference(root, args)
        for i in range(args.repeats):
            side.rep(args.frames, i)
        ref = side.result()
        del side
        gc.collect()
    else:  # both loaded, repeats interleaved so slow phases of the shared machine hit both
        a, b = setup_ours(root, plan, args), setup_reference(root, args)
        for i in range(args.repeats):
            a.rep(args.frames, i)
            b.rep(args.frames, i)
        a.close()
        ours, ref = a.result(), b.result()
    load_after = uptime()
    same = ours["codes"].shape == ref["codes"].shape and bool(np.array_equal(ours["codes"], ref["codes"]))
    mo, mr = median_row(ours["rows"]), median_row(ref["rows"])

    report = {"benchmark": "text to speech (issue 12)", "date": started, "host": os.uname().nodename,
              "cpu_count": os.cpu_count(), "threads": args.threads, "config": args.config,
              "frames": args.frames, "repeats": args.repeats, "sequential": args.sequential, "text": args.text, "speaker": SPEAKER,
              "language": LANGUAGE, "first_B": args.first_B, "main_B": args.main_B,
              "load_before": load_before, "load_after": load_after, "codes_identical": same,
              "codes_shape": list(ours["codes"].shape),
              "ours": {"load_s": ours["load_s"], "median": mo, "runs": ours["rows"]},
              "reference": {"load_s": ref["load_s"], "median": mr, "runs": ref["rows"]}}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")

    print(f"\nText to speech, {args.config}-size synthetic custom-voice, greedy, {args.frames} frames "
          f"({mo['audio_s']:.2f} s audio), torch + onnxruntime {args.threads} threads, median of {args.repeats}, "
          f"{started}, {os.uname().nodename} ({os.cpu_count()} cores)")
    print(f"load before: {load_before}")
    print(f"load after:  {load_after}")
    print(f"ours: Speaker.stream, ort plan first B={args.first_B} + main B={args.main_B} (model load "
          f"{ours['load_s']:.1f} s); reference: qwen-tts 0.1.1 generate + official decoder one-shot (load "
          f"{ref['load_s']:.1f} s)")
    print(f"greedy codes identical: {same} ({list(ours['codes'].shape)} vs {list(ref['codes'].shape)})")
    hdr = f"| {'':<38} | {'ours':>9} | {'reference':>9} | {'ours/ref':>8} |"
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for label, key in FIELDS:
        a, b = mo[key], mr[key]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"| {label:<38} | {a:>9.3f} | {b:>9.3f} | {ratio:>8} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
