"""How far a quantized talker or code predictor is from its fp32 graph, frame by frame.

One greedy generation per text runs with the reference backends (the fp32 graphs on onnxruntime,
or torch) and records what each stage was fed and what it returned
(:func:`record_greedy_reference`).  The quantized stage is then fed **the reference's inputs**
(teacher forced), so frame k of both sees the same prompt, the same earlier codes and the same
hidden states, and a difference at frame k is that frame's own:

* talker (:func:`talker_agreement`): the recorded ``forward`` inputs replayed through the
  quantized backend; the model's host (``tts.ops``: numpy for ``NumpyTTSModel``, the loop
  ``speak`` runs) applies ``codec_head`` to both hidden states; the top-1 is taken by the
  generation loop's own rules (``loop.TalkerLogitRules``: tail tokens suppressed, ``codec_eos``
  banned for the first frames, the repetition penalty over the reference's history).  ``stop_frame``: the first frame
  whose top-1 is ``codec_eos`` (None: not within the recorded frames).
* code predictor (:func:`code_predictor_agreement`): each recorded frame's (hidden, codebook 0
  embedding) through the quantized backend.  A backend that takes ``choose`` (the step form) is
  fed the reference's code for each codebook (teacher forced inside the frame too); a greedy-only
  frame graph feeds its own argmax back, so after its first differing codebook a frame's later
  codebooks see other inputs: their logits are left out of the SNR (as
  ``pipelines.code_predictor_build.compare_frames`` does).

Figures: ``agreement`` (fraction of equal top-1 decisions), ``first_diverging_frame`` per text,
``logit_snr_db`` (reference logits' energy over the difference's, all frames pooled),
``margin`` (the reference's top-1 minus top-2 logit: its distribution says how close the
decisions were; on random synthetic weights the logits are flat, so agreement there mostly
counts near-ties).

The backends are passed in (``models.qwen3_tts.backends`` interfaces), opened by the caller
through the runtime; nothing here opens a runner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rkspeech.core import progress
from rkspeech.core.capture import RecordingCodePredictor, RecordingTalker, sample_request, teacher
from rkspeech.core.compare import energies, json_number, snr_db_of_energy
from rkspeech.core.errors import RkspeechError

DEFAULT_TEXTS = ("Hello there, this is a check of the quantized stages.",
                 "The quick brown fox jumps over the lazy dog.",
                 "One, two, three: counting frames is easy.")


@dataclass
class ReferenceRun:
    """One greedy generation's record: ``talker_calls`` [(embeds [t, Ht], hidden [Ht])], ``frames``
    ``int64 [F, G]``, and per frame the code predictor's ``cp_inputs`` [(hidden [Ht], first
    [Ht])] and ``cp_logits`` ``[G-1, V]`` float32."""

    text: str
    talker_calls: list = field(default_factory=list)
    frames: np.ndarray | None = None
    cp_inputs: list = field(default_factory=list)
    cp_logits: list = field(default_factory=list)


def each_run(items, fn, backends: dict, what: str) -> list:
    """``[fn(item, backends) for item in items]``.  When every backend is a lane factory
    (``runtime.tts.lanes``: it has ``lane()``), each item runs in a thread of its own with a lane
    of each (``Rounds.map``): the items' graph calls become one call per round; otherwise in turn
    (``what``: the progress line)."""
    if not backends or not all(hasattr(b, "lane") for b in backends.values()):
        return [fn(item, backends) for item in progress.track(list(items), what)]
    import threading
    import time

    from rkspeech.runtime.tts.numpy_loop import blas_one_thread

    rounds = next(iter(backends.values())).rounds
    items = list(items)
    lock, start = threading.Lock(), time.perf_counter()
    state = {"done": 0, "last": start}

    def finished() -> None:  # progress.track's lines, as the items end
        with lock:
            state["done"] += 1
            now = time.perf_counter()
            if now - state["last"] > progress.PERIODIC_SECONDS or state["done"] == len(items):
                progress.info(f"    {what}: {state['done']}/{len(items)} ({now - start:.0f} s, in lanes)")
                state["last"] = now

    def one(item):
        lanes = {}
        try:
            for k, b in backends.items():
                lanes[k] = b.lane()
            out = fn(item, lanes)
        finally:
            for lane in lanes.values():
                lane.close()
        finished()
        return out

    n = min(b.lanes for b in backends.values())
    with blas_one_thread():  # one setting for every thread (each generation also sets it)
        return [r for lo in range(0, len(items), n) for r in rounds.map(one, items[lo:lo + n])]


def record_greedy_reference(tts, *, talker, code_predictor, texts=DEFAULT_TEXTS, frames: int = 16,
                            request: dict | None = None, text_in_prompt: bool | None = None) -> list[ReferenceRun]:
    """Greedy generation of up to ``frames`` frames per text with ``talker`` and
    ``code_predictor`` (backends; not closed here) recorded; ``tts``'s backends are restored.
    ``text_in_prompt``: ``GenerationOptions.text_in_prompt`` (None: the mode's default)."""
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    if frames < 1:
        raise RkspeechError(f"frames must be >= 1, got {frames}")
    kw = dict(request) if request is not None else sample_request(tts, what="the quantized-stage check")
    saved = (tts.talker_backend, tts.code_predictor_backend)
    runs = []
    try:
        for text in texts:
            run = ReferenceRun(text)
            tts.use_backends(talker=RecordingTalker(talker, run.talker_calls),
                             code_predictor=RecordingCodePredictor(code_predictor, run.cp_inputs, run.cp_logits))
            opts = GenerationOptions.greedy(max_new_tokens=frames + 1, text_in_prompt=text_in_prompt)
            run.frames = tts.generate_codes(text, options=opts, **kw)
            runs.append(run)
    finally:
        tts.talker_backend, tts.code_predictor_backend = saved
    return runs


def margin_summary(margins) -> dict:
    """Distribution of the reference's top-1 minus top-2 logit."""
    m = np.asarray([x for x in margins if math.isfinite(x)], dtype=np.float64)
    if not m.size:
        return {"n": 0}
    q = np.percentile(m, [0, 10, 50, 90])
    return {"n": int(m.size), "min": round(float(q[0]), 4), "p10": round(float(q[1]), 4),
            "median": round(float(q[2]), 4), "p90": round(float(q[3]), 4),
            "below_0.1": round(float(np.mean(m < 0.1)), 4)}


def _top2_margin(x: np.ndarray) -> float:
    part = np.partition(x[np.isfinite(x)], -2)[-2:]
    return float(part[1] - part[0])


def talker_agreement(tts, runs: list[ReferenceRun], talker) -> dict:
    """The quantized ``talker`` (a TalkerBackend; not closed here) against the recorded runs; the
    logits and the top-1 of each are the loop's (``tts.ops``' codec head, ``loop.TalkerLogitRules``)."""
    from rkspeech.models.qwen3_tts.loop import TalkerLogitRules
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions

    ops = tts.ops
    # greedy keeps qwen-tts' talker penalty
    rules = TalkerLogitRules.of(tts.cfg.talker, GenerationOptions.greedy().repetition_penalty)
    eos = rules.eos
    agree = total = 0
    sig = err = 0.0
    margins: list[float] = []
    per_text = []

    def ruled(logits: np.ndarray, history: list[int], k: int) -> np.ndarray:
        return ops.numpy(rules.apply(ops, ops.logits(logits.copy()), history[:k], k))

    def logits(hidden) -> np.ndarray:
        return ops.numpy(ops.codec_logits(np.asarray(hidden, np.float32).reshape(-1)))

    def replay(run, b):
        b["talker"].start(sum(e.shape[0] for e, _ in run.talker_calls))
        return [b["talker"].forward(e) for e, _ in run.talker_calls]

    hidden = each_run(runs, replay, {"talker": talker}, "accuracy gate: talker, teacher forced")
    for run, got_hidden in zip(runs, hidden):
        ref = np.stack([logits(h) for _, h in run.talker_calls])
        got = np.stack([logits(h) for h in got_hidden])
        history = [int(c) for c in run.frames[:, 0]]
        ref_top, got_top = [], []
        for k in range(ref.shape[0]):
            ref_k = ruled(ref[k], history, k)
            ref_top.append(int(ref_k.argmax()))
            got_top.append(int(ruled(got[k], history, k).argmax()))
            margins.append(_top2_margin(ref_k))
        ref_l, got_l = ref.astype(np.float64), got.astype(np.float64)
        ref_top, got_top = np.array(ref_top), np.array(got_top)
        same = ref_top == got_top
        agree, total = agree + int(same.sum()), total + same.size
        s, e = energies(ref_l, got_l)
        sig, err = sig + s, err + e
        stop = [int(np.argmax(v == eos)) if (v == eos).any() else None for v in (ref_top, got_top)]
        per_text.append({"text": run.text, "frames": int(same.size),
                         "first_diverging_frame": None if same.all() else int(np.argmin(same)),
                         "stop_frame_reference": stop[0], "stop_frame_quantized": stop[1],
                         "same_stop": stop[0] == stop[1],
                         "logit_snr_db": json_number(snr_db_of_energy(s, e))})
    return {"stage": "talker", "decisions": total, "agreement": round(agree / total, 4) if total else None,
            "logit_snr_db": json_number(snr_db_of_energy(sig, err)), "same_stop": all(p["same_stop"] for p in per_text),
            "first_diverging_frame": min((p["first_diverging_frame"] for p in per_text
                                          if p["first_diverging_frame"] is not None), default=None),
            "margin": margin_summary(margins), "texts": per_text}


def code_predictor_agreement(runs: list[ReferenceRun], code_predictor) -> dict:
    """The quantized ``code_predictor`` (a CodePredictorBackend; not closed here) against the
    recorded runs: per codebook decision, teacher forced (see the module docstring)."""
    teacher_forced = not getattr(code_predictor, "greedy_only", False)
    agree = total = 0
    sig = err = 0.0
    margins: list[float] = []
    identical_frames = frames = 0
    per_text = []

    def replay(run, b):
        out = []
        for f, (hidden, first) in enumerate(run.cp_inputs):
            if teacher_forced:
                rows: list[np.ndarray] = []
                b["cp"].frame(hidden, first, teacher([int(c) for c in run.frames[f, 1:]], rows))
                out.append(np.stack(rows))
            else:
                out.append(np.asarray(b["cp"].infer(hidden, first)["logits"], dtype=np.float32))
        return out

    replayed = each_run(runs, replay, {"cp": code_predictor}, "accuracy gate: code predictor, teacher forced")
    for run, got_frames in zip(runs, replayed):
        first_div = None
        for f, (ref, got) in enumerate(zip(run.cp_logits, got_frames)):
            codes = [int(c) for c in run.frames[f, 1:]]
            ref = np.asarray(ref, np.float64)
            got = got.astype(np.float64).reshape(ref.shape)
            same = got.argmax(-1) == np.asarray(codes)
            agree, total = agree + int(same.sum()), total + same.size
            frames += 1
            identical_frames += bool(same.all())
            if first_div is None and not same.all():
                first_div = f
            k = same.size if teacher_forced or same.all() else int(np.argmin(same)) + 1
            s, e = energies(ref[:k], got[:k])
            sig, err = sig + s, err + e
            margins += [_top2_margin(r) for r in ref]
        per_text.append({"text": run.text, "frames": len(run.cp_inputs), "first_diverging_frame": first_div})
    return {"stage": "code_predictor", "teacher_forced": teacher_forced, "frames": frames, "decisions": total,
            "agreement": round(agree / total, 4) if total else None, "frames_identical": identical_frames,
            "logit_snr_db": json_number(snr_db_of_energy(sig, err)),
            "first_diverging_frame": min((p["first_diverging_frame"] for p in per_text
                                          if p["first_diverging_frame"] is not None), default=None),
            "margin": margin_summary(margins), "texts": per_text}
