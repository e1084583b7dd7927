"""The accuracy gate of a Qwen3-ASR plan (issue 53): are the quantized decoder and the NPU encoder
safe to place?  The text-to-speech gate's method (``accuracy.gate``), on greedy transcripts.

Over held-out clips (``models.qwen3_asr.trained.gate_clips``: the confident root's task, none of
them a training clip), with two openings of the plan's graphs (``runtime.qwen3_asr.transcriber``):
the **reference** (encoder windows and decoder in fp32 on onnxruntime) and the **plan** (the
windows on the rknn-toolkit2 simulator when the encoder is NPU-placed, the int4 / int8 decoder
on onnxruntime):

* **reference**: each clip's greedy transcript with the fp32 stages, at most ``max_tokens`` tokens;
* per stage (``decoder``: the plan's decoder fed the fp32 encoder's tokens; ``encoder``: the
  plan's encoder tokens into the fp32 decoder; ``plan``: both, when both differ from fp32):
  **teacher forced** (the stage fed the reference's tokens: top-1 agreement per decision, the
  logit SNR, the fp32 top-1 margins, the stop per clip) and **free running** (its own greedy
  transcript: first diverging token, the same stop, the share of the reference's tokens
  reproduced).

The figures have the text-to-speech gate's keys (a token where it says frame: ``unit``), so they
are judged by its ``judge`` / ``apply_thresholds`` against its ``GateThresholds`` with one mark
changed, the logit SNR (``asr_thresholds``: ``core.thresholds.ASR_GATE_MIN_LOGIT_SNR_DB``, the
head being the quantized 151936-row embedding), and printed by its rows.  When the reference cannot vouch
(``measurement_failures``: fewer than ``min_frames`` tokens, or fewer than half of the clips
stopping by themselves, as on a random root, whose greedy decoding never stops), every stage is
recorded ``not_judged`` with the reason, not passed or failed on noise, and the reference is
abandoned as soon as that is certain.
"""

from __future__ import annotations

import math
import time

import numpy as np

from rkspeech.core import progress

#: held-out clips and the token bound per transcript: 20 clips give 473 reference tokens on the
#: trained reduced root (> GATE_MIN_FRAMES = 300); its transcripts are 23-24 tokens with the end
#: token.  The reference's logits are kept (20 x 24 x 151936 float32: 290 MB) rather than replayed
#: per stage: the fp32 head (the 151936-row embedding, 78 MB at the reduced size) took 12 ms of the
#: 13.5 ms a reference step costs, and three replays were 23 s of a 75 s gate
GATE_CLIPS = 20
GATE_MAX_TOKENS = 48
#: what ``measurement_failures`` names when the bound is too low
BOUND = "the gate's token bound"


def decode(asr, prompt, features: np.ndarray, steps: int, forced: list[int] | None = None):
    """``(ids, logits [n, vocab])`` of one transcript through ``asr``'s decoder (an open
    ``ASRTranscriber``): greedy up to ``steps`` tokens (ending at an end token), or teacher forced
    with ``forced`` (each step fed the forced id; the argmax of every step is returned)."""
    stops = set(asr.plan.eos_token_ids)
    steps = len(forced) if forced is not None else steps
    x = asr.embeddings(prompt.ids)
    x[prompt.audio] = features
    asr.talker.start(len(prompt.ids) + steps)
    h = asr.talker.forward(x)
    ids, rows = [], []
    for k in range(steps):
        rows.append(np.array(asr.head.infer({"hidden": h[None].astype(np.float32)})["logits"][0], dtype=np.float32))
        ids.append(int(np.argmax(rows[-1])))
        if k == steps - 1 or (forced is None and ids[-1] in stops):
            break
        h = asr.talker.forward(asr.embeddings([ids[-1] if forced is None else forced[k]]))
    return ids, np.stack(rows)


def _features(asr, clips, label: str) -> list[np.ndarray]:
    from rkspeech.models.qwen3_asr.features import log_mel

    return [asr.encode(log_mel(c.wave)) for c in progress.track(clips, f"accuracy gate: {label} encoder")]


def _teacher_forced(runs, asr, feats) -> dict:
    """One stage teacher forced on every reference run (``asr`` its decoder, ``feats`` its encoder's tokens)."""
    from rkspeech.accuracy.quantized_stage import margin_summary
    from rkspeech.core.compare import energies, json_number, snr_db_of_energy

    agree = total = 0
    sig = err = 0.0
    margins: list[float] = []
    rows = []
    for run, f in zip(runs, feats):
        ref = run["logits"]
        got_ids, got = decode(asr, run["prompt"], f, 0, forced=run["ids"])
        ref_top = np.array(run["ids"])
        same = ref_top == np.array(got_ids)
        agree, total = agree + int(same.sum()), total + same.size
        s, e = energies(ref.astype(np.float64), got.astype(np.float64))
        sig, err = sig + s, err + e
        margins += run["margins"]
        stop = [int(np.argmax(np.isin(v, run["stops"]))) if np.isin(v, run["stops"]).any() else None
                for v in (ref_top, np.array(got_ids))]
        rows.append({"text": run["text"], "frames": int(same.size),
                     "first_diverging_frame": None if same.all() else int(np.argmin(same)),
                     "stop_frame_reference": stop[0], "stop_frame_quantized": stop[1], "same_stop": stop[0] == stop[1],
                     "logit_snr_db": json_number(snr_db_of_energy(s, e))})
    same_stop = sum(r["same_stop"] for r in rows)
    return {"decisions": total, "agreement": round(agree / total, 4) if total else None,
            "logit_snr_db": json_number(snr_db_of_energy(sig, err)), "same_stop": same_stop == len(rows),
            "same_stop_share": round(same_stop / len(rows), 4) if rows else None,
            "first_diverging_frame": min((r["first_diverging_frame"] for r in rows
                                          if r["first_diverging_frame"] is not None), default=None),
            "margin": margin_summary(margins), "texts": rows}


