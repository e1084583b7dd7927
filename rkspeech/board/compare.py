"""Greedy codes of two machines compared: identical, or the first decision that differs and
whether the arithmetic error measured between the two explains it.

Two machines running the same graphs greedily agree until a decision whose top two logits are
closer than the machines' logit error: there the argmax may flip, and from that frame on the
codes (and the audio) part ways, although every graph is within its marks.  That is a near-tie,
not a bug; a flip at a decided margin is one.  ``speak --greedy --margins-out`` records each
decision's margin (``models.qwen3_tts.loop.decision_margin``: top-1 minus top-2 over the logits'
rms); ``rkspeech check-board`` measures each stage's SNR on the other machine.  The first
differing decision is a near-tie when its margin, on both machines, is below ``TIE_ERRORS`` x the
logit error that SNR means (``10 ** (-snr / 20)`` of the rms), the rule ``check-board`` applies to
its logit goldens; a code predictor decision is judged by the worse of its own SNR and the
talker's (it starts from the talker's hidden state).  Assumed: the stage's measured output error carries over to the logits as the
same fraction of their rms (the codec / code predictor heads are linear), and errors accumulated
over earlier frames are no larger than one step's (the first difference comes early).
"""

from __future__ import annotations

import math

import numpy as np

from rkspeech.core.thresholds import TIE_ERRORS

#: the stage whose logits make codebook j's decision
STAGES = ("talker", "code_predictor")


def stage_of(codebook: int) -> str:
    return STAGES[0] if codebook == 0 else STAGES[1]


def stage_snr(check_report: dict) -> dict[str, float]:
    """The worst graded output SNR (dB) per stage of a ``check-board`` report (``--output``
    JSON): its ``talker ...`` and ``code predictor ...`` graphs; inf where every output was
    identical."""
    worst: dict[str, float] = {}
    for g in check_report.get("graphs", []):
        name = str(g.get("graph", ""))
        stage = next((s for s in STAGES if name.startswith(s.replace("_", " "))), None)
        if stage is None:
            continue
        for step in g.get("steps", []):
            for out in step.get("outputs", []):
                if out.get("graded"):
                    snr = out.get("snr_db")
                    snr = math.inf if snr is None else float(snr)
                    worst[stage] = min(worst.get(stage, math.inf), snr)
    return worst


def first_difference(ref: np.ndarray, other: np.ndarray) -> tuple[int, int] | None:
    """``(frame, codebook)`` of the first decision where two ``[T, G]`` code arrays part (row
    order); where one is a prefix of the other, the decision that ended the shorter one
    (``(its length, 0)``: the other made a frame there); None when identical."""
    ref, other = np.asarray(ref), np.asarray(other)
    t = min(len(ref), len(other))
    rows = np.nonzero((ref[:t] != other[:t]).any(axis=1))[0]
    if rows.size:
        f = int(rows[0])
        return f, int(np.nonzero(ref[f] != other[f])[0][0])
    return None if len(ref) == len(other) else (t, 0)


def explain(ref_codes, other_codes, ref_margins, other_margins, snr_db: dict[str, float]) -> dict:
    """The comparison of one utterance: ``identical``, else the first differing ``frame`` and
    ``codebook``, the ``stage`` deciding it, each side's margin there, the ``bound`` (``TIE_ERRORS``
    x the logit error of that stage's SNR, None when not measured) and ``near_tie``, with ``why``
    in words.  Margins: ``[T + 1, G]`` as ``speak --margins-out`` writes them."""
    at = first_difference(ref_codes, other_codes)
    if at is None:
        return {"identical": True, "frames": int(len(ref_codes))}
    f, j = at
    stage = stage_of(j)

    def margin(m):
        m = np.asarray(m, dtype=np.float64)
        return float(m[f, j]) if m.ndim == 2 and f < m.shape[0] and j < m.shape[1] else math.nan

    mr, mo = margin(ref_margins), margin(other_margins)
    # the code predictor starts from the talker's hidden state: its logits carry the talker's error too
    upstream = STAGES[:STAGES.index(stage) + 1]
    snr = None if any(s not in snr_db for s in upstream) else min(snr_db[s] for s in upstream)
    bound = None if snr is None else (0.0 if snr == math.inf else TIE_ERRORS * 10 ** (-snr / 20))
    measured = not (math.isnan(mr) or math.isnan(mo))
    near = bool(measured and bound is not None and max(mr, mo) < bound)
    if not measured:
        why = "no margin recorded at that decision (speak --greedy --margins-out, or a graph that chooses its codes)"
    elif bound is None:
        why = f"the SNR of {' and '.join(upstream)} between the machines was not measured (check-board)"
    else:
        why = (f"margins {mr:.4f} / {mo:.4f} x the logits' rms vs {TIE_ERRORS} x the measured error of "
               f"{' and '.join(upstream)} "
               f"({snr:.1f} dB SNR) = {bound:.4f}: " + ("a near-tie the machines' arithmetic flips" if near
                                                        else "a decided choice flipped: not explained by the error"))
    return {"identical": False, "frame": f, "codebook": j, "stage": stage, "margin_ref": mr, "margin_other": mo,
            "bound": bound, "near_tie": near, "why": why}
