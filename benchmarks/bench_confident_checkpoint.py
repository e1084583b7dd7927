"""Margins and stops of the trained (confident) synthetic checkpoint next to the random one.

    .venv/bin/python benchmarks/bench_confident_checkpoint.py --trained ROOT --random ROOT [--out R.json]

Both roots are reduced custom-voice roots of the same seed (``rkspeech synth-checkpoint qwen3-tts
--config reduced [--trained] --out ROOT``).  Greedy generation (torch) of ``TEXTS`` (held out: none
is a training text) with speakers and languages cycled, in both prompt forms; per root and form:
the fp32 top-1 minus top-2 logit of the talker and the code predictor
(``accuracy.margins.checkpoint_margins``), and per text the frame count against the rule's, the
share of frames equal to the rule's codes.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from rkspeech.accuracy.gate import GATE_TEXTS as TEXTS  # the gate's held-out texts

REQUESTS = ({"speaker": "vivian", "language": "english"}, {"speaker": "ryan", "language": "german"},
            {"speaker": "aiden", "language": "auto"}, {"speaker": "serena", "language": "chinese"})


def stops(tts, rule, text_in_prompt):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.models.qwen3_tts.trained import expected_codes

    rows = []
    for i, text in enumerate(TEXTS):
        want = expected_codes(tts, rule, text)
        got = tts.generate_codes(text, options=GenerationOptions.greedy(max_new_tokens=len(want) + 21,
                                                                        text_in_prompt=text_in_prompt),
                                 **REQUESTS[i % len(REQUESTS)])
        n = min(len(want), len(got))
        rows.append({"text": text, "expected_frames": len(want), "frames": len(got),
                     "stopped": len(got) < len(want) + 20,
                     "codebook0_equal": round(float(np.mean(got[:n, 0] == want[:n, 0])), 4) if n else None,
                     "codes_equal": round(float(np.mean(got[:n] == want[:n])), 4) if n else None})
    return {"texts": rows,
            "stopped": sum(r["stopped"] for r in rows),
            "within_2": sum(r["stopped"] and abs(r["frames"] - r["expected_frames"]) <= 2 for r in rows),
            "exact_length": sum(r["frames"] == r["expected_frames"] for r in rows),
            "codes_equal_mean": round(float(np.mean([r["codes_equal"] or 0.0 for r in rows])), 4)}


def main(argv=None) -> int:
    import torch

    from rkspeech.accuracy.margins import checkpoint_margins
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.trained import rule_for

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trained", required=True)
    p.add_argument("--random", required=True)
    p.add_argument("--seed", type=int, default=0, help="the rule's seed (the roots' --seed)")
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--out")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    report = {}
    for name, root in (("random", args.random), ("trained", args.trained)):
        tts = TTSModel.load(root)
        rule = rule_for(tts, args.seed)
        for form, tip in (("streaming", False), ("whole_text", None)):
            m = checkpoint_margins(tts, TEXTS, requests=list(REQUESTS), frames=args.frames, text_in_prompt=tip)
            s = stops(tts, rule, tip)
            report[f"{name}/{form}"] = {"talker": m["talker"], "code_predictor": m["code_predictor"],
                                        "frames": m["frames"], **{k: v for k, v in s.items() if k != "texts"},
                                        "texts": s["texts"]}
            r = report[f"{name}/{form}"]
            print(f"{name:8s} {form:11s} frames {r['frames']:4d}  talker median {r['talker']['median']:8.3f} "
                  f"p10 {r['talker']['p10']:8.3f} min {r['talker']['min']:8.3f} | code predictor median "
                  f"{r['code_predictor']['median']:8.3f} p10 {r['code_predictor']['p10']:8.3f} min "
                  f"{r['code_predictor']['min']:8.3f} | stopped {r['stopped']}/{len(TEXTS)}, within 2 "
                  f"{r['within_2']}, exact {r['exact_length']}, codes equal {r['codes_equal_mean']:.3f}",
                  file=sys.stderr)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
