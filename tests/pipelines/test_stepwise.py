"""The stateful step against the full decode, over the whole signal, and the checks failing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.runners.torch_step import TorchStepRunner
from rkspeech.runtime.tts.streaming import Engine
from rkspeech.stepgraph.step import VocoderStep, join_tails
from rkspeech.verify.stepwise import (
    check_tokens,
    full_decode,
    random_codes,
    require,
    stepwise_check,
)
from rkspeech.core.thresholds import PHASE_SNAKE_FP32_MIN_SNR_DB


class ZeroKvHistory:
    """Broken cache: the KV history is wiped before every step."""

    def __init__(self, runner, contract):
        self.runner, self.kv = runner, contract.segment("kv")

    def infer(self, feed):
        cache = feed["cache_in"].copy()
        cache[self.kv.offset:self.kv.end] = 0.0
        return self.runner.infer({**feed, "cache_in": cache})


class CacheValidAsFlag:
    """Broken host: ``cache_valid`` passed as a 0/1 "has history" flag instead of a count."""

    def __init__(self, runner):
        self.runner = runner

    def infer(self, feed):
        flag = np.minimum(feed["cache_valid"], 1.0).astype(np.float32)
        return self.runner.infer({**feed, "cache_valid": flag})


class SwappedTails:
    """Broken layout: two same-shaped tails written to each other's segment (``up0_dw``, ``up1_dw``)."""

    def __init__(self, runner, contract, a="up0_dw", b="up1_dw"):
        self.runner, self.a, self.b = runner, contract.segment(a), contract.segment(b)
        assert self.a.shape == self.b.shape

    def infer(self, feed):
        out = self.runner.infer(feed)
        got, cache = out["cache_out"], out["cache_out"].copy()
        a, b = self.a, self.b
        cache[a.offset:a.end], cache[b.offset:b.end] = got[b.offset:b.end], got[a.offset:a.end]
        return {**out, "cache_out": cache}


def _setup(model, B, first):
    main = VocoderStep(model, B)
    first_step = VocoderStep(model, first) if first else None
    codes = random_codes(check_tokens(B, first), 16, model.cfg.codebook_size, seed=1)
    return main, first_step, codes, full_decode(model, codes)


@pytest.mark.parametrize("B, first", [(16, 4), (8, None), (1, 3)])
def test_torch_step_matches_full_decode(reduced_model, B, first):
    main, first_step, codes, ref = _setup(reduced_model, B, first)
    assert main.contract.cache_numel == VocoderStep(reduced_model, 3).contract.cache_numel  # N independent of B
    res = stepwise_check(ref, codes, Engine(TorchStepRunner(main), main.contract),
                         Engine(TorchStepRunner(first_step), first_step.contract) if first_step else None)
    assert res.samples == ref.size  # whole signal, including the final partial step
    assert res.snr_db >= 100.0
    assert min(res.per_step_snr_db) >= 100.0


@pytest.mark.parametrize("breakage", ["zero_kv", "flag", "swapped"])
def test_check_fails_on_broken_cache(reduced_model, breakage):
    main, _, codes, ref = _setup(reduced_model, 16, None)
    runner = TorchStepRunner(main)
    broken = {"zero_kv": lambda: ZeroKvHistory(runner, main.contract), "flag": lambda: CacheValidAsFlag(runner),
              "swapped": lambda: SwappedTails(runner, main.contract)}[breakage]()
    res = stepwise_check(ref, codes, Engine(broken, main.contract))
    assert res.snr_db < 40.0
    with pytest.raises(RkspeechError, match="does not reproduce"):
        require(res, 100.0, "torch step")


def test_cache_out_is_joined_by_segment_name(reduced_model):
    """New tails are collected by name and written in the contract's order; a tail that is
    missing, unknown or of the wrong shape is an error, not a silently shifted cache."""
    segs = VocoderStep(reduced_model, 4).contract.segments
    tails = {s.name: torch.full(s.shape, float(i)) for i, s in enumerate(segs)}
    flat = join_tails(segs, dict(reversed(tails.items())))  # insertion order does not matter
    for i, s in enumerate(segs):
        assert torch.all(flat[s.offset:s.end] == i)
    with pytest.raises(RuntimeError, match=r"not produced: \['b0_r3'\]"):
        join_tails(segs, {k: v for k, v in tails.items() if k != "b0_r3"})
    with pytest.raises(RuntimeError, match=r"not in the contract: \['extra'\]"):
        join_tails(segs, {**tails, "extra": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="b0_r1 has shape"):
        join_tails(segs, {**tails, "b0_r1": tails["b0_r3"]})


def test_export_and_onnxruntime_check(reduced_ckpt, tmp_path):
    from rkspeech.contracts.read import read_contract
    from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

    out = tmp_path / "step.onnx"
    result = export_vocoder(ExportOptions(model_dir=reduced_ckpt, codes_length=16, output=out, first_length=4))
    r = result.report
    # the default (npu) graph: its phase Snake is approximate in fp32 (thresholds, measured 72 dB)
    assert r["snr_db"]["torch_step"] >= PHASE_SNAKE_FP32_MIN_SNR_DB
    assert r["snr_db"]["onnxruntime_step"] >= PHASE_SNAKE_FP32_MIN_SNR_DB
    for key in ("B", "cache_numel"):
        assert key in r
    assert r["onnx"]["nodes"] == sum(r["onnx"]["op_histogram"].values())
    for banned in ("Exp", "Pad", "Shape", "ConstantOfShape"):
        assert banned not in r["onnx"]["op_histogram"]
    contract = read_contract(out)
    assert contract.codes_length == 16 and contract.cache_numel == r["cache_numel"]
    assert read_contract(result.first_onnx).codes_length == 4
    assert not list(tmp_path.glob(".*staging*"))
    json.dumps(r)


def test_failed_check_leaves_previous_onnx(reduced_ckpt, tmp_path):
    from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

    out = tmp_path / "step.onnx"
    out.write_bytes(b"previous artifact")
    with pytest.raises(RkspeechError):
        export_vocoder(ExportOptions(model_dir=reduced_ckpt, codes_length=8, output=out, min_snr_db=500.0))  # impossible threshold
    assert out.read_bytes() == b"previous artifact"
    assert not list(tmp_path.glob(".*staging*"))


@pytest.mark.slow
def test_published_config_torch_and_onnxruntime(published_ckpt, tmp_path):
    from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

    r = export_vocoder(ExportOptions(model_dir=published_ckpt, codes_length=16, output=tmp_path / "pub.onnx",
                                 first_length=4, formulation="reference")).report
    assert r["cache_numel"] == 1_298_496
    assert r["snr_db"]["torch_step"] >= 100.0
    assert r["snr_db"]["onnxruntime_step"] >= 100.0
