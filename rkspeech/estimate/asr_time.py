"""Board time of a Qwen3-ASR plan (``rkspeech estimate --plan`` given a ``build qwen3-asr`` plan).

No board here: every figure is an estimate, priced with the text-to-speech plan's own call models
(``plan_time.cpu_call_ms`` / ``npu_call_ms``, ``PlanAssumptions``) on this plan's graphs:

* **encoder**: one window graph call per 8 s window of the utterance (the smallest window graph that
  holds the window's chunks), each the compiler's layer table plus dispatch (``rknn_call``); with
  the NPU board factor (``assumptions.NPU_BOARD_FACTOR``, the one public calibration point) beside it,
  as the band between the ideal table and the calibrated figure;
* **prefill**: ``ceil(prompt / B)`` calls of the prefill graph, the prompt being the template's
  positions with an empty context (counted with the plan's own tokenizer: ``PromptBuilder.overhead``)
  plus 13 audio tokens a second;
* **decode**: per generated token one decode-graph call and one head-graph call (the tied
  151,936-row head is most of the bytes), the tokens being ``language English<asr_text>`` (counted
  with the plan's tokenizer: 3 with Qwen's, 16 with a synthetic root's small one) + ``tokens_per_s``
  x the utterance + one end token.

The decoder and the encoder run one after the other (the prompt needs every encoder token), so the
time from end of speech to transcript is the sum; the real-time factor is that over the audio.
Not modelled: the host's features and sampling, the tokenizer, CPU/NPU synchronisation.
"""

from __future__ import annotations

import math
import os
from typing import Any

from rkspeech.estimate.assumptions import NPU_BOARD_FACTOR, PlanAssumptions

#: what the model writes before the text when it detects the language
LANGUAGE_PREFIX = "language English<asr_text>"
#: transcript tokens per second of speech: English at ~150 words a minute, ~1.3 Qwen tokens a word
TOKENS_PER_S = 3.3
#: the utterances priced: a voice command and a longer sentence
UTTERANCES_S = (3.0, 10.0)
#: public RK3588 figures the estimate is read beside (theirs, not ours)
PEERS = {"rtf": {"value": 0.23, "source": "suharvest/rkvoice-stream: Qwen3-ASR RKNN encoder + RKLLM w8a8 decoder"},
         "first_word_s": {"value": 1.2, "source": "same: time to the first word"}}


def estimate_asr_plan(plan_path: str | os.PathLike, a: PlanAssumptions | None = None,
                      utterances=UTTERANCES_S, tokens_per_s: float = TOKENS_PER_S) -> dict[str, Any]:
    """The report for a Qwen3-ASR ``plan.json``: per graph one call's ms, per utterance the parts."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.estimate.calls import onnx_call
    from rkspeech.estimate.plan_inputs import rknn_call
    from rkspeech.estimate.plan_time import cpu_call_ms, npu_call_ms
    from rkspeech.models.qwen3_asr.geometry import CHUNK_FRAMES
    from rkspeech.models.qwen3_asr.prompt import PromptBuilder
    from rkspeech.plan.asr import load_asr_plan

    a = (a or PlanAssumptions()).check()
    plan = load_asr_plan(plan_path)
    notes = []
    from pathlib import Path

    prompts = PromptBuilder(Path(plan.host["config.json"]).parent)
    overhead = prompts.overhead()
    language_tokens = len(prompts.tokenizer.encode(LANGUAGE_PREFIX))
    windows = {}
    for k, files in plan.windows.items():
        if files.get("rknn") is not None:
            call = rknn_call(files["rknn"], a)
            windows[k] = {"ideal_ms": npu_call_ms(call, a), "layers": call.layers, "unit": "npu"}
        else:
            ms, *_ = cpu_call_ms(onnx_call(files["onnx"]), a)
            windows[k] = {"ideal_ms": ms, "unit": "cpu"}
            notes.append(f"encoder window k{k} is a CPU graph here (placement {plan.encoder_placement})")
        windows[k]["calibrated_ms"] = windows[k]["ideal_ms"] * (NPU_BOARD_FACTOR if windows[k]["unit"] == "npu"
                                                                else 1.0)
    B = read_contract(plan.decoder["prefill"]).B
    graphs = {}
    for role, positions in (("prefill", B), ("decode", 1), ("head", 1)):
        ms, mem, comp, nbytes = cpu_call_ms(onnx_call(plan.decoder[role], positions), a)
        graphs[role] = {"ms": ms, "memory_ms": mem, "compute_ms": comp, "bytes": nbytes}
    per_token = graphs["decode"]["ms"] + graphs["head"]["ms"]
    rows = []
    window_chunks = max(plan.windows)
    for seconds in utterances:
        chunks = math.ceil(seconds * 100 / CHUNK_FRAMES)
        parts = [min(window_chunks, chunks - i) for i in range(0, chunks, window_chunks)]
        sizes = [min(k for k in plan.windows if k >= p) for p in parts]
        enc_ideal = sum(windows[k]["ideal_ms"] for k in sizes)
        enc_cal = sum(windows[k]["calibrated_ms"] for k in sizes)
        prompt = overhead + round(13 * seconds)
        prefill = math.ceil(prompt / B) * graphs["prefill"]["ms"]
        tokens = language_tokens + math.ceil(tokens_per_s * seconds) + 1
        decode = tokens * per_token
        first_word = prefill + (language_tokens + 1) * per_token
        total = {"ideal": enc_ideal + prefill + decode, "calibrated": enc_cal + prefill + decode}
        rows.append({"audio_s": seconds, "windows": sizes, "encoder_ms": {"ideal": enc_ideal, "calibrated": enc_cal},
                     "prompt_positions": prompt, "prefill_ms": prefill, "tokens": tokens, "decode_ms": decode,
                     "end_of_speech_to_transcript_s": {k: v / 1e3 for k, v in total.items()},
                     "end_of_speech_to_first_word_s": {"ideal": (enc_ideal + first_word) / 1e3,
                                                       "calibrated": (enc_cal + first_word) / 1e3},
                     "rtf": {k: v / 1e3 / seconds for k, v in total.items()}})
    return {"plan": str(plan.path), "kind": "qwen3-asr", "chip": a.chip, "encoder": windows, "decoder": graphs,
            "decoder_placement": plan.decoder_placement, "per_token_ms": per_token, "utterances": rows,
            "assumptions": {"prompt_overhead": overhead, "language_tokens": language_tokens,
                            "tokens_per_s": tokens_per_s, "npu_board_factor": NPU_BOARD_FACTOR,
                            "threads": a.stage_threads(None), "cpu_gbps": a.cpu_bandwidth(a.stage_threads(None))[0]},
            "notes": notes, "peers": PEERS}
