"""numpy vs torch host loop (not a test): the same stage plan, the same graphs, greedy.

Writes (once, cached in ``--work``) the reduced synthetic custom-voice model root, its vocoder
step graphs (first B=4, main B=16), its talker pair (prefill B=16 + decode, capacity 256) and its
code predictor step graph, and one plan (impl onnx) placing all of them.  Then opens two
``Speaker``s over that plan, ``host="numpy"`` (runtime/tts/numpy_loop.py) and ``host="torch"``
(models/qwen3_tts/generate.py), and speaks ``--frames`` frames per text, repeats interleaved
(numpy, torch, numpy, ...).  Reported per side: generate seconds (the frame generator: prompt,
talker graph, code predictor graph, heads, sampling), the talker and code predictor graph time
(the loop's own per-stage timers), their difference (the host's part: prompt, heads, embeddings,
choice), vocoder and total; medians over ``--repeats``; load average before and after.  Codes of
both sides are compared every repeat (greedy: they must be identical).

Also: how far numpy's RoPE recipe is from torch's (fraction of cos/sin entries that differ, at the
reduced and published head sizes, over the talker's first 4096 positions).

    .venv/bin/python benchmarks/bench_numpy_loop.py --frames 40 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

TEXTS = [
    ("Hello world. This is a test of streaming speech, one frame at a time.", "ryan", "english"),
    ("Guten Tag, wie geht es Ihnen heute?", "vivian", "german"),
    ("A third sentence with numbers: 1, 22 and 333.", "eric", "auto"),
]


def build(work: Path) -> Path:
    plan = work / "plan" / "plan.json"
    if plan.is_file():
        return plan
    import torch

    torch.set_num_threads(2)
    from rkspeech.contracts.read import read_contract, read_onnx_metadata
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.plan.plan import write_plan
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
    from rkspeech.stepgraph.step import VocoderStep

    root = write_tts_checkpoint(work / "model", "reduced", "custom-voice", 0)
    d = plan.parent
    d.mkdir(parents=True, exist_ok=True)
    voc, _, _ = load_vocoder(root / "speech_tokenizer")
    steps = {"first": export_step_onnx(VocoderStep(voc, 4), d / "step_B4.onnx"),
             "main": export_step_onnx(VocoderStep(voc, 16), d / "step_B16.onnx")}
    steps = {k: Path(v) for k, v in steps.items()}
    write_plan(plan, placement="cpu-fp32", target=None, contracts={r: read_contract(p) for r, p in steps.items()}, onnx=steps)
    tts = TTSModel.load(root)
    talker = export_talker_pair(tts.net.talker.model, d / "talker", capacity=256, prefill_B=16)
    cp = export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor), d / "cp_step.onnx")

    def contract(path):
        return json.loads(read_onnx_metadata(path)["rkspeech.contract"])

    raw = json.loads(plan.read_text())
    raw["code_predictor"] = stage_section(placement="cpu-fp32", target=None, artifacts={"step": {"onnx": cp}},
                                          contract=contract(cp), base=d)
    raw["talker"] = stage_section(placement="cpu-fp32", target=None, artifacts={r: {"onnx": p} for r, p in talker.items()},
                                  contract=contract(talker["decode"]), base=d)
    plan.write_text(json.dumps(raw))
    return plan


def rope_mismatch() -> dict:
    from rkspeech.stepgraph.host import (numpy_inverse_frequencies, numpy_rope_cos_sin, rope_cos_sin,
                                         torch_inverse_frequencies)

    out = {}
    for name, hd, theta in (("reduced talker", 16, 10000.0), ("published talker", 128, 1000000.0)):
        ti, ni = torch_inverse_frequencies(hd, theta), numpy_inverse_frequencies(hd, theta)
        pos = np.arange(4096)
        tc, ts = rope_cos_sin(pos, ti)
        nc, ns = numpy_rope_cos_sin(pos, ti.numpy())
        out[name] = {"head_dim": hd, "rope_theta": theta,
                     "inv_freq_differs": int((ti.numpy() != ni).sum()), "inv_freq_n": int(ti.numel()),
                     "cos_differs": round(float((tc != nc).mean()), 4), "sin_differs": round(float((ts != ns).mean()), 4),
                     "max_abs_diff": float(max(np.abs(tc - nc).max(), np.abs(ts - ns).max()))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/bench_numpy_loop")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    a = ap.parse_args()
    work = Path(a.work)
    if a.fresh and work.exists():
        shutil.rmtree(work)
    plan = build(work)
    root = work / "model"
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    load_before = os.getloadavg()
    sides = {h: Speaker(root, plan, threads=a.threads, host=h) for h in ("numpy", "torch")}
    opts = GenerationOptions.greedy(max_new_tokens=a.frames + 1)
    rows = {h: [] for h in sides}
    same = True
    for sp in sides.values():  # warm-up
        list(sp.stream(TEXTS[0][0], speaker=TEXTS[0][1], language=TEXTS[0][2],
                       options=GenerationOptions.greedy(max_new_tokens=6)))
    for _ in range(a.repeats):
        codes = {}
        for h, sp in sides.items():
            per = {"generate_s": 0.0, "talker_s": 0.0, "code_predictor_s": 0.0, "vocoder_s": 0.0, "total_s": 0.0}
            codes[h] = []
            for text, speaker, lang in TEXTS:
                timing, c = SpeechTiming(), []
                t0 = time.perf_counter()
                for _pcm in sp.stream(text, speaker=speaker, language=lang, options=opts, codes_out=c, timing=timing):
                    pass
                per["total_s"] += time.perf_counter() - t0
                per["generate_s"] += timing.generate_s
                per["vocoder_s"] += timing.vocoder_s
                per["talker_s"] += timing.stages.get("talker_s", 0.0)
                per["code_predictor_s"] += timing.stages.get("code_predictor_s", 0.0)
                codes[h].append(np.stack(c))
            per["host_part_s"] = per["generate_s"] - per["talker_s"] - per["code_predictor_s"]
            rows[h].append(per)
        same &= all(np.array_equal(x, y) for x, y in zip(codes["numpy"], codes["torch"]))
    for sp in sides.values():
        sp.close()
    load_after = os.getloadavg()
    med = {h: {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]} for h, rs in rows.items()}
    report = {"frames_per_text": a.frames, "texts": len(TEXTS), "repeats": a.repeats, "threads": a.threads,
              "greedy_codes_identical": bool(same), "median_seconds": med,
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
              "rope": rope_mismatch(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
