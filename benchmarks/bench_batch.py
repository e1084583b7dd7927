"""Many streams, one weight read: batched generation through ``serve`` (issue 55; a benchmark, not a test).

One run, one synthetic published 0.6B custom-voice root (seed 0; random weights never stop, so each
request is bounded at ``--frames`` frames), one plan built with ``build qwen3-tts --talker cpu-int4
--code-predictor cpu-int4 --streams 8 --talker-capacity 256 --gate off`` (its vocoder the exact host
step graphs, first B=4 / main B=16, on onnxruntime: a placeholder vocoder plan, nothing converted).
Each side in a child process of its own (its own peak RSS, ``VmHWM``), greedy:

* ``one engine`` (today's ``serve``: one speech engine, a second request waits for it): N requests
  through the openai client, the engine taking them in turn (N = 1 and 4);
* ``batched N``: the same engine with ``--tts-streams N`` (``Speaker(streams=N)``, the plan's lanes
  graphs), N requests at once through the openai client.

Per side: aggregate audio seconds per wall second (all requests' audio over the wall time from the
first request to the last byte), per-request real-time factor and time to first audio (first byte
at the client; medians), the engine's batch size seen, peak RSS; medians over ``--repeats`` after one
untimed warm-up request.  Then ``speak`` of a ``--sentences``-sentence text with ``--streams 1`` and
``--streams 2`` (the default before ``batch.MIN_CORES_TO_BATCH``), each in its own child: wall
time, audio seconds.  The load average is printed before and after each side.  ``--plan``: another
plan of the same root (the same build with ``--streams 2``: lanes sized to 2).

    .venv/bin/python benchmarks/bench_batch.py --work /tmp/bb --json docs/bench_batch.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEAKER = "ryan"
TEXTS = ("The kitchen lights are on now.", "Good morning, the weather is mild today.",
         "Your timer has three minutes left.", "The front door is locked.",
         "Playing the evening news on the speaker.", "The garage door was left open.",
         "It will rain later this afternoon.", "All the windows are closed.")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def prepare(work: Path, streams: int) -> tuple[Path, Path]:
    """The published root and its int4 plan with lanes for ``streams`` (built once)."""
    work.mkdir(parents=True, exist_ok=True)
    root, plan = work / "root", work / "plan" / "plan.json"
    if plan.exists():
        return root, plan
    if not (root / "config.json").exists():
        from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

        log("synthetic published 0.6B custom-voice root ...")
        write_tts_checkpoint(root, "published", "custom-voice", 0)
    vplan = work / "vocoder" / "plan.json"
    if not vplan.exists():
        from rkspeech.contracts.read import read_contract
        from rkspeech.export.vocoder_onnx import export_step_onnx
        from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
        from rkspeech.plan.plan import write_plan
        from rkspeech.stepgraph.step import VocoderStep

        log("vocoder step graphs (first B=4, main B=16) ...")
        d = vplan.parent
        d.mkdir(parents=True, exist_ok=True)
        voc, _, _ = load_vocoder(root / "speech_tokenizer")
        graphs = {"first": d / "step_B4.onnx", "main": d / "step_B16.onnx"}
        for role, B in (("first", 4), ("main", 16)):
            export_step_onnx(VocoderStep(voc, B), graphs[role])
        rknn = {}
        for role in graphs:  # never loaded: the benchmark runs the exact host graphs on onnxruntime
            rknn[role] = d / f"{role}.rknn"
            rknn[role].write_bytes(b"placeholder, never loaded")
        write_plan(vplan, placement="npu", target="rk3588",
                   contracts={r: read_contract(p) for r, p in graphs.items()}, rknn=rknn, onnx=graphs)
    from rkspeech.cli import main

    log(f"build qwen3-tts (int4 CPU stages, lanes for {streams}) ...")
    rc = main(["build", "qwen3-tts", "--model-dir", str(root), "--out-dir", str(plan.parent), "--vocoder-plan",
               str(vplan), "--talker", "cpu-int4", "--code-predictor", "cpu-int4", "--talker-capacity", "256",
               "--skip-sim", "--gate", "off", "--streams", str(streams)])
    if rc != 0:
        raise SystemExit(f"build failed ({rc})")
    return root, plan


def _hwm_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_serve(root: str, plan: str, streams: int, requests: int, frames: int, repeats: int) -> dict:
    """One side: an in-process server (one engine, ``streams`` at once) and ``requests`` openai
    clients at once."""
    import openai

    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    sp = Speaker(root, plan, threads=2, streams=streams, options=GenerationOptions.greedy(max_new_tokens=frames + 1))
    pool = ServePool(speakers=[sp], max_queue=max(8, requests))
    st = ServerThread(pool, ServeOptions(http="127.0.0.1:0")).start()
    rate = sp.sample_rate
    peak = [0]

    def watch(done):
        while not done.is_set():
            peak[0] = max(peak[0], sp.batch.active if sp.batch is not None else 0)
            time.sleep(0.01)

    def one(text, out, k, t0):
        client = openai.OpenAI(base_url=f"http://{st.addresses['http']}/v1", api_key="x", max_retries=0, timeout=3600)
        first, n = None, 0
        with client.audio.speech.with_streaming_response.create(model="tts-1", voice=SPEAKER, input=text,
                                                                 response_format="pcm") as r:
            for piece in r.iter_bytes(4096):
                if first is None:
                    first = time.perf_counter() - t0
                n += len(piece)
        out[k] = {"first_s": first, "end_s": time.perf_counter() - t0, "audio_s": n / 2 / rate}

    def run_once() -> dict:
        out: list = [None] * requests
        done = threading.Event()
        w = threading.Thread(target=watch, args=(done,))
        w.start()
        t0 = time.perf_counter()
        ts = [threading.Thread(target=one, args=(TEXTS[k % len(TEXTS)], out, k, t0)) for k in range(requests)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        done.set()
        w.join()
        audio = sum(o["audio_s"] for o in out)
        return {"wall_s": wall, "audio_s": audio, "audio_s_per_s": audio / wall,
                "rtf_per_request": statistics.median(o["end_s"] / o["audio_s"] for o in out),
                "first_audio_s": statistics.median(o["first_s"] for o in out)}

    try:
        warm: list = [None]
        one(TEXTS[0], warm, 0, time.perf_counter())
        runs = [run_once() for _ in range(repeats)]
    finally:
        st.stop()
        sp.close()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {**med, "runs": runs, "batch_seen": peak[0], "peak_rss_mb": _hwm_mb()}


def child_speak(root: str, plan: str, streams: int | None, sentences: int, frames: int) -> dict:
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.long_text import stream_sentences
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    text = " ".join(TEXTS[k % len(TEXTS)] for k in range(sentences))
    with Speaker(root, plan, threads=2, streams=streams) as sp:
        timing = SpeechTiming()
        t0 = time.perf_counter()
        n = sum(c.size for c in stream_sentences(sp, text, options=GenerationOptions.greedy(max_new_tokens=frames + 1),
                                                 timing=timing, speaker=SPEAKER))
        wall = time.perf_counter() - t0
        return {"streams": sp.streams, "wall_s": wall, "audio_s": n / sp.sample_rate,
                "first_audio_s": timing.first_audio_s, "peak_rss_mb": _hwm_mb()}


def in_child(kind: str, **kw) -> dict:
    before = load()
    cmd = [sys.executable, __file__, "--child", json.dumps({"kind": kind, **kw})]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} {kw}: failed\n{out.stderr[-3000:]}")
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    rep["load_before"], rep["load_after"] = before, load()
    return rep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/bench_batch")
    ap.add_argument("--counts", default="1,2,4,8")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--sentence-frames", type=int, default=6)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plan", default=None, help="another plan of the same root (e.g. lanes for 2)")
    ap.add_argument("--skip-speak", action="store_true")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        kw = json.loads(args.child)
        kind = kw.pop("kind")
        rep = child_serve(**kw) if kind == "serve" else child_speak(**kw)
        print(json.dumps(rep))
        return 0
    counts = [int(c) for c in args.counts.split(",")]
    root, plan = prepare(Path(args.work), max(counts))
    if args.plan:
        plan = Path(args.plan)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
              "cpus": os.cpu_count(), "frames": args.frames, "repeats": args.repeats, "serve": [], "speak": []}
    common = {"root": str(root), "plan": str(plan), "frames": args.frames, "repeats": args.repeats}
    for n in counts:
        # one engine serving N requests in turn: its aggregate is one stream's rate, measured at 1 and 4
        for streams in ([1] if n in (1, 4) else []) + ([n] if n > 1 else []):
            label = "one engine" if streams == 1 else f"batched {n}"
            log(f"{label}, {n} request(s) at once (load {load()}) ...")
            rep = in_child("serve", streams=streams, requests=n, **common)
            report["serve"].append({"requests": n, "side": label, **rep})
            log(f"  {rep['audio_s_per_s']:.3f} audio s per s, per request RTF {rep['rtf_per_request']:.2f}, "
                f"first audio {rep['first_audio_s']:.2f} s, batch {rep['batch_seen']}, {rep['peak_rss_mb']:.0f} MB")
    for streams in () if args.skip_speak else (1, 2):
        log(f"speak {args.sentences} sentences, --streams {streams} (load {load()}) ...")
        rep = in_child("speak", root=str(root), plan=str(plan), streams=streams, sentences=args.sentences,
                       frames=args.sentence_frames)
        report["speak"].append(rep)
        log(f"  {rep['wall_s']:.1f} s wall for {rep['audio_s']:.2f} s of audio ({rep['streams']} streams), "
            f"{rep['peak_rss_mb']:.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
