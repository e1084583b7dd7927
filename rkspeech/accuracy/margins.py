"""How confident a checkpoint's decisions are: the top-1 minus top-2 logit (fp32) of the talker and
the code predictor over greedy generations of several texts, and where each text stopped.

``checkpoint_margins(tts, texts)`` runs greedy generation with ``tts``'s own backends (torch, or
graphs a plan placed), recorded by ``quantized_stage.record_greedy_reference``; the talker's margin
is taken as the loop takes its top-1 (repetition penalty, tail suppressed, ``codec_eos`` banned
for the first frames; the stop decision included), the code predictor's over every codebook
decision.  On random synthetic weights the margins are small (docs/cpu-stages.md: talker median
0.15, code predictor 0.21), so agreement figures there mostly count near-ties; a trained
checkpoint's are wide (docs/confident-checkpoint.md).
"""

from __future__ import annotations

from rkspeech.accuracy.quantized_stage import (
    DEFAULT_TEXTS,
    code_predictor_agreement,
    record_greedy_reference,
    talker_agreement,
)


def checkpoint_margins(tts, texts=DEFAULT_TEXTS, *, requests: list[dict] | None = None, frames: int = 64,
                       text_in_prompt: bool | None = None) -> dict:
    """Margins and stops of greedy generation (at most ``frames`` frames per text).

    ``requests``: generation keywords (speaker, language, instruct) cycled over the texts; default
    the first speaker in English (custom voice) or a fixed instruct (voice design).
    ``text_in_prompt``: the prompt form (``GenerationOptions.text_in_prompt``; None: the mode's
    default, the whole text in the prompt for custom voice).  Returns
    ``{"talker": summary, "code_predictor": summary, "frames": n, "texts": [{text, frames,
    stop_frame}]}``, a summary being ``quantized_stage.margin_summary``'s (n, min, p10, median,
    p90, below_0.1); ``stop_frame`` is None when the talker did not stop within ``frames``."""
    runs = []
    for i, text in enumerate(texts):
        request = requests[i % len(requests)] if requests else None
        runs += record_greedy_reference(tts, talker=tts.talker_backend, code_predictor=tts.code_predictor_backend,
                                        texts=(text,), frames=frames, request=request,
                                        text_in_prompt=text_in_prompt)
    talker = talker_agreement(tts, runs, tts.talker_backend)
    predictor = code_predictor_agreement(runs, tts.code_predictor_backend)
    per_text = [{"text": run.text, "frames": int(len(run.frames)), "stop_frame": row["stop_frame_reference"],
                 **({"request": requests[i % len(requests)]} if requests else {})}
                for i, (run, row) in enumerate(zip(runs, talker["texts"]))]
    return {"talker": talker["margin"], "code_predictor": predictor["margin"],
            "frames": sum(p["frames"] for p in per_text), "texts": per_text}
