"""``rkspeech build qwen3-tts``'s options: what each stage is given, their checks (one line per
mistake, before any work), and the placement each stage takes from them.

Placement per stage (``talker``, ``code_predictor``; ``core.placement.PLACEMENTS``): ``npu`` (the
default) or ``cpu-fp32`` / ``cpu-int8`` / ``cpu-int4``; ``skip_talker_rknn`` is ``talker="cpu-fp32"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rkspeech.contracts.formulations import DEFAULT_FORMULATION
from rkspeech.core.errors import RkspeechError
from rkspeech.core.placement import PLACEMENTS
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.core.thresholds import GATE_MODES
from rkspeech.pipelines.code_predictor_forms import DEFAULT_FORM

#: placements whose weights a quantizer writes (the fp16 headroom stage finds their outlier inputs)
QUANTIZED = ("cpu-int8", "cpu-int4")


@dataclass(frozen=True)
class TTSBuildOptions:
    out_dir: str | os.PathLike
    model_dir: str | os.PathLike | None = None  # a full model root (None: $QWEN3_TTS_MODEL)
    target: str = DEFAULT_TARGET
    # vocoder
    vocoder_plan: str | os.PathLike | None = None  # reuse a built qwen3-tts-vocoder plan (checked) instead
    codes_length: int = 64
    first_length: int | None = 16
    formulation: str = DEFAULT_FORMULATION
    verify_steps: int = 3
    pieces: int = 1  # the vocoder's simulator check in N graph pieces
    # code predictor
    verify_frames: int = 50  # frames replayed through the simulator (greedy agreement, logit SNR)
    skip_code_predictor: bool = False
    # "fp16" or "int16-hybrid" (code_predictor_build.DTYPES: the int16_ready graph, w16a16i_dfp with
    # fp16 layers; 99.56 % greedy agreement against fp16's 98.48 % on the reduced checkpoint)
    code_predictor_dtype: str = "fp16"
    code_predictor_calibration_frames: int = 240
    # "step" (one NPU call per position, host heads and sampling; converts at the published size
    # in 15 s / 2.3 GB) or "frame" (one greedy call per frame; 18.9 GB to convert there)
    code_predictor_form: str = DEFAULT_FORM
    # talker
    talker_capacity: int = 512  # KV positions: prompt + frames of one utterance
    talker_prefill: int = 32  # positions per prefill call
    skip_talker: bool = False  # no talker graph (torch on the host)
    skip_talker_rknn: bool = False  # talker graphs as ONNX only (onnxruntime on the host): talker="cpu-fp32"
    # placement per stage (core.placement.PLACEMENTS); None: npu (talker: cpu-fp32 with skip_talker_rknn)
    talker: str | None = None
    code_predictor: str | None = None
    vocoder: str = "npu"  # only npu for now
    cpu_threads: int | None = None  # onnxruntime threads recorded for the CPU stages (None: the runtime's default)
    # streams the CPU-placed fp32 / int4 stages' lanes graphs serve at once (pipelines.lane_graphs;
    # 1: none, one stream at a time)
    streams: int = 4
    int4_block: int = 32  # cpu-int4: MatMulNBits block along K (convert.cpu_quant.CpuQuantOptions)
    int4_symmetric: bool = False  # cpu-int4: no zero points
    cpu_check_frames: int = 48  # frames per utterance at most of the accuracy gate (cpu_stages.DEFAULT_CHECK_FRAMES)
    gate: str = "refuse"  # core.thresholds.GATE_MODES: refuse an unsafe placement, warn, or off (not measured)
    # the gate's utterances all at once over lane graphs (pipelines.gate_lanes) when both stages are
    # CPU-placed fp32 / int4 (stage_gate.lanes_apply); False: one at a time over the placed graphs
    # (docs/accuracy-gate.md, Cost)
    gate_lanes: bool = True
    # fp32 activation peaks of the NPU-placed talker / code predictor, their exact rescale or a
    # refusal (pipelines.fp16_headroom); skip: not measured, the graphs as they are
    skip_fp16_headroom: bool = False
    # all
    skip_sim: bool = False
    timeout: float | None = None
    fail_on_cpu: bool = False
    force: bool = False


def validate(o: TTSBuildOptions) -> None:
    """One line naming the first flag that cannot be built, before any work."""
    if o.target not in TARGETS:
        raise RkspeechError(f"unknown target {o.target!r}; choose one of {', '.join(TARGETS)}")
    from rkspeech.pipelines.code_predictor_build import DTYPES
    from rkspeech.pipelines.code_predictor_forms import FORMS

    if o.code_predictor_form not in FORMS:
        raise RkspeechError(f"unknown --code-predictor-form {o.code_predictor_form!r}; choose one of "
                            f"{', '.join(FORMS)}")

    if o.code_predictor_dtype not in DTYPES:
        raise RkspeechError(f"unknown --code-predictor-dtype {o.code_predictor_dtype!r}; choose one of "
                            f"{', '.join(DTYPES)}")
    for name in ("codes_length", "verify_steps", "pieces", "verify_frames", "talker_capacity", "talker_prefill",
                 "code_predictor_calibration_frames"):
        if getattr(o, name) < 1:
            raise RkspeechError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(o, name)}")
    if o.talker_prefill > o.talker_capacity:
        raise RkspeechError(f"--talker-prefill {o.talker_prefill} exceeds --talker-capacity {o.talker_capacity}")
    for flag, value in (("--talker", o.talker), ("--code-predictor", o.code_predictor), ("--vocoder", o.vocoder)):
        if value is not None and value not in PLACEMENTS:
            raise RkspeechError(f"unknown {flag} {value!r}; choose one of {', '.join(PLACEMENTS)}")
    if o.vocoder != "npu":
        raise RkspeechError(f"--vocoder {o.vocoder}: not available yet, the vocoder is built for the NPU "
                            "(speak --backend ort runs its exact host graphs on the CPU)")
    if o.skip_talker_rknn and o.talker == "npu":
        raise RkspeechError("--skip-talker-rknn places the talker on the CPU (cpu-fp32); drop it or --talker npu")
    if o.skip_talker and o.talker not in (None, "npu"):
        raise RkspeechError(f"--skip-talker keeps the talker in torch; drop it or --talker {o.talker}")
    if o.skip_code_predictor and o.code_predictor not in (None, "npu"):
        raise RkspeechError(f"--skip-code-predictor keeps the code predictor in torch; drop it or "
                            f"--code-predictor {o.code_predictor}")
    if o.code_predictor not in (None, "npu") and o.code_predictor_dtype != "fp16":
        raise RkspeechError(f"--code-predictor-dtype {o.code_predictor_dtype} is an NPU conversion; "
                            f"--code-predictor {o.code_predictor} runs the exported graph on the CPU")
    if o.int4_block < 16 or o.int4_block & (o.int4_block - 1):
        raise RkspeechError(f"--int4-block must be a power of two >= 16, got {o.int4_block}")
    if o.streams < 1:
        raise RkspeechError(f"--streams must be >= 1, got {o.streams}")
    if o.cpu_threads is not None and o.cpu_threads < 1:
        raise RkspeechError(f"--cpu-threads must be >= 1, got {o.cpu_threads}")
    if o.cpu_check_frames < 1:
        raise RkspeechError(f"--cpu-check-frames must be >= 1, got {o.cpu_check_frames} (--gate off builds "
                            "without measuring)")
    if o.gate not in GATE_MODES:
        raise RkspeechError(f"unknown --gate {o.gate!r}; choose one of {', '.join(GATE_MODES)}")


def int4_options(o: TTSBuildOptions) -> dict:
    """The ``CpuQuantOptions`` fields a ``cpu-int4`` placement takes from the build's options."""
    return {"block_size": o.int4_block, "symmetric": o.int4_symmetric}


def talker_placement(o: TTSBuildOptions) -> str:
    """The talker's placement: ``talker``, else ``cpu-fp32`` with ``skip_talker_rknn``, else npu."""
    return o.talker or ("cpu-fp32" if o.skip_talker_rknn else "npu")


def code_predictor_placement(o: TTSBuildOptions) -> str:
    return o.code_predictor or "npu"
