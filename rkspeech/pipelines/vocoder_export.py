"""Checkpoint -> checked step graph -> checked ONNX, for ``rkspeech export`` and ``rkspeech build``.

Order: load (clear errors on a bad checkpoint) -> torch stepwise check (nothing is exported if
the step does not reproduce the full decode) -> export to a staging name -> graph summary and
cleanliness -> onnxruntime stepwise check on the staged file -> rename into place.  A failed
check leaves any earlier ONNX at the output path untouched.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core import progress
from rkspeech.core.atomic import atomic_path
from rkspeech.core.errors import RkspeechError
from rkspeech.core.threads import default_threads
from rkspeech.contracts.formulations import DEFAULT_FORMULATION, canonical
from rkspeech.core.compare import json_number
from rkspeech.verify.stepwise import (
    check_tokens,
    full_decode,
    random_codes,
    require,
    stepwise_check,
)


@dataclass(frozen=True)
class ExportOptions:
    """What ``export_vocoder`` does; the CLI builds one from its flags, code calls it directly."""

    model_dir: str | os.PathLike | None = None  # None: $QWEN3_TTS_MODEL
    codes_length: int = 64  # B, tokens per main step
    output: str | os.PathLike | None = None  # default qwen3_tts_vocoder_step_B<B>.onnx
    first_length: int | None = None  # small-B first-step graph (its cache feeds the main graph)
    check_only: bool = False  # torch stepwise check only, export nothing
    min_snr_db: float | None = None  # None: the step graph's own (FP32_MIN_SNR_DB or its Snake's)
    seed: int = 0  # RNG seed of the random check codes
    formulation: str = DEFAULT_FORMULATION


@dataclass
class ExportResult:
    report: dict = field(default_factory=dict)
    main_onnx: Path | None = None
    first_onnx: Path | None = None


def export_vocoder(options: ExportOptions) -> ExportResult:
    import torch

    from rkspeech.export.vocoder_onnx import (
        export_step_onnx,
        graph_summary,
        require_clean,
    )
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.runners.torch_step import TorchStepRunner
    from rkspeech.runtime.tts.streaming import Engine
    from rkspeech.stepgraph.step_npu import make_step

    o = options
    codes_length, first_length, formulation = o.codes_length, o.first_length, canonical(o.formulation)
    if codes_length < 1:
        raise RkspeechError(f"--codes-length must be >= 1, got {codes_length}")
    if first_length is not None and first_length < 1:
        raise RkspeechError(f"--first-length must be >= 1, got {first_length}")
    # the config and the output location are checked before any work (and any progress line)
    from rkspeech.core.atomic import check_writable
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config, resolve_checkpoint

    read_config(resolve_checkpoint(o.model_dir))
    out = Path(o.output) if o.output else Path(f"qwen3_tts_vocoder_step_B{codes_length}.onnx")
    if out.suffix == ".rknn":
        out = out.with_suffix(".onnx")
    if not o.check_only:
        check_writable(out, what="output ONNX", make_parents=True)
    threads = default_threads()
    torch.set_num_threads(threads)
    with progress.stage("load checkpoint"):
        model, cfg, files = load_vocoder(o.model_dir)
    main_step = make_step(model, codes_length, formulation)
    first_step = make_step(model, first_length, formulation) if first_length else None
    contract = main_step.contract
    report: dict = {
        "model": "qwen3-tts-vocoder",
        "formulation": formulation,
        "checkpoint": str(files.folder),
        "B": codes_length,
        "first_B": first_length,
        "cache_numel": contract.cache_numel,
        "cache_segments": {s.name: list(s.shape) for s in contract.segments},
        "head_dim": contract.head_dim,
        "samples_per_token": contract.samples_per_token,
        "sample_rate": contract.sample_rate,
        "snr_db": {},
        "check_tokens": check_tokens(codes_length, first_length),
    }
    codes = random_codes(report["check_tokens"], cfg.num_quantizers, cfg.codebook_size, o.seed)
    with progress.stage(f"full decode of {len(codes)} check tokens"):
        reference = full_decode(model, codes)
    with progress.stage("torch stepwise check"):
        first_engine = Engine(TorchStepRunner(first_step), first_step.contract) if first_step else None
        res = stepwise_check(reference, codes, Engine(TorchStepRunner(main_step), contract), first_engine)
    report["snr_db"]["torch_step"] = json_number(res.snr_db)
    min_snr = o.min_snr_db if o.min_snr_db is not None else main_step.fp32_min_snr_db
    require(res, min_snr, "torch step")
    result = ExportResult(report)
    if o.check_only:
        return result

    first_out = out.with_name(f"{out.stem}_first_B{first_length}.onnx") if first_step else None
    targets = {"main": (out, main_step)} | ({"first": (first_out, first_step)} if first_out else {})
    # Both graphs are staged under temporary names and renamed into place only when every check
    # passed: a failed check leaves earlier ONNX files at these paths untouched.
    with contextlib.ExitStack() as stack:
        staged = {role: stack.enter_context(atomic_path(path, suffix=".onnx")) for role, (path, _) in targets.items()}
        for role, (_, step) in targets.items():
            with progress.stage(f"export ONNX {role} step (B={step.contract.codes_length})"):
                export_step_onnx(step, staged[role])
        summary = graph_summary(staged["main"])
        report["onnx"] = {k: summary[k] for k in ("nodes", "op_histogram", "risky_ops", "opset", "bytes")}
        require_clean(summary)
        with progress.stage("onnxruntime stepwise check"):
            engines = {role: Engine(stack.enter_context(open_runner("ort", staged[role], threads=threads)),
                                    step.contract) for role, (_, step) in targets.items()}
            res = stepwise_check(reference, codes, engines["main"], engines.get("first"))
        report["snr_db"]["onnxruntime_step"] = json_number(res.snr_db)
        require(res, min_snr, "onnxruntime step")
    report["onnx"]["path"] = str(out)
    if first_out:
        report["onnx"]["first_path"] = str(first_out)
    result.main_onnx, result.first_onnx = out, first_out
    return result
