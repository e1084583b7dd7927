"""The accuracy gate: is a quantized (or otherwise approximate) talker / code predictor safe to place?

Each stage is measured against its fp32 graph over many utterances (``GATE_TEXTS``, speakers and
languages cycled over the checkpoint's own lists: ``core.capture.cycled_requests``), in the prompt
form the checkpoint records (``TTSConfig.default_text_in_prompt``; the trained synthetic checkpoint
is confident only in the streaming form), through the generation loop of the model it is given: the build gives it
``runtime.tts.numpy_loop.NumpyTTSModel`` with the stages opened for it (``pipelines.stage_gate``),
the loop ``speak`` runs on a stage plan (the numpy host, its RoPE recipe, its heads):

* **reference**: greedy generation with the fp32 stages, recorded
  (``quantized_stage.record_greedy_reference``), at most ``frames`` frames per utterance;
* **teacher forced** (per decision): the stage fed the reference's inputs
  (``talker_agreement`` / ``code_predictor_agreement``): top-1 agreement, logit SNR, the fp32
  margins, and for the talker the stop decision per utterance;
* **free running** (per utterance): greedy generation again with this stage swapped for its
  variant, the other stage kept at the reference: the first frame whose codes differ, whether the
  utterance stops at the same frame, the share of the reference's codes reproduced.  This is
  where a lost stop token or a run-away shows (issue 27: quantized speech LMs elsewhere lost
  theirs).

The approximate backend may be a quantized graph on onnxruntime or an NPU-placed stage's graph on
the rknn-toolkit2 simulator (issue 39): the same loop, the same marks.  NPU stages are measured
only where the gate can vouch (``run_gate``'s ``vouched_only``): a random root's flat logits fail
the measurement itself, and its fp16 noise flips decisions that mean nothing.  A NaN logit SNR
(an fp16 overflow) fails the SNR mark.

:func:`judge` holds the figures against ``GateThresholds`` (defaults: ``core.thresholds``, set
from figures measured on the confident checkpoint, docs/accuracy-gate.md) and returns one line
per failure; the build refuses the placement with them unless told to accept it.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from rkspeech.core import progress
from rkspeech.core.capture import cycled_requests
from rkspeech.core.compare import db_value
from rkspeech.core.thresholds import (
    GATE_MIN_AGREEMENT,
    GATE_MIN_FRAMES,
    GATE_MIN_LOGIT_SNR_DB,
    GATE_MIN_SAME_STOP,
    GATE_MIN_STOPPED_REFERENCE,
)

#: Held-out sentences (none is a training text of the trained checkpoint): 20 texts of 6-27 tokens
#: give 378 frames on the trained reduced root (docs/confident-checkpoint.md), > GATE_MIN_FRAMES.
GATE_TEXTS = ("Hello there, this is a check of the quantized stages.", "The quick brown fox jumps over the lazy dog.",
              "One, two, three: counting frames is easy.", "Good morning, she said.",
              "A warm voice reads the numbers aloud.", "It is a bright, cold day in April.",
              "Streaming speech starts playing early.", "The user listens while the assistant reads.",
              "She would be here by noon, and the clocks are striking.", "Numbers such as 1, 2 and 3.",
              "Good evening, world!", "A gentle voice speaks slowly and clearly on the board.",
              "The lazy dog sleeps in the sun while the brown fox runs over the hill.",
              "Hello, this is the assistant: the board reads your text aloud, one sentence at a time.",
              "It was a cold morning in April when the quick fox first heard the clocks.",
              "Counting digits one by one, the voice reads 2026 as two, zero, two, six.",
              "Speech synthesis on a small board needs fast, careful and clear streaming.",
              "Good morning and good evening to every user who listens to this voice.",
              "The numbers are read digit by digit, slowly, so that nobody misses them.",
              "Before the whole sentence has been generated, the streaming speech starts playing.")


@dataclass(frozen=True)
class GateThresholds:
    """Pass marks of the gate (``core.thresholds``; docs/accuracy-gate.md says where they come from)."""
    min_agreement: float = GATE_MIN_AGREEMENT  # teacher-forced top-1 agreement, per stage
    min_same_stop: float = GATE_MIN_SAME_STOP  # share of utterances stopping at the reference's frame (free running)
    min_logit_snr_db: float = GATE_MIN_LOGIT_SNR_DB  # teacher-forced logit SNR, per stage
    min_frames: int = GATE_MIN_FRAMES  # reference frames the figures must cover
    min_stopped_reference: float = GATE_MIN_STOPPED_REFERENCE  # utterances the fp32 run ends by itself

    def to_dict(self) -> dict:
        return asdict(self)


def record_reference(tts, *, talker, code_predictor, texts, requests, frames: int, give_up_after: int | None = None):
    """The fp32 greedy runs (``ReferenceRun`` per text, its request kept as ``run.request``);
    lane factories (``each_run``) run them all at once.  ``give_up_after``: stop recording, one run
    at a time, once more than this many runs did not stop by themselves within ``frames`` (the
    measurement can then vouch for nothing: no need to finish it)."""
    import copy

    from rkspeech.accuracy.quantized_stage import each_run, record_greedy_reference

    def one(item, b):
        text, request = item
        host = copy.copy(tts)  # its own backends and timing: the threads share weights and host only
        run, = record_greedy_reference(host, talker=b["talker"], code_predictor=b["code_predictor"], texts=(text,),
                                       frames=frames, request=request)
        run.request = request
        run.timing = dict(host.last_timing)
        return run

    backends = {"talker": talker, "code_predictor": code_predictor}
    items = list(zip(texts, requests))
    if give_up_after is None:
        return each_run(items, one, backends, "accuracy gate: fp32 reference")
    runs = []
    for item in progress.track(items, "accuracy gate: fp32 reference"):
        runs.append(one(item, backends))
        if sum(len(r.frames) >= frames for r in runs) > give_up_after:
            break
    return runs


def _compare(ref: np.ndarray, got: np.ndarray, cap: int) -> dict:
    """One utterance, free running: reference frames ``ref [F, G]`` against ``got``."""
    n = min(len(ref), len(got))
    rows_same = np.all(ref[:n] == got[:n], axis=1)
    if not rows_same.all():
        first = int(np.argmin(rows_same))
    elif len(ref) != len(got):
        first = n
    else:
        first = None
    ref_stop = len(ref) if len(ref) < cap else None  # None: no stop within the frames allowed
    got_stop = len(got) if len(got) < cap else None
    equal = float((ref[:n] == got[:n]).sum()) / ref.size if ref.size else 1.0
    return {"frames_reference": int(len(ref)), "frames": int(len(got)), "first_diverging_frame": first,
            "stop_frame_reference": ref_stop, "stop_frame": got_stop, "same_stop": ref_stop == got_stop,
            "codes_equal": round(equal, 4)}


def free_running(tts, runs, *, talker, code_predictor, frames: int, label: str = "stage") -> dict:
    """Greedy generation of every reference text with these backends, against the reference
    (``label``: the stage under test, for the progress lines)."""
    import copy

    from rkspeech.accuracy.quantized_stage import each_run
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    def one(run, b):
        host = copy.copy(tts)  # its own backends and timing
        host.use_backends(talker=b["talker"], code_predictor=b["code_predictor"])
        got = host.generate_codes(run.text, options=GenerationOptions.greedy(max_new_tokens=frames + 1),
                                  **run.request)
        return {"text": run.text, **_compare(np.asarray(run.frames), got, frames)}, dict(host.last_timing)

    done = each_run(runs, one, {"talker": talker, "code_predictor": code_predictor},
                    f"accuracy gate: {label}, free running")
    return {**free_summary([r for r, _ in done]), "timing": stage_seconds([t for _, t in done])}


def free_summary(rows: list[dict]) -> dict:
    """The free-running figures over utterances, each row ``_compare``'s (and its ``text``); also
    the Qwen3-ASR gate's (``accuracy.asr_gate``: a token per frame)."""
    same = sum(r["same_stop"] for r in rows)
    return {"utterances": len(rows), "same_stop": same, "same_stop_share": round(same / len(rows), 4) if rows else None,
            "stopped_reference": sum(r["stop_frame_reference"] is not None for r in rows),
            "identical_utterances": sum(r["first_diverging_frame"] is None for r in rows),
            "first_diverging_frame": min((r["first_diverging_frame"] for r in rows
                                          if r["first_diverging_frame"] is not None), default=None),
            "codes_equal": round(float(np.mean([r["codes_equal"] for r in rows])), 4) if rows else None,
            "texts": rows}


