"""Simulator verification of a converted vocoder step: stepwise, cache threaded, whole signal.

rknn-toolkit2 2.5.0 cannot simulate a loaded ``.rknn`` ("RKNN model that loaded by 'load_rknn'
not support inference on the simulator", measured here), so the simulator rebuilds the graph
from the ONNX for the target written in the ``.rknn``; the ``.rknn`` supplies the target and
the contract, and both are checked against the ONNX before anything runs.  The simulator gives
NPU numerics (fp16 at the graph boundary, so the cache round-trips through fp16 every step),
not NPU speed and not board behaviour (a REGTASK overflow layer does not show here).  Each
simulator build runs in a child process (``open_runner("sim", ...)``): the npu B=64 graph needs
more than 24 GB there, and that must end in an error message, not in the OOM killer taking
``verify`` along.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rkspeech.core import progress
from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.streaming import Engine, StreamingVocoder
from rkspeech.core.compare import json_number, segment_snr_db, snr_db
from rkspeech.verify.stepwise import full_decode, random_codes


@dataclass
class Artifact:
    """One step graph: its ONNX, optionally its .rknn, and the contract they share."""

    onnx: Path
    rknn: Path | None
    contract: object
    target: str | None


def load_artifact(onnx_path, rknn_path=None, expect_target: str | None = None) -> Artifact:
    from rkspeech.contracts.read import read_contract
    from rkspeech.contracts.vocoder import VocoderContract

    contract = read_contract(onnx_path, VocoderContract)
    target = expect_target
    if rknn_path is not None:
        from rkspeech.contracts.rknn_file import read_container

        info = read_container(rknn_path, expect_target=expect_target)
        if not isinstance(info.contract, VocoderContract):
            raise RkspeechError(f"{rknn_path}: no rkspeech vocoder contract in its custom string; convert it with rkspeech convert")
        if info.contract != contract:
            raise RkspeechError(
                f"{rknn_path} was not converted from {onnx_path}: contracts differ "
                f"(rknn B={info.contract.codes_length} N={info.contract.cache_numel}, "
                f"onnx B={contract.codes_length} N={contract.cache_numel})"
            )
        target = info.target
    return Artifact(Path(onnx_path), Path(rknn_path) if rknn_path else None, contract, target)


@dataclass
class VerifyResult:
    tokens: int
    snr_db: dict = field(default_factory=dict)  # stage -> dB against the full decode
    sim_vs_ort_db: float | None = None
    per_step: dict = field(default_factory=dict)  # stage -> [dB per main step]
    sim_peak_rss_mb: float | None = None  # largest simulator child seen
    golden: dict = field(default_factory=dict)  # role -> runtime.golden.record_golden's report

    def to_report(self) -> dict:
        """JSON-ready: SNRs through ``core.compare.json_number`` (null: identical)."""
        return {"tokens": self.tokens, "snr_db": {k: json_number(v) for k, v in self.snr_db.items()},
                "sim_vs_onnxruntime_db": json_number(self.sim_vs_ort_db),
                "per_step_snr_db": {k: [json_number(x) for x in v] for k, v in self.per_step.items()},
                "sim_peak_rss_mb": self.sim_peak_rss_mb,
                **({"golden": self.golden} if self.golden else {})}


def verify_vocoder(model_dir, main: Artifact, first: Artifact | None = None, *, steps: int = 3,
                   target: str | None = None, seed: int = 0, threads: int = 2,
                   sim_log: str | None = None, sim_memory_limit_mb: float | None = None,
                   pieces: int = 1, goldens: dict[str, Path] | None = None) -> VerifyResult:
    """Full decode vs onnxruntime step vs simulator step, over ``steps`` main steps.

    ``goldens``: role ("main", "first") -> where to write that graph's golden replay
    (``runtime.golden``), recorded on the same simulator build just before the stream runs on
    it (a golden stage of its own would build each graph once more: 115 s of a reduced build)."""
    import torch

    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.runners.lazy import LazyRunner

    if steps < 1:
        raise RkspeechError(f"--steps must be >= 1, got {steps}")
    if pieces < 1:
        raise RkspeechError(f"--pieces must be >= 1, got {pieces}")
    c = main.contract
    if first is not None and not c.compatible_cache(first.contract):
        raise RkspeechError("first and main graphs do not share one cache layout")
    target = target or main.target  # None: open_runner's default target
    B = c.codes_length
    tokens = (first.contract.codes_length if first else 0) + (steps - 1) * B + max(1, B // 2)
    torch.set_num_threads(threads)
    with progress.stage("load checkpoint"):
        model, cfg, _ = load_vocoder(model_dir)
    if cfg.samples_per_token != c.samples_per_token or cfg.num_quantizers != c.num_quantizers:
        raise RkspeechError("the checkpoint does not match the step graph's contract")
    codes = random_codes(tokens, c.num_quantizers, c.codebook_size, seed)
    with progress.stage(f"full decode of {tokens} tokens"):
        reference = full_decode(model, codes)
    del model
    seg = c.samples_per_step
    result = VerifyResult(tokens)

    def run(stage: str, make_runner, lazy: bool = False) -> np.ndarray:
        if lazy:
            # Simulator: each runner holds a whole build (seed published B=64: ~21 GB,
            # B=16: ~7 GB), so build the first graph, run its step, free it, then build main.
            label = "simulator: build the graph (child process)"
            first_r = LazyRunner(lambda: make_runner(first), first.onnx, label=label) if first else None
            main_r = LazyRunner(lambda: make_runner(main), main.onnx, label=label,
                                before_build=first_r.close if first_r else None)
        else:
            main_r = make_runner(main)
            first_r = make_runner(first) if first else None
        try:
            engine_first = Engine(first_r, first.contract) if first else None
            sv = StreamingVocoder(Engine(main_r, c), engine_first)
            with progress.stage(f"{stage}: {tokens} tokens stepwise"):
                audio = sv.decode(codes)
        finally:
            for r in (main_r, first_r):
                if r is not None:
                    r.close()
                    if lazy:
                        result.sim_peak_rss_mb = round(max(result.sim_peak_rss_mb or 0.0, r.peak_rss_mb), 1)
        result.snr_db[stage] = round(snr_db(reference, audio), 2)
        result.per_step[stage] = [round(x, 2) for x in segment_snr_db(reference, audio, seg)]
        return audio

    ort_audio = run("onnxruntime_step", lambda a: open_runner("ort", a.onnx, threads=threads))
    # memory limit: the caller's, else open_runner's default (90 % of the memory available now)
    limit = {} if sim_memory_limit_mb is None else {"memory_limit_mb": sim_memory_limit_mb}
    def sim_runner(a: Artifact):
        r = open_runner("sim", a.onnx, target=target, dtype="fp16", log_path=sim_log, pieces=pieces, **limit)
        role = "main" if a is main else "first"
        if goldens and role in goldens:
            from rkspeech.runtime.golden import golden_inputs, record_golden

            with progress.stage(f"golden replay of {role} (simulator)"):
                result.golden[role] = record_golden(goldens[role], golden_inputs(role, a.contract, r.input_specs()),
                                                    r, source="sim", target=target or main.target, dtype="fp16")
        return r

    sim_audio = run("rknn_sim_step", sim_runner, lazy=True)
    result.sim_vs_ort_db = round(snr_db(ort_audio, sim_audio), 2)
    return result
