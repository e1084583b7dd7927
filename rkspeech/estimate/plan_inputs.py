"""A text-to-speech plan read into the stages ``estimate.plan_time`` prices: :class:`StageInput`
(one stage's call and how often it runs), :func:`plan_inputs` (every stage of a plan.json from
its files: .rknn build logs, ONNX weights and caches, the host loop's heads) and
:func:`plan_target`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkspeech.core.errors import RkspeechError
from rkspeech.estimate.assumptions import CHIPS, PlanAssumptions
from rkspeech.estimate.calls import CpuCall, NpuCall, onnx_call


# ---- inputs per stage ------------------------------------------------------------------------
@dataclass
class StageInput:
    name: str  # "talker prefill", "talker decode", "code predictor" (+ "code predictor start"), "vocoder first", ...
    call: CpuCall | NpuCall
    per_frame: float = 0.0  # calls per frame (decode 1, code predictor 16 / 1, vocoder main 1/B)
    per_utterance: float = 0.0  # calls once per utterance (prefill, vocoder first)
    impl: str = ""
    note: str = ""
    positions: int = 1  # positions per call (prefill B)
    B: int | None = None  # vocoder frames per call
    cache_capacity: int = 0  # the talker decode's KV capacity (kv_read="position")
    threads: int | None = None  # a CPU stage's threads as the plan records them (None: not recorded)
    min_threads: int = 1  # the runtime gives it at least these (the talker prefill)
    fixed_threads: int | None = None  # runs on these whatever the caller says (the host heads: 1)
    copies: int = 1  # streams that each make this stage's calls apart (``estimate.streams``)

    @property
    def unit(self) -> str:
        return "npu" if isinstance(self.call, NpuCall) else "cpu"


# ---- from files ---------------------------------------------------------------------------------
def rknn_call(rknn: str | os.PathLike, a: PlanAssumptions) -> NpuCall:
    """The layer-table estimate of one .rknn (its build log beside it) at ``a``'s NPU figures."""
    from rkspeech.estimate.steptime import estimate_path

    est = estimate_path(rknn, a.npu())
    return NpuCall(est_ms=est.est_ms_cores(a.npu_cores_per_stage), layers=len(est.layers),
                   traffic_bytes=est.traffic_mb * 2**20, source=est.source)


# ---- the plan ---------------------------------------------------------------------------------
def _record(plan_raw: dict, name: str) -> tuple[str | None, str | None]:
    """(variant, placement) a stage section records, tolerant of what is absent or unexpected."""
    sec = plan_raw.get(name) if isinstance(plan_raw, dict) else None
    if not isinstance(sec, dict):
        return None, None
    q = sec.get("quantization")
    variant = None
    if isinstance(q, dict):
        v = q.get("variant", q.get("dtype"))
        variant = str(v) if v is not None else None
    pl = sec.get("placement")
    return variant, (str(pl) if isinstance(pl, str) else None)


