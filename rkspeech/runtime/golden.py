"""Golden replays: a few consecutive steps of one graph, their inputs and what the simulator
computed, kept beside the .rknn (``X.rknn`` -> ``X.golden.npz``, ``plan.integrity.golden_path``)
so a board can replay them and say whether it computes the same (``rkspeech check-board``).

A golden holds the inputs of ``steps`` calls and a ``chain``: how a stateful graph's cache input
follows from the previous call, so a replay feeds each graph's *own* cache forward (the board's
cache, not the simulator's) and a cache the board corrupts shows in the next step:

* ``state``: input ``cache_in`` of step k is output ``cache_out`` of step k-1 (the vocoder);
* ``kv_write``: the host's KV buffer (``cache``, or ``cache_k{i}`` / ``cache_v{i}``) of step k is
  that of step k-1 with the step's ``kv_new`` rows written at its positions (talker, code
  predictor step; as ``runtime.tts.talker_backend`` does).

The NPU graphs' goldens are seeded inputs (:func:`golden_inputs`) and the simulator's outputs; the
CPU stages' (``pipelines.cpu_goldens``) are calls a generation really made and the build host's
onnxruntime outputs (:func:`golden_from_calls`).

Inputs are deterministic (seeded) and shaped by the graph's contract: vocoder codes drawn from the
codebook, RoPE angles and slot counts of positions 0, B, 2B...; talker embeddings N(0, 1) with the
cos/sin and mask of their positions; an encoder window given by the build (its check mel).  Chained
inputs are stored for step 0 only (zeros: they compress to nothing).  Outputs: every step's, except a
``state`` output (the vocoder's 1.3 M-value cache at the published size), kept for the last step
only; a float array whose values are all float16 (the NPU's fp16 outputs, a piece's input that is
the previous piece's output) is stored as float16, losslessly.  Size, reduced builds (measured 2026-12-01): docs/board.md.

numpy only (a board has it); the file is a compressed .npz with one JSON entry ``meta``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

GOLDEN_FORMAT = "rkspeech-golden/1"
#: consecutive calls per stateful graph: step 0 fills the cache, steps 1-2 read it back
GOLDEN_STEPS = 3
SEED = 20261201


@dataclass
class Golden:
    graph: str
    inputs: list[dict[str, np.ndarray]]  # per step, the inputs not chained from the step before
    chain: list[dict] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)  # per step (state outputs: last only)
    meta: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.inputs)

    def state_outputs(self) -> set[str]:
        return {c["output"] for c in self.chain if c["kind"] == "state"}

    def feed(self, step: int, prev_feed: dict | None, prev_out: dict | None) -> dict[str, np.ndarray]:
        """The inputs of call ``step``: its own, plus the chained ones from the call before."""
        feed = dict(self.inputs[step])
        if step == 0:
            return feed
        for c in self.chain:
            if c["kind"] == "state":
                feed[c["input"]] = prev_out[c["output"]]
            elif c["kind"] == "kv_write":
                pos, n = int(c["positions"][step - 1]), int(c["rows"])
                kv = np.asarray(prev_out[c["output"]], dtype=np.float32)
                if c["layout"] == "flat":
                    cache = np.array(prev_feed[c["input"]], dtype=np.float32)
                    cache[:, :, pos:pos + n] = kv[:, :, :n]
                    feed[c["input"]] = cache
                else:
                    for i in range(kv.shape[0] // 2):
                        for j, kvn in enumerate("kv"):
                            name = f"cache_{kvn}{i}"
                            cache = np.array(prev_feed[name], dtype=np.float32)
                            cache[0, :, pos:pos + n] = kv[2 * i + j, :, :n]
                            feed[name] = cache
        return feed


@dataclass
class Call:
    outputs: dict[str, np.ndarray]
    seconds: float


def replay(runner, golden: Golden, *, graph: str | None = None):
    """Run every golden step on ``runner``, chaining its own outputs; yields one :class:`Call`
    per step.  An error from the runtime names the graph and the step."""
    prev_feed = prev_out = None
    for k in range(golden.steps):
        feed = golden.feed(k, prev_feed, prev_out)
        t0 = time.perf_counter()
        try:
            out = runner.infer(feed)
        except RkspeechError as exc:
            raise RkspeechError(f"{graph or golden.graph}, step {k}: {exc}") from None
        seconds = time.perf_counter() - t0
        yield Call(out, seconds)
        prev_feed, prev_out = feed, out


# ---- inputs from a graph's contract ------------------------------------------------------------

def golden_inputs(graph: str, contract, input_specs: dict, *, steps: int = GOLDEN_STEPS,
                  given: dict[str, np.ndarray] | None = None, seed: int = SEED) -> Golden:
    """A :class:`Golden` without outputs for a graph whose ``contract`` (a ``Contract`` or None)
    and ``input_specs`` (name -> (shape, dtype)) are given; ``given``: inputs of a one-call graph
    (an encoder window)."""
    from rkspeech.contracts.talker import TalkerContract
    from rkspeech.contracts.vocoder import VocoderContract

    rng = np.random.default_rng(seed)
    if isinstance(contract, VocoderContract):
        return _vocoder(graph, contract, input_specs, steps, rng)
    if isinstance(contract, TalkerContract):
        return _talker(graph, contract, input_specs, steps, rng)
    feed = {}
    for name, (shape, dtype) in input_specs.items():
        if given and name in given:
            feed[name] = np.asarray(given[name]).astype(dtype, copy=False)
        elif np.dtype(dtype).kind == "f":
            feed[name] = rng.standard_normal([int(d) for d in shape]).astype(dtype)
        else:
            feed[name] = np.zeros([int(d) for d in shape], dtype)
    return Golden(graph, [feed], meta={"inputs": "given" if given else "random normal"})


def _vocoder(graph, c, specs, steps, rng) -> Golden:
    from rkspeech.stepgraph.host import cache_valid, inverse_frequencies, rope_angles

    inv = inverse_frequencies(c.head_dim, c.rope_theta)
    B = c.codes_length
    codes_shape, codes_dtype = specs["audio_codes"]
    feeds = []
    for k in range(steps):
        feed = {"audio_codes": rng.integers(0, c.codebook_size, [int(d) for d in codes_shape]).astype(codes_dtype),
                "freqs_in": rope_angles(k * B, B, inv), "cache_valid": cache_valid(k * B, c.kv_slots)}
        if k == 0:
            shape, dtype = specs["cache_in"]
            feed["cache_in"] = np.zeros([int(d) for d in shape], dtype)
        feeds.append(feed)
    return Golden(graph, feeds, [{"kind": "state", "input": "cache_in", "output": "cache_out"}],
                  meta={"inputs": f"codes uniform in [0, {c.codebook_size}), positions 0, {B}, ..."})


def _talker(graph, c, specs, steps, rng) -> Golden:
    from rkspeech.stepgraph.host import numpy_inverse_frequencies, numpy_rope_cos_sin, step_mask

    B = c.B
    steps = max(1, min(steps, c.capacity // B))
    inv = numpy_inverse_frequencies(c.head_dim, c.rope_theta)
    feeds = []
    for k in range(steps):
        start = k * B
        cos, sin = numpy_rope_cos_sin(np.arange(start, start + B), inv)
        feed = {"embeds": rng.standard_normal((B, c.hidden)).astype(np.float32), "cos": cos, "sin": sin,
                "mask": step_mask(c, start)}
        if k == 0:
            for name in specs:
                if name.startswith("cache"):
                    shape, dtype = specs[name]
                    feed[name] = np.zeros([int(d) for d in shape], dtype)
        feeds.append(feed)
    chain = [{"kind": "kv_write", "input": "cache", "output": "kv_new", "rows": B,
              "layout": c.cache_io, "positions": [k * B for k in range(steps - 1)]}]
    return Golden(graph, feeds, chain, meta={"inputs": f"embeds N(0, 1) at positions 0, {B}, ..."})


# ---- calls recorded from a generation --------------------------------------------------------

def _cache_names(feed: dict) -> list[str]:
    return [n for n in feed if n == "cache" or n.startswith(("cache_k", "cache_v"))]


def golden_from_calls(graph: str, contract, feeds: list[dict], outputs: list[dict], **meta) -> Golden:
    """A :class:`Golden` of calls a graph really made (``feeds`` and ``outputs`` as a
    ``core.capture.RecordingRunner`` keeps them: the CPU stages' goldens, recorded during a
    generation).  A step graph (``contract`` a ``TalkerContract``) whose calls follow one another
    (each call's cache is the previous call's with its ``kv_new`` written at the previous call's
    position, read off its mask) is chained (``kv_write``), so its cache is stored for the first
    call only and a board's own cache is carried forward; any other graph, or calls that do not
    follow (a prefill of each utterance, a frame's start graph from an empty cache) keep every
    feed as it was."""
    from rkspeech.contracts.talker import TalkerContract

    feeds = [dict(f) for f in feeds]
    golden = Golden(graph, feeds, outputs=[dict(o) for o in outputs], meta=dict(meta))
    names = _cache_names(feeds[0]) if feeds else []
    if not isinstance(contract, TalkerContract) or not names or len(feeds) < 2 or "kv_new" not in outputs[0]:
        return golden
    cap = contract.capacity
    starts = [int(np.count_nonzero(np.asarray(f["mask"])[0, :cap] == 0)) for f in feeds]
    chain = [{"kind": "kv_write", "input": "cache", "output": "kv_new", "rows": contract.B,
              "layout": contract.cache_io, "positions": starts[:-1]}]
    trial = Golden(graph, feeds, chain)
    for k in range(1, len(feeds)):
        fed = trial.feed(k, feeds[k - 1], outputs[k - 1])
        if not all(np.array_equal(fed[n], feeds[k][n]) for n in names):
            return golden  # the calls do not follow one another: every feed kept
    for f in feeds[1:]:
        for n in names:
            del f[n]
    golden.chain = chain
    return golden


def golden_bytes(golden: Golden) -> dict[str, int]:
    """What a golden holds, uncompressed: ``state`` (the first call's cache, a chained graph's
    stored state), ``inputs`` (the rest of the inputs), ``outputs``."""
    names = set(_cache_names(golden.inputs[0])) if golden.inputs else set()
    state = sum(np.asarray(a).nbytes for n, a in golden.inputs[0].items() if n in names) if golden.inputs else 0
    ins = sum(np.asarray(a).nbytes for f in golden.inputs for a in f.values())
    return {"state": int(state), "inputs": int(ins - state),
            "outputs": int(sum(np.asarray(a).nbytes for o in golden.outputs for a in o.values()))}


# ---- file --------------------------------------------------------------------------------------

def _exact_fp16(a: np.ndarray) -> bool:
    if a.dtype != np.float32:
        return False
    with np.errstate(over="ignore"):
        return bool(np.array_equal(a.astype(np.float16).astype(np.float32), a))


def save_golden(path: str | os.PathLike, golden: Golden) -> Path:
    """Write ``golden`` (outputs filled) as a compressed .npz, atomically."""
    from rkspeech.core.atomic import atomic_path

    arrays: dict[str, np.ndarray] = {}
    for k, feed in enumerate(golden.inputs):
        for n, a in feed.items():
            a = np.asarray(a)
            arrays[f"in/{k}/{n}"] = a.astype(np.float16) if _exact_fp16(a) and a.any() else a
    for k, out in enumerate(golden.outputs):
        for n, a in out.items():
            a = np.asarray(a)
            arrays[f"out/{k}/{n}"] = a.astype(np.float16) if _exact_fp16(a) else a
    meta = {"format": GOLDEN_FORMAT, "graph": golden.graph, "steps": golden.steps, "chain": golden.chain,
            **golden.meta}
    arrays["meta"] = np.array(json.dumps(meta))
    path = Path(path)
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
    return path


def load_golden(path: str | os.PathLike) -> Golden:
    """Read a golden file; a malformed one is a one-line error naming it."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != GOLDEN_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {GOLDEN_FORMAT}")
            steps = int(meta["steps"])
            inputs: list[dict] = [{} for _ in range(steps)]
            outputs: list[dict] = [{} for _ in range(steps)]
            for key in z.files:
                if key == "meta":
                    continue
                kind, k, name = key.split("/", 2)
                (inputs if kind == "in" else outputs)[int(k)][name] = z[key]
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise RkspeechError(f"{path}: not a readable golden replay ({exc}); rebuild") from None
    for out in inputs + outputs:  # float16 on disk where that was exact
        for n, a in out.items():
            if a.dtype == np.float16:
                out[n] = a.astype(np.float32)
    chain = meta.pop("chain", [])
    return Golden(str(meta.get("graph", path.stem)), inputs, chain, outputs, meta)


def record_golden(path: str | os.PathLike, golden: Golden, runner, *, source: str, **meta) -> dict:
    """Run ``golden``'s steps on ``runner`` (the simulator, or onnxruntime when a build skips
    it), keep its outputs and write the file; returns a small report (bytes, steps, seconds)."""
    state = golden.state_outputs()
    calls = list(replay(runner, golden))
    golden.outputs = [{n: a for n, a in c.outputs.items() if n not in state or k == len(calls) - 1}
                      for k, c in enumerate(calls)]
    golden.meta.update({"source": source, **meta})
    p = save_golden(path, golden)
    return {"golden": str(p), "bytes": p.stat().st_size, "steps": golden.steps, "source": source,
            "seconds": [round(c.seconds, 4) for c in calls]}
