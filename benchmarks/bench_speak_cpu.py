"""``speak`` with CPU stages vs the official qwen-tts (issue 26, deliver 4; a benchmark, not a test).

One run, one synthetic model root (custom-voice, seed 0; ``--config published`` is the 0.6B
shape), one text, greedy, ``--frames`` frames per utterance (random weights never stop), these
sides, each in its own child process (its own peak RSS; one model in memory at a time):

* ``official``: qwen-tts 0.1.1 ``generate`` then the official 12 Hz decoder over all codes
  (torch fp32; ``benchmarks/bench_tts.py``'s reference: it does not stream, so its time to first
  audio is its total);
* ``torch``: ``Speaker`` over a vocoder-only plan: the talker and code predictor in torch (the
  torch loop), the vocoder on onnxruntime;
* ``fp32`` / ``int8`` / ``int4`` / ``int4-b128s``: ``Speaker`` over a plan whose talker (prefill +
  decode) and code predictor step graphs are the CPU export (``pipelines.cpu_stages.CPU_EXPORT``)
  in that weight variant (``convert.cpu_quant``; ``int4-b128s``: block 128, symmetric), the numpy
  host loop, the vocoder on onnxruntime.

The vocoder is the same pair of exact host step graphs (first B=``--first-length``, default 2,
main B=16) on onnxruntime in every ``Speaker`` side; ``speak``'s eager steps use the first graph
after the first step too, so its B sets both the time to first audio and how long the last step
runs after generation ends (docs/speak.md has the per-B costs).  Per side: time to first audio, total and real-time factor (medians of
``--repeats`` after one untimed warm-up), the split (talker graph, code predictor graph, host loop,
vocoder), peak RSS (the child's ``VmHWM``), the bytes the talker and code predictor read per
frame (weights + KV cache; the lower bound on their time at the host's measured stream rate) and
greedy agreement with ``fp32`` over the same frames.  Load average before and after each side.

    .venv/bin/python benchmarks/bench_speak_cpu.py --config published --frames 20 --repeats 3 --json R.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TEXT = "Hello world. This is a test of streaming speech, one frame at a time."
SPEAKER, LANGUAGE = "ryan", "english"
SIDES = ("official", "torch", "fp32", "int8", "int4", "int4-b128s")
VARIANTS = ("fp32", "int8", "int4", "int4-b128s")
#: each variant's placement and the ``CpuQuantOptions`` fields beyond the placement's defaults
#: (``int4-b128s``: ``build qwen3-tts --int4-block 128 --int4-symmetric``)
VARIANT_OPTIONS = {"fp32": ("cpu-fp32", {}), "int8": ("cpu-int8", {}), "int4": ("cpu-int4", {}),
                   "int4-b128s": ("cpu-int4", {"block_size": 128, "symmetric": True})}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def uptime() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# -- preparation (cached in --work) -----------------------------------------------------------------

def prepare(work: Path, config: str, capacity: int, prefill: int, first: int, start: bool = True) -> dict:
    """Model root, vocoder graphs (``first``: the first / eager step's B), the CPU stage graphs in
    every variant (``start``: with the code predictor's start graph, as the build writes them) and
    one plan per side."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    work.mkdir(parents=True, exist_ok=True)
    root = work / f"tts_{config}_custom-voice_seed0"
    if not (root / "config.json").exists():
        write_tts_checkpoint(root, config, "custom-voice", seed=0)
    d = work / f"graphs_{config}_cap{capacity}_B{prefill}"
    tag = f"first{first}" + ("_start" if start else "")
    plans = {"torch": d / f"plan_vocoder_{tag}.json", **{v: d / f"plan_{v}_{tag}.json" for v in VARIANTS}}
    if all(p.exists() for p in plans.values()):
        return {"root": root, "plans": plans, "graphs": d}
    d.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(2)
    from rkspeech.contracts.read import read_contract, read_onnx_metadata
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.pipelines.cpu_stages import export_cpu_code_predictor, export_cpu_talker
    from rkspeech.plan.plan import write_plan
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.step import VocoderStep

    steps = {"first": d / f"vocoder_step_B{first}.onnx", "main": d / "vocoder_step_B16.onnx"}
    if not all(p.exists() for p in steps.values()):
        voc, _, _ = load_vocoder(root / "speech_tokenizer")
        for role, B in (("first", first), ("main", 16)):
            if not steps[role].exists():
                export_step_onnx(VocoderStep(voc, B), steps[role])
        del voc
    write_plan(plans["torch"], placement="cpu-fp32", target=None,
               contracts={r: read_contract(p) for r, p in steps.items()}, onnx=steps)
    fp32 = {"prefill": d / f"talker_prefill_B{prefill}_cap{capacity}.onnx",
            "decode": d / f"talker_decode_B1_cap{capacity}.onnx", "step": d / "code_predictor_step.onnx"}
    if not all(p.exists() for p in fp32.values()):
        tts = TTSModel.load(root)
        log("exporting the talker pair and the code predictor step (CPU export)")
        talker = export_cpu_talker(tts.net.talker.model, d, capacity=capacity, prefill_B=prefill)
        assert talker == {k: fp32[k] for k in ("prefill", "decode")}, talker
        export_cpu_code_predictor(tts.net.talker.code_predictor, fp32["step"])
        del tts

    def contract(path):
        return json.loads(read_onnx_metadata(path)["rkspeech.contract"])

    lazy = None  # the torch model, loaded once if a start graph is exported
    for v in VARIANTS:
        if plans[v].exists():
            continue
        placement, extra = VARIANT_OPTIONS[v]
        if v == "fp32":
            files, record = dict(fp32), None
        else:
            files, per_graph = {}, {}
            for role, src in fp32.items():
                files[role] = d / f"{src.stem}.{v}.onnx"
                per_graph[role] = quantize_step_graph(src, files[role], CpuQuantOptions.for_placement(placement, **extra))
            one = next(iter(per_graph.values()))
            from rkspeech.pipelines.cpu_stages import GRAPH_KEYS, SHARED_KEYS

            record = {k: one[k] for k in SHARED_KEYS if k in one}
        raw = json.loads(plans["torch"].read_text())
        tq = cq = None
        if record:
            tq = {**record, "graphs": {r: {k: per_graph[r][k] for k in GRAPH_KEYS if k in per_graph[r]}
                                       for r in ("prefill", "decode")}}
            cq = {**record, "graphs": {"step": {k: per_graph["step"][k] for k in GRAPH_KEYS if k in per_graph["step"]}}}
        raw["talker"] = stage_section(target=None, placement=placement, quantization=tq,
                                      artifacts={r: {"onnx": files[r]} for r in ("prefill", "decode")},
                                      contract=contract(files["decode"]), base=d)
        heads, first_two = {}, {}
        from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
        from rkspeech.pipelines.resumable import RunEveryStage

        model_files = resolve_model_root(root)
        if record:  # the code predictor's heads quantized alike, as the build does (pipelines.cpu_heads)
            from rkspeech.pipelines.cpu_heads import quantize_heads

            heads = quantize_heads(RunEveryStage(), placement, model_files, d / f"heads_{v}", int4=extra)
        if start:  # its start graph (pipelines.cpu_start), exported and written alike
            from rkspeech.models.qwen3_tts.generate import LazyTTSModel
            from rkspeech.pipelines.cpu_start import build_start

            lazy = lazy or LazyTTSModel(model_files)
            first_two = build_start(RunEveryStage(), placement, model_files, lazy, d / f"start_{v}", int4=extra)
        raw["code_predictor"] = stage_section(target=None, placement=placement, quantization=cq,
                                              artifacts={"step": {"onnx": files["step"]}},
                                              contract=contract(files["step"]), base=d, heads=heads.get("heads"),
                                              start=first_two.get("start"))
        plans[v].write_text(json.dumps(raw, indent=1))
    return {"root": root, "plans": plans, "graphs": d}


def stream_rate_gbps(mb: int = 512) -> float:
    """This host's single-thread read rate (numpy sum over ``mb`` MB, best of 3), GB/s."""
    a = np.ones(mb * 2**20 // 4, dtype=np.float32)
    best = min(_timed(a.sum) for _ in range(3))
    return a.nbytes / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def frame_bytes(plan_path: Path | None, cfg, capacity: int) -> dict:
    """Bytes the talker and the code predictor read per frame: one decode call (its weights, its
    whole cache: the graph attends over every slot) + 16 code predictor steps (weights + cache;
    with a start graph 14 steps and the start call's weights),
    + the host heads (codec head, 15 code predictor heads, fp32).  ``plan_path`` None: the torch
    stacks (fp32 weights, k/v not repeated, the cache as long as the utterance: counted at
    ``capacity`` too, an upper bound)."""
    t, c = cfg.talker, cfg.code_predictor
    host = 4 * (t.vocab_size * t.hidden_size + (c.num_code_groups - 1) * c.vocab_size * c.hidden_size)
    if plan_path is None:
        def stack(s):
            hd, h = s.head_dim, s.hidden_size
            per = (h * s.num_attention_heads * hd * 2 + h * s.num_key_value_heads * hd * 2
                   + 3 * h * s.intermediate_size + 2 * h + 2 * hd)
            return 4 * s.num_hidden_layers * per
        cache_t = 4 * 2 * t.num_hidden_layers * t.num_key_value_heads * capacity * t.head_dim
        cache_c = 4 * 2 * c.num_hidden_layers * c.num_key_value_heads * c.num_code_groups * c.head_dim
        talker, cp = stack(t) + cache_t, c.num_code_groups * (stack(c) + cache_c)
    else:
        from rkspeech.plan.plan import load_plan

        plan = load_plan(plan_path, backend="ort")
        tk, cps = plan.stages["talker"], plan.stages["code_predictor"]
        dec = tk.paths("ort")["decode"]
        step = cps.paths("ort")["step"]
        from rkspeech.contracts.read import read_contract
        from rkspeech.contracts.talker import TalkerContract

        ct, cc = read_contract(dec, TalkerContract), read_contract(step, TalkerContract)
        cache = lambda k: 4 * int(np.prod(k.cache_shape()))  # noqa: E731
        talker = dec.stat().st_size + cache(ct)
        cp = c.num_code_groups * (step.stat().st_size + cache(cc))
        if cps.start is not None:  # positions 0-1 in one start call: one weight read a frame fewer
            cp += cps.start.stat().st_size - 2 * step.stat().st_size
        if cps.heads:  # quantized head graphs: their files, the codec head still fp32
            host = 4 * t.vocab_size * t.hidden_size + sum(p.stat().st_size for p in cps.heads.values())
    return {"talker": talker, "code_predictor": cp, "host_heads": host, "total": talker + cp + host}


# -- one side, in a child process ------------------------------------------------------------------

class GraphClock:
    """Wall time inside the stage graphs' ``Runner.infer`` (benchmark only)."""

    def __init__(self):
        self.s = {"talker": 0.0, "code_predictor": 0.0}

    def wrap(self, runner, name: str) -> None:
        fn = runner.infer

        def timed(feed):
            t = time.perf_counter()
            try:
                return fn(feed)
            finally:
                self.s[name] += time.perf_counter() - t

        runner.infer = timed

    def reset(self) -> None:
        self.s = dict.fromkeys(self.s, 0.0)


def run_side(side: str, prep: dict, args) -> dict:
    import torch  # noqa: F401 - the official side and the torch loop need it; thread count for all

    torch.set_num_threads(args.threads)
    if side == "official":
        from bench_tts import setup_reference

        ns = argparse.Namespace(threads=args.threads, text=args.text, first_B=4)
        s = setup_reference(prep["root"], ns)
        rows = []
        for _ in range(args.repeats):
            row, codes, _ = s.once(args.frames)
            rows.append(row)
            log(f"  official: TTFA {row['ttfa_s']:.2f} s, RTF {row['rtf']:.2f}")
        return {"load_s": s.load_s, "rows": rows, "codes": codes.tolist()}

    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    t0 = time.perf_counter()
    sp = Speaker(prep["root"], prep["plans"][side], backend="ort",
                 threads=args.vocoder_threads if args.vocoder_threads is not None else args.threads,
                 stage_threads=args.stage_threads)
    load_s = time.perf_counter() - t0
    clock = GraphClock()
    for name, b in sp.stage_backends.items():
        stack = getattr(b, "stack", b)  # CodebookCodePredictor holds a GraphTalker
        for r in ([stack.decode[0]] + ([stack.prefill[0]] if stack.prefill else [])) if hasattr(stack, "decode") \
                else [getattr(stack, "runner")]:
            clock.wrap(r, name)
    rate = sp.sample_rate

    def once(frames: int):
        timing, codes = SpeechTiming(), []
        clock.reset()
        t = time.perf_counter()
        n = sum(c.size for c in sp.stream(args.text, speaker=SPEAKER, language=LANGUAGE, codes_out=codes,
                                          timing=timing, options=GenerationOptions.greedy(max_new_tokens=frames + 1)))
        total = time.perf_counter() - t
        st = timing.stages
        g = clock.s if sp.stage_backends else {"talker": st.get("talker_s", 0.0),
                                                 "code_predictor": st.get("code_predictor_s", 0.0)}
        row = {"ttfa_s": timing.first_audio_s, "total_s": total, "audio_s": n / rate, "rtf": total / (n / rate),
               "talker_s": g["talker"], "code_predictor_s": g["code_predictor"],
               "host_loop_s": timing.generate_s - g["talker"] - g["code_predictor"],
               "generate_s": timing.generate_s, "vocoder_s": timing.vocoder_s, "frames": timing.frames,
               "talker_calls": st.get("talker_calls"), "code_predictor_calls": st.get("code_predictor_calls")}
        return row, np.stack(codes)

    once(5)  # warm-up
    rows = []
    for _ in range(args.repeats):
        row, codes = once(args.frames)
        rows.append(row)
        log(f"  {side}: TTFA {row['ttfa_s']:.2f} s, RTF {row['rtf']:.2f} (talker {row['talker_s']:.2f}, "
            f"code predictor {row['code_predictor_s']:.2f}, host {row['host_loop_s']:.2f}, "
            f"vocoder {row['vocoder_s']:.2f})")
    names = sp.stage_names
    sp.close()
    return {"load_s": load_s, "rows": rows, "codes": codes.tolist(), "stages": names}


def peak_rss_gb() -> float:
    """This process's peak RSS: ``VmHWM`` (kept per address space, so a child started after the
    parent prepared the graphs does not report the parent's peak, as ``ru_maxrss`` does across
    fork and exec: every side read 7.41 GB in a run whose parent exported a vocoder graph)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def child(args) -> int:
    prep = prepare(Path(args.work), args.config, args.capacity, args.prefill, args.first_length, not args.no_start)
    before = uptime()
    out = run_side(args.side, prep, args)
    out.update(load_before=before, load_after=uptime(),
               peak_rss_gb=peak_rss_gb())
    Path(args.child_out).write_text(json.dumps(out))
    return 0


# -- the run -----------------------------------------------------------------------------------------

def agreement(codes: np.ndarray, ref: np.ndarray) -> dict:
    n = min(len(codes), len(ref))
    a, b = codes[:n], ref[:n]
    diff = np.nonzero((a != b).any(axis=1))[0]
    return {"frames": n, "codes_equal": round(float((a == b).mean()), 4),
            "identical": bool(len(codes) == len(ref) and not len(diff)),
            "first_diverging_frame": int(diff[0]) if len(diff) else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=["reduced", "published"], default="published")
    ap.add_argument("--frames", type=int, default=20, help="frames per utterance (12.5 per second of audio)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch and onnxruntime threads (the vocoder's)")
    ap.add_argument("--stage-threads", type=int, default=None,
                    help="onnxruntime threads of the CPU talker / code predictor (default: the runtime's)")
    ap.add_argument("--vocoder-threads", type=int, default=None,
                    help="onnxruntime threads of the vocoder in the speak sides (default: --threads; torch and "
                         "the official side keep --threads)")
    ap.add_argument("--capacity", type=int, default=256, help="talker graphs' KV positions")
    ap.add_argument("--prefill", type=int, default=32, help="talker prefill graph's B")
    ap.add_argument("--first-length", type=int, default=2,
                    help="B of the vocoder's first graph, which speak's eager steps use after the first too "
                         "(build qwen3-tts --first-length; default 2: docs/speak.md)")
    ap.add_argument("--no-start", action="store_true",
                    help="CPU sides without the code predictor's start graph (two step calls for positions 0-1)")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated subset of {', '.join(SIDES)}")
    ap.add_argument("--work", default="/tmp/rkspeech_bench_speak_cpu", help="cache (model root, graphs, plans)")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--json", default=None, help="write the report here")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        return child(args)
    sides = [s for s in args.sides.split(",") if s]
    bad = [s for s in sides if s not in SIDES]
    if bad:
        ap.error(f"unknown sides {bad}; choose from {SIDES}")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    log(f"start {started}; {uptime()}")
    prep = prepare(Path(args.work), args.config, args.capacity, args.prefill, args.first_length, not args.no_start)
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root

    cfg = read_tts_config(resolve_model_root(prep["root"]))
    rate = stream_rate_gbps()
    results: dict = {}
    for side in sides:
        out = Path(args.work) / f"side_{side}.json"
        cmd = [sys.executable, __file__, "--side", side, "--child-out", str(out)] + [
            a for a in (argv if argv is not None else sys.argv[1:])]
        log(f"{side}: {uptime()}")
        subprocess.run(cmd, check=True)
        results[side] = json.loads(out.read_text())
    ref = np.asarray(results["fp32"]["codes"]) if "fp32" in results else None
    report = {"benchmark": "speak with CPU stages (issue 26, deliver 4)", "date": started,
              "host": os.uname().nodename, "cpu_count": os.cpu_count(), "threads": args.threads,
              "vocoder_threads": args.vocoder_threads, "stage_threads": args.stage_threads,
              "vocoder_first_length": args.first_length,
              "code_predictor_start": not args.no_start, "config": args.config, "frames": args.frames,
              "repeats": args.repeats, "capacity": args.capacity, "text": args.text,
              "stream_rate_gbps": round(rate, 2), "sides": {}}
    for side, r in results.items():
        med = {k: statistics.median(row[k] for row in r["rows"]) for k in r["rows"][0]
               if isinstance(r["rows"][0][k], (int, float)) and r["rows"][0][k] is not None}
        fb = None if side == "official" else frame_bytes(prep["plans"][side] if side in VARIANTS else None, cfg,
                                                         args.capacity)
        codes = np.asarray(r["codes"])
        report["sides"][side] = {
            "median": med, "rows": r["rows"], "load_s": r["load_s"], "peak_rss_gb": round(r["peak_rss_gb"], 2),
            "load_before": r["load_before"], "load_after": r["load_after"], "stages": r.get("stages"),
            "bytes_per_frame": fb,
            "bound_ms_per_frame": None if fb is None else round(fb["total"] / rate / 1e6, 1),
            "agreement_with_fp32": None if ref is None else agreement(codes, ref)}
        if "official" in results and side != "official":
            report["sides"][side]["agreement_with_official"] = agreement(codes, np.asarray(results["official"]["codes"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    return 0


def print_table(rep: dict) -> None:
    sides = rep["sides"]
    print(f"\nspeak with CPU stages, {rep['config']} synthetic custom-voice, greedy, {rep['frames']} frames, "
          f"threads {rep['threads']} (vocoder {rep.get('vocoder_threads') or rep['threads']}, stages "
          f"{rep['stage_threads'] or 'default'}), vocoder first / eager B={rep.get('vocoder_first_length', 4)}, "
          f"median of {rep['repeats']}, "
          f"{rep['date']}; host stream rate {rep['stream_rate_gbps']} GB/s")
    cols = list(sides)
    print("| | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))

    def row(label, fn):
        print(f"| {label} | " + " | ".join(fn(sides[c]) for c in cols) + " |")

    m = lambda k, f="{:.2f}": lambda s: f.format(s["median"][k]) if s["median"].get(k) is not None else "-"  # noqa: E731
    row("real-time factor", m("rtf"))
    row("time to first audio, s", m("ttfa_s"))
    row("total, s", m("total_s"))
    row("talker, s", m("talker_s"))
    row("code predictor, s", m("code_predictor_s"))
    row("host loop / generate rest, s", lambda s: "{:.2f}".format(s["median"].get("host_loop_s",
                                                                                s["median"].get("generate_rest_s", 0))))
    row("vocoder, s", m("vocoder_s"))
    row("peak RSS, GB", lambda s: f"{s['peak_rss_gb']:.2f}")
    row("GB read per frame (bound ms)", lambda s: "-" if not s["bytes_per_frame"] else
        f"{s['bytes_per_frame']['total'] / 1e9:.2f} ({s['bound_ms_per_frame']})")
    row("codes equal to fp32", lambda s: "-" if not s["agreement_with_fp32"] else
        f"{100 * s['agreement_with_fp32']['codes_equal']:.1f} %")
    row("load before / after", lambda s: f"{s['load_before'].split(': ')[1].split(',')[0]} / "
        f"{s['load_after'].split(': ')[1].split(',')[0]}")
    base = sides.get("official")
    if base:
        for c in cols:
            if c != "official":
                s = sides[c]["median"]
                print(f"{c}: {base['median']['rtf'] / s['rtf']:.2f}x faster than official, first audio "
                      f"{s['ttfa_s'] / base['median']['ttfa_s']:.3f} of official's")
    if "fp32" in sides and "int4" in sides:
        print(f"int4 vs fp32 graphs: {sides['fp32']['median']['rtf'] / sides['int4']['median']['rtf']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