def stage_seconds(timings) -> dict:
    """Seconds in the stages' calls (``loop.new_timing``) summed over generations: with lanes, a
    thread's wait for its round counts (so the sum exceeds the wall time)."""
    return {k: round(sum(t.get(k, 0.0) for t in timings), 2) for k in ("talker_s", "code_predictor_s")}


def measure_stage(tts, runs, name: str, variant, *, reference: dict, frames: int) -> dict:
    """Gate figures of stage ``name`` (``talker`` / ``code_predictor``) whose approximate backend is
    ``variant`` against the recorded fp32 ``runs``; ``reference``: the fp32 backends by stage."""
    from rkspeech.accuracy.quantized_stage import code_predictor_agreement, talker_agreement

    t0 = time.perf_counter()
    if name == "talker":
        tf = talker_agreement(tts, runs, variant)
        same_tf = sum(t["same_stop"] for t in tf["texts"])
        tf["same_stop_share"] = round(same_tf / len(tf["texts"]), 4) if tf["texts"] else None
        backends = {"talker": variant, "code_predictor": reference["code_predictor"]}
    else:
        tf = code_predictor_agreement(runs, variant)
        backends = {"talker": reference["talker"], "code_predictor": variant}
    t1 = time.perf_counter()
    if math.isnan(db_value(tf.get("logit_snr_db"))):
        # NaN logits fail the stage already; a free run would only repeat them, at the teacher-forced
        # pass's cost again (34 s of a 77 s gate on the trained reduced root's simulator)
        free = {"not_measured": "its teacher-forced logits hold NaN or inf"}
    else:
        free = free_running(tts, runs, frames=frames, label=name.replace("_", " "), **backends)
    t2 = time.perf_counter()
    return {"teacher_forced": tf, "free_running": free, "seconds": round(t2 - t0, 2),
            "timing": {"teacher_forced_s": round(t1 - t0, 2), "free_running_s": round(t2 - t1, 2)}}