def plan_inputs(plan_path: str | os.PathLike, a: PlanAssumptions) -> tuple[list[StageInput], dict]:
    """Every stage of the plan as an input to :func:`estimate_stages`, and what the plan says
    (frames per second, target, notes)."""
    from rkspeech.plan.plan import load_plan

    p = Path(plan_path)
    plan = load_plan(p)
    from rkspeech.plan.sections import plan_streams

    info: dict[str, Any] = {"plan": str(p), "target": plan.target, "notes": [], "lanes": plan_streams(plan)}
    if plan.target and plan.target != a.chip:
        raise RkspeechError(f"plan {p} was built for {plan.target}; its layer tables say nothing about "
                            f"{a.chip} (pass --target {plan.target}, or build the plan for {a.chip})")
    k = plan.contract
    info["frames_per_s"] = k.sample_rate / k.samples_per_token
    info["frames_source"] = (f"vocoder contract: {k.sample_rate} Hz / {k.samples_per_token} samples a frame")
    out: list[StageInput] = []
    for stage_name, sp in plan.stages.items():
        variant_rec, placement = _record(plan.raw, stage_name)
        for role, files in sp.artifacts.items():
            label = {"prefill": "talker prefill", "decode": "talker decode"}.get(role, "code predictor")
            from rkspeech.contracts.read import read_contract

            # the file's own contract (the section's is one role's: the decode graph's B)
            file_contract = read_contract(files["rknn"] if sp.on_npu else files["onnx"])
            positions = int(getattr(file_contract, "B", 1) or 1)
            contract = {**sp.contract, **file_contract.to_dict()}
            if sp.on_npu:
                call = rknn_call(files["rknn"], a)
            else:
                call = onnx_call(files["onnx"], positions=positions)
                if call.detail["flat_cache"]:
                    call.cache_passes = a.cache_passes_flat
                rec = variant_rec or (placement.split("-", 1)[1] if placement and placement.startswith("cpu-")
                                      else None)
                call.detail["plan_records"] = {"variant": variant_rec, "placement": placement}
                if rec and rec not in (call.variant, "fp16", "int16-hybrid"):
                    info["notes"].append(f"{label}: the plan records {rec}, the file holds {call.variant} "
                                         "weights; the file's bytes are used")
            st, after = StageInput(label, call, impl="rknn" if sp.on_npu else "onnx", threads=sp.threads), None
            if role == "prefill":
                from rkspeech.estimate.assumptions import BOARD_DEFAULT_THREADS

                st.min_threads = BOARD_DEFAULT_THREADS  # runtime.tts.talker_backend: at least the default
                st.positions = positions
                st.per_utterance = math.ceil(a.prompt_tokens / st.positions)
                st.note = f"ceil({a.prompt_tokens} / B={st.positions}) calls once per utterance"
            elif role == "decode":
                st.per_frame = 1.0
                st.note = "one call a frame"
                st.cache_capacity = int(contract.get("capacity", 0))
            elif role == "step":
                st.per_frame = float(contract.get("capacity", 16))
                st.note = f"step form: {st.per_frame:g} calls a frame (the step contract's capacity)"
                if sp.start is not None:  # positions 0 and 1 in one call of the start graph
                    start = read_contract(sp.start)
                    st.per_frame -= int(start.B)
                    st.note = (f"step form: {st.per_frame:g} calls a frame (the step contract's capacity less "
                               f"the start graph's {start.B} positions)")
                    after = StageInput("code predictor start", onnx_call(sp.start, positions=int(start.B)),
                                       impl="rknn" if sp.on_npu else "onnx", per_frame=1.0, threads=sp.threads,
                                       note=f"one call a frame: positions 0-{int(start.B) - 1} in one call")
            else:
                st.per_frame = 1.0
                st.note = "frame form: one call a frame (the codebooks unrolled inside)"
            out += [st] + ([after] if after else [])
    heads = host_heads_input(plan, info["notes"])
    if heads is not None:
        out.append(heads)
    missing = [n for n in ("talker", "code_predictor") if n not in plan.stages]
    if missing:
        info["notes"].append(f"the plan has no {' / '.join(missing)} stage (built without them: they run in "
                             "torch on the host, not estimated); the vocoder is estimated alone")
    info["tts_stages"] = sorted(plan.stages)
    # the vocoder
    if plan.placement == "npu" and plan.rknn:
        for role in ("first", "main"):
            if role not in plan.rknn:
                continue
            from rkspeech.contracts.rknn_file import read_container

            c = read_container(plan.rknn[role])
            B = c.contract.codes_length if c.contract is not None else None
            if B is None:
                raise RkspeechError(f"plan {p}: vocoder {role} artifact carries no step contract (B unknown)")
            st = StageInput(f"vocoder {role}", rknn_call(plan.rknn[role], a), impl="rknn", B=B)
            out.append(st)
    else:
        graphs = plan.graphs("ort")
        for role in ("first", "main"):
            if role in graphs:
                from rkspeech.contracts.read import read_contract
                from rkspeech.contracts.vocoder import VocoderContract

                B = read_contract(graphs[role], VocoderContract).codes_length
                call = onnx_call(graphs[role], positions=1)
                st = StageInput(f"vocoder {role}", call, impl="onnx", B=B)
                out.append(st)
        info["notes"].append("vocoder on the CPU: priced by its conv / matmul MACs (from ONNX shape inference) "
                             "and bytes; elementwise work (Snake) is not counted")
    return out, info


def host_heads_input(plan, notes: list) -> StageInput | None:
    """The host loop's fp32 heads (``build.host_heads``, recorded by ``build qwen3-tts``) as a CPU
    stage of one call a frame, when the plan places both the talker and the code predictor as
    graphs (the numpy host loop applies the codec head, and the code predictor's heads with its
    step form); a plan without the record gets a note instead."""
    if not all(n in plan.stages for n in ("talker", "code_predictor")):
        return None
    rec = (plan.raw.get("build") or {}).get("host_heads") if isinstance(plan.raw, dict) else None
    if not isinstance(rec, dict) or not isinstance(rec.get("bytes_per_frame"), int):
        notes.append("the plan does not record the host loop's heads (built before build.host_heads): they are "
                     "not counted; rebuild the plan to count them")
        return None
    nbytes = rec["bytes_per_frame"]
    cp = plan.stages["code_predictor"]
    v, h = rec["codec_head"]
    variant, source = str(rec.get("dtype", "float32")), "plan build.host_heads (numpy, fp32)"
    if "step" not in cp.artifacts:  # the frame graph holds its own heads
        nbytes = 4 * v * h
    elif cp.heads:  # quantized head graphs: their files' bytes, the codec head still fp32
        calls = [onnx_call(p, positions=1) for p in cp.heads.values()]
        nbytes = 4 * v * h + sum(c.weight_bytes for c in calls)
        variant = f"fp32 codec head + {calls[0].variant} code predictor heads"
        source = f"plan build.host_heads (codec head) + {len(calls)} head graphs"
    macs = v * h + (math.prod(rec["code_predictor_heads"]) if "step" in cp.artifacts else 0)
    call = CpuCall(weight_bytes=nbytes, macs=macs, variant=variant, source=source)
    return StageInput("host heads", call, per_frame=1.0, impl="numpy", fixed_threads=1,
                      note="the host loop's heads (codec head + code predictor heads), read once a frame")


def plan_target(plan_path: str | os.PathLike) -> str | None:
    """The chip a plan says it was built for (``vocoder.target``), None when it does not
    say or cannot be read (``load_plan`` reports the reason later)."""
    import json

    from rkspeech.plan.record import upgrade

    try:
        raw = upgrade(json.loads(Path(plan_path).read_text()), str(plan_path))
        t = raw["vocoder"]["target"]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, RkspeechError):
        return None
    return t if isinstance(t, str) and t in CHIPS else None
