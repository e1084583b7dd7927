"""Board time of N streams at once (``rkspeech estimate --plan P --streams N``): one weight read a step.

No board here: every figure is an estimate under the plan estimate's assumptions
(``estimate.plan_time``), and this module adds one model of batching, as ``runtime.tts.batch``
runs it over a plan's lanes graphs (``pipelines.lane_graphs``):

* **batched** (:data:`BATCHED`: the talker's decode step and the code predictor's step, CPU
  placed, when the plan holds their lanes graphs for at least N streams): one call serves the N
  streams' steps.  It reads the weights once and each stream's KV cache (bytes: weights + N x
  cache), and does N streams' arithmetic (MACs x N);
* **per stream** (everything else: the talker's prefill and the code predictor's start graph,
  which run each stream's rows apart; the host's heads; the vocoder): N times the calls.

The N streams then produce N audio seconds in the steady state's time (``plan_time``: the CPU
stages add up, the NPU stages add up, the two overlap, the shared DDR a floor): per-stream
real-time factor = that time / 1 s, aggregate audio seconds per second = N / it.  A plan without
lanes graphs (NPU-placed stages) runs its streams one at a time: N streams cost N times one (no
batched stage); a count beyond the plan's lanes is priced as a plan built with ``--streams N``
would run it (``rebuild``).  Time to first audio is that of a stream
joining a batch of N: its prefill alone, then the first vocoder step's frames at the batched calls'
time.  Not modelled: the host threads' own work per stream, waiting for a round's slowest stream.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

#: stages one call of whose lanes graph serves every stream (``plan_inputs.StageInput.name``)
BATCHED = ("talker decode", "code predictor")
#: the stream counts priced when the caller names none
DEFAULT_STREAMS = (1, 2, 4, 8)


def batch_stages(stages: list, n: int, lanes: bool) -> list:
    """``stages`` as ``n`` streams run them: :data:`BATCHED` CPU stages with one call for all
    (``lanes``: the plan has the lanes graphs), the others made ``n`` times."""
    out = []
    for s in stages:
        if lanes and s.name in BATCHED and s.unit == "cpu":
            call = replace(s.call, cache_bytes=s.call.cache_bytes * n, macs=s.call.macs * n)
            out.append(replace(s, call=call, copies=1, note=f"{s.note}; one call serves {n} streams (lanes graph)"))
        else:
            out.append(replace(s, copies=n))
    return out


def estimate_streams(stages: list, fps: float, a, counts, plan_lanes: int) -> dict[str, Any]:
    """Per stream count: per-stream real-time factor, aggregate audio seconds per second, time to
    first audio and the limiting unit; ``saturates_at``: the first count limited by the shared
    DDR or the NPU (where more streams stop adding audio), None when none is."""
    from rkspeech.estimate.plan_time import estimate_stages

    cpu_batched = all(any(s.name == b and s.unit == "cpu" for s in stages) for b in BATCHED)
    rows = []
    for n in counts:
        rep = estimate_stages(batch_stages(stages, n, cpu_batched), fps, a)
        steady = rep["steady_ms_per_audio_s"]
        rows.append({"streams": n, "batched": cpu_batched and n > 1, "rebuild": cpu_batched and n > max(plan_lanes, 1),
                     "rtf_per_stream": steady / 1000.0,
                     "audio_s_per_s": n * 1000.0 / steady if steady else None,
                     "first_audio_ms": (rep["time_to_first_audio"] or {}).get("ms"),
                     "limiting_unit": rep["limiting_unit"], "limiting_stage": rep["limiting_stage"],
                     "units_ms": {u: v["ms_per_audio_s"] for u, v in rep["units"].items()},
                     "ddr_floor_ms": rep["ddr_floor_ms_per_audio_s"]})
    one = rows[0]["audio_s_per_s"] if rows and rows[0]["streams"] == 1 else None
    for r in rows:
        r["gain_vs_one"] = r["audio_s_per_s"] / one if one and r["audio_s_per_s"] else None
    saturated = next((r["streams"] for r in rows if r["limiting_unit"] and (
        r["limiting_unit"].startswith("shared") or r["limiting_unit"].startswith("npu"))), None)
    notes = []
    if not cpu_batched:
        notes.append("the talker and the code predictor are not both CPU stages: no lanes graphs, streams run one "
                     "at a time (N streams cost N times one)")
    elif any(n > plan_lanes for n in counts):
        notes.append(f"the plan's lanes graphs serve {plan_lanes} stream(s): larger counts are priced as a plan built "
                     "with build qwen3-tts --streams N would run them")
    return {"plan_lanes": plan_lanes, "rows": rows, "saturates_at": saturated, "notes": notes}