def judge(name: str, figures: dict, thresholds: GateThresholds) -> list[str]:
    """Why stage ``name`` fails the gate (empty: it passes), each reason short enough for one line."""
    out = []
    tf, free = figures["teacher_forced"], figures["free_running"]
    if tf.get("agreement") is None or tf["agreement"] < thresholds.min_agreement:
        median = (tf.get("margin") or {}).get("median")
        out.append(f"{name} agrees with fp32 on {100 * (tf.get('agreement') or 0):.1f} % of decisions "
                   f"(< {100 * thresholds.min_agreement:.0f} %"
                   + (f"; fp32 top-1 margin median {median:.2f}" if median is not None else "") + ")")
    snr = db_value(tf.get("logit_snr_db"))  # None: identical logits (inf); "NaN": NaN
    if math.isnan(snr):
        out.append(f"{name} logit SNR NaN (its logits hold NaN or inf: an fp16 overflow?)")
    elif snr < thresholds.min_logit_snr_db:
        out.append(f"{name} logit SNR {snr:.1f} dB (< {thresholds.min_logit_snr_db:.0f} dB)")
    share = free.get("same_stop_share")
    if "not_measured" not in free and (share is None or share < thresholds.min_same_stop):
        out.append(f"{name} stops at fp32's frame on {free.get('same_stop', 0)}/{free.get('utterances', 0)} "
                   f"utterances (< {100 * thresholds.min_same_stop:.0f} %)")
    return out


def measurement_failures(report: dict, thresholds: GateThresholds) -> list[str]:
    """Why the measurement itself cannot vouch for a stage: too few frames, or too few utterances
    stopped by themselves in the fp32 run (then "same stop" compares truncated runs).  ``report``'s
    ``unit`` (default frames; the Qwen3-ASR gate's tokens) and ``bound`` (what sets
    ``frames_per_text``; default --cpu-check-frames) word the lines."""
    out = []
    unit, bound = report.get("unit", "frames"), report.get("bound", "--cpu-check-frames")
    if report["reference_frames"] < thresholds.min_frames:
        out.append(f"measured on {report['reference_frames']} fp32 {unit}, fewer than {thresholds.min_frames}")
    texts, stopped = report["texts"], report["stopped_reference"]
    if texts and stopped < thresholds.min_stopped_reference * texts:
        out.append(f"fp32 stopped by itself on {stopped}/{texts} utterances within {report['frames_per_text']} "
                   f"{unit} (< {100 * thresholds.min_stopped_reference:.0f} %): the stop is not judged "
                   f"(a checkpoint that does not stop, or {bound} too low)")
    return out


