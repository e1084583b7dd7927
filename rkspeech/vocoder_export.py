"""Checkpoint -> checked step graph -> checked ONNX, for ``rkspeech export`` and ``rkspeech build``.

Order: load (clear errors on a bad checkpoint) -> torch stepwise check (nothing is exported if
the step does not reproduce the full decode) -> export to a staging name -> graph summary and
cleanliness -> onnxruntime stepwise check on the staged file -> rename into place.  A failed
check leaves any earlier ONNX at the output path untouched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import progress
from .errors import RkspeechError
from .streaming.formulations import DEFAULT_FORMULATION
from .vocoder_checks import (
    FP32_MIN_SNR_DB,
    check_tokens,
    full_decode,
    random_codes,
    require,
    stepwise_check,
)


@dataclass
class ExportResult:
    report: dict = field(default_factory=dict)
    main_onnx: Path | None = None
    first_onnx: Path | None = None


def _ort_threads() -> int:
    return int(os.environ.get("RKSPEECH_THREADS", "0")) or min(2, os.cpu_count() or 1)


def export_vocoder(model_dir, codes_length: int, *, output: str | os.PathLike | None = None,
                   first_length: int | None = None, check_only: bool = False,
                   min_snr_db: float = FP32_MIN_SNR_DB, seed: int = 0,
                   formulation: str | None = None) -> ExportResult:
    import torch

    from .export.vocoder_onnx import export_step_onnx, graph_summary, require_clean
    from .models.qwen3_checkpoint import load_vocoder
    from .runtime.runners import OnnxRuntimeRunner
    from .runtime.streaming import Engine
    from .streaming.step_npu import make_step
    from .streaming.torch_runner import TorchStepRunner

    if codes_length < 1:
        raise RkspeechError(f"--codes-length must be >= 1, got {codes_length}")
    if first_length is not None and first_length < 1:
        raise RkspeechError(f"--first-length must be >= 1, got {first_length}")
    torch.set_num_threads(_ort_threads())
    with progress.stage("load checkpoint"):
        model, cfg, files = load_vocoder(model_dir)
    formulation = formulation or DEFAULT_FORMULATION
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
    codes = random_codes(report["check_tokens"], cfg.num_quantizers, cfg.codebook_size, seed)
    with progress.stage(f"full decode of {len(codes)} check tokens"):
        reference = full_decode(model, codes)
    with progress.stage("torch stepwise check"):
        first_engine = Engine(TorchStepRunner(first_step), first_step.contract) if first_step else None
        res = stepwise_check(reference, codes, Engine(TorchStepRunner(main_step), contract), first_engine)
    report["snr_db"]["torch_step"] = round(res.snr_db, 2)
    require(res, min_snr_db, "torch step")
    result = ExportResult(report)
    if check_only:
        return result

    out = Path(output) if output else Path(f"qwen3_tts_vocoder_step_B{codes_length}.onnx")
    if out.suffix == ".rknn":
        out = out.with_suffix(".onnx")
    first_out = out.with_name(f"{out.stem}_first_B{first_length}.onnx") if first_step else None
    staged = {out: out.with_name(f".{out.name}.staging.onnx")}
    if first_out:
        staged[first_out] = first_out.with_name(f".{first_out.name}.staging.onnx")
    try:
        with progress.stage(f"export ONNX (B={codes_length})"):
            export_step_onnx(main_step, staged[out])
        if first_out:
            with progress.stage(f"export ONNX first step (B={first_length})"):
                export_step_onnx(first_step, staged[first_out])
        summary = graph_summary(staged[out])
        report["onnx"] = {k: summary[k] for k in ("nodes", "op_histogram", "risky_ops", "opset", "bytes")}
        require_clean(summary)
        with progress.stage("onnxruntime stepwise check"):
            threads = _ort_threads()
            main_rt = OnnxRuntimeRunner(staged[out], threads=threads)
            first_rt = OnnxRuntimeRunner(staged[first_out], threads=threads) if first_out else None
            res = stepwise_check(reference, codes, Engine(main_rt, contract),
                                 Engine(first_rt, first_step.contract) if first_rt else None)
        report["snr_db"]["onnxruntime_step"] = round(res.snr_db, 2)
        require(res, min_snr_db, "onnxruntime step")
        for final, tmp in staged.items():
            os.replace(tmp, final)
    finally:
        for tmp in staged.values():
            if tmp.exists():
                tmp.unlink()
    report["onnx"]["path"] = str(out)
    if first_out:
        report["onnx"]["first_path"] = str(first_out)
    result.main_onnx, result.first_onnx = out, first_out
    return result