def _free_running(runs, asr, feats, max_tokens: int) -> dict:
    from rkspeech.accuracy.gate import _compare, free_summary

    rows = []
    for run, f in zip(runs, feats):
        got, _ = decode(asr, run["prompt"], f, max_tokens)
        rows.append({"text": run["text"], "transcript": asr.prompts.tokenizer.decode(got, skip_special_tokens=True),
                     **_compare(np.asarray(run["ids"])[:, None], np.asarray(got)[:, None], max_tokens)})
    return free_summary(rows)


def asr_thresholds():
    """The text-to-speech gate's marks with the Qwen3-ASR logit SNR mark (``core.thresholds``)."""
    from rkspeech.accuracy.gate import GateThresholds
    from rkspeech.core.thresholds import ASR_GATE_MIN_LOGIT_SNR_DB

    return GateThresholds(min_logit_snr_db=ASR_GATE_MIN_LOGIT_SNR_DB)


def run_asr_gate(reference, plan, *, stages: dict, clips=None, max_tokens: int = GATE_MAX_TOKENS,
                 thresholds=None) -> dict:
    """The gate: ``reference`` and ``plan`` open ``ASRTranscriber`` s (fp32 stages; the plan's
    stages), ``stages`` the placement of each stage to judge by name (``decoder``, ``encoder``,
    ``plan``), ``clips`` the held-out ``ToyClip`` s (default ``gate_clips(GATE_CLIPS)``).
    Returns ``accuracy.gate.run_gate``'s report shape, judged (``apply_thresholds``)."""
    from rkspeech.accuracy.gate import apply_thresholds, measurement_failures
    from rkspeech.accuracy.quantized_stage import _top2_margin
    from rkspeech.models.qwen3_asr.trained import gate_clips

    thresholds = thresholds or asr_thresholds()
    clips = list(clips if clips is not None else gate_clips(GATE_CLIPS))
    t0 = time.perf_counter()
    ref_feats = _features(reference, clips, "fp32")
    give_up = len(clips) - math.ceil(thresholds.min_stopped_reference * len(clips))
    stops = list(reference.plan.eos_token_ids)
    runs = []
    for clip, f in zip(progress.track(clips, "accuracy gate: fp32 reference"), ref_feats):
        prompt = reference.prompts.build(f.shape[0])
        ids, logits = decode(reference, prompt, f, max_tokens)
        runs.append({"text": clip.text, "prompt": prompt, "features": f, "ids": ids, "logits": logits, "stops": stops,
                     "margins": [_top2_margin(r) for r in logits]})
        if sum(r["ids"][-1] not in stops for r in runs) > give_up:
            break  # fewer than the mark can stop by themselves now: nothing will be judged
    out = {"texts": len(clips), "frames_per_text": max_tokens, "unit": "tokens", "bound": BOUND,
           "clips": "held-out two-tone clips (models.qwen3_asr.trained.gate_clips)",
           "reference_frames": sum(len(r["ids"]) for r in runs),
           "stopped_reference": sum(r["ids"][-1] in stops for r in runs),
           "reference": {"encoder": reference.backend, "decoder": "fp32"}, "thresholds": thresholds.to_dict(),
           "stages": {}, "timing": {"reference_s": round(time.perf_counter() - t0, 2)}}
    if len(runs) < len(clips):
        out["reference_abandoned_after"] = len(runs)
    unvouched = measurement_failures(out, thresholds)
    plan_feats = None
    for name, placement in stages.items():
        if unvouched:
            progress.info(f"accuracy gate: {name} not judged: {unvouched[-1]}")
            out["stages"][name] = {"placement": placement, "not_judged": "; ".join(unvouched)}
            continue
        t1 = time.perf_counter()
        if name != "decoder" and plan_feats is None:
            plan_feats = _features(plan, clips, f"plan ({plan.backend})")
        feats = [r["features"] for r in runs] if name == "decoder" else plan_feats
        dec = reference if name == "encoder" else plan
        tf = _teacher_forced(runs, dec, feats)
        t2 = time.perf_counter()
        free = _free_running(runs, dec, feats, max_tokens)
        out["stages"][name] = {"placement": placement, "backend": f"encoder {plan.backend if name != 'decoder' else 'ort fp32'}"
                               f", decoder {'fp32' if name == 'encoder' else plan.plan.decoder_placement}",
                               "teacher_forced": tf, "free_running": free, "seconds": round(time.perf_counter() - t1, 2),
                               "timing": {"teacher_forced_s": round(t2 - t1, 2),
                                          "free_running_s": round(time.perf_counter() - t2, 2)}}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return apply_thresholds(out, thresholds)