def run_gate(tts, *, reference: dict, variants: dict, texts=GATE_TEXTS, frames: int = 48,
             thresholds: GateThresholds | None = None, vouched_only=()) -> dict:
    """The gate over ``texts``: ``reference`` the fp32 backends (``talker``, ``code_predictor``),
    ``variants`` the approximate backend of each stage to judge (by the same names).  Backends are
    not closed here.  ``vouched_only``: stages (names in ``variants``) measured only where the
    measurement can vouch for them (``measurement_failures`` empty: a checkpoint that stops by
    itself); otherwise they are recorded ``not_judged`` with the reason, and when every stage is
    such a one the fp32 reference stops as soon as it cannot vouch (the NPU-placed stages: their
    simulator runs are slow, and a random root's fp16 noise flips its flat decisions).  Returns
    ``{"texts", "frames_per_text", "prompt_form", "host_loop", "reference_frames",
    "stopped_reference", "thresholds", "stages": {name: figures + "failures"}, "failures",
    "passed", "seconds"}``."""
    thresholds = thresholds or GateThresholds()
    t0 = time.perf_counter()
    texts = list(texts)
    # a base model clones held-out reference voices (core.capture.reference_voices)
    requests = cycled_requests(tts, len(texts), what="the accuracy gate")
    give_up = None
    if variants and set(variants) <= set(vouched_only):
        give_up = len(texts) - math.ceil(thresholds.min_stopped_reference * len(texts))
    runs = record_reference(tts, texts=texts, requests=requests, frames=frames, give_up_after=give_up, **reference)
    ref_seconds = time.perf_counter() - t0
    ref_frames = sum(len(r.frames) for r in runs)
    out = {"texts": len(texts), "frames_per_text": frames,
           "prompt_form": "whole-text" if tts.cfg.default_text_in_prompt else "streaming",
           "requests": len({_request_key(r.request) for r in runs}),
           "reference": {k: getattr(v, "name", str(v)) for k, v in reference.items()},
           "host_loop": tts.host,  # which host ran the generation loop (speak's report says the same)
           "reference_frames": ref_frames,
           "stopped_reference": sum(len(r.frames) < frames for r in runs),
           "thresholds": thresholds.to_dict(), "stages": {},
           # where the time goes (docs/accuracy-gate.md, Cost); lanes: runtime.tts.lanes or None
           "timing": {"reference_s": round(ref_seconds, 2), **stage_seconds([r.timing for r in runs]),
                      "lanes": lanes_record(reference)}}
    if len(runs) < len(texts):
        out["reference_abandoned_after"] = len(runs)
    unvouched = measurement_failures(out, thresholds)
    for i, (name, backend) in enumerate(variants.items(), 1):
        if name in vouched_only and unvouched:
            progress.info(f"accuracy gate: {name.replace('_', ' ')} not judged: {unvouched[-1]}")
            out["stages"][name] = {"backend": getattr(backend, "name", str(backend)),
                                   "not_judged": "; ".join(unvouched)}
            continue
        # the gate runs for minutes (~15 on a published-size root): a line per part, and the
        # parts' own progress lines (core.progress.track), so it never sits silent (issue 37)
        progress.info(f"accuracy gate: stage {i}/{len(variants)}: {name.replace('_', ' ')} ({len(runs)} utterances, "
                      f"{ref_frames} fp32 frames; {time.perf_counter() - t0:.0f} s so far)")
        out["stages"][name] = {"backend": getattr(backend, "name", str(backend)),
                               **measure_stage(tts, runs, name, backend, reference=reference, frames=frames)}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if out["timing"]["lanes"] is not None:
        out["timing"]["lanes"] = lanes_record(reference)  # the rounds and calls of the whole gate
    return apply_thresholds(out, thresholds)


def _request_key(request: dict) -> tuple:
    """A request as a hashable key: a reference clip (an array) by its bytes."""
    return tuple(sorted((k, v.tobytes() if isinstance(v, np.ndarray) else v) for k, v in request.items()))


def lanes_record(backends: dict) -> dict | None:
    """``{"lanes", "rounds", "calls"}`` when the backends are lane factories (``runtime.tts.lanes``)."""
    groups = [b for b in backends.values() if hasattr(b, "lane")]
    if not groups:
        return None
    rounds = groups[0].rounds
    return {"lanes": min(g.lanes for g in groups), "rounds": rounds.rounds, "calls": rounds.calls}


def apply_thresholds(report: dict, thresholds: GateThresholds | None = None) -> dict:
    """``report`` (``run_gate``'s) judged against ``thresholds`` (default: ``core.thresholds``):
    each stage's ``failures``, and the report's ``failures``, ``passed`` and ``thresholds``."""
    thresholds = thresholds or GateThresholds()
    failures = []
    judged = 0
    for name, figures in report["stages"].items():
        if "not_judged" in figures:  # run_gate's vouched_only: nothing measured, nothing to judge
            figures["failures"] = []
            continue
        judged += 1
        figures["failures"] = judge(name, figures, thresholds)
        failures += figures["failures"]
    if judged:  # listed after the stages' own: the one-line refusal names a stage's fault first
        failures += measurement_failures(report, thresholds)
    report.update(thresholds=thresholds.to_dict(), failures=failures, passed=not failures,
                  not_judged=sorted(n for n, f in report["stages"].items() if "not_judged" in f))
    return report
