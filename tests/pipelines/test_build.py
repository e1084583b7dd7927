"""The one build command on a reduced checkpoint: convert, inspect, simulate, plan; re-runs skip."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.rknn, pytest.mark.slow]


def _options(ckpt, out, **kw):
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions

    return VocoderBuildOptions(**{"model_dir": ckpt, "target": "rk3588", "codes_length": 16, "first_length": 4,
                                  "out_dir": out, "verify_steps": 3, "timeout": 900.0, **kw})


@pytest.fixture(scope="module")
def built(reduced_vocoder_build):
    return reduced_vocoder_build


def test_build_converts_and_verifies_on_simulator(built):
    out, summary = built
    assert summary["export"]["snr_db"]["onnxruntime_step"] >= 60.0  # npu graph, phase Snake (thresholds)
    # the acceptance bar: the reduced step on the simulator, stepwise, >= 40 dB vs onnxruntime
    assert summary["verify"]["sim_vs_onnxruntime_db"] >= 40.0
    assert summary["verify"]["snr_db"]["rknn_sim_step"] >= 40.0
    for role in ("main", "first"):
        c = summary["convert"][role]
        assert c["rknn"]["has_contract"]
        assert c["placement"]["npu_ops"] > 0
        assert "regtask_overflow_lines" in c["build"]
        assert summary["inspect"][role]["target"] == "rk3588"
    assert summary["inspect"]["first"]["contract"]["B"] == 4
    report = json.loads((out / "build-report.json").read_text())
    assert report["plan"].endswith("plan.json")


def test_plan_loads_and_matches_artifacts(built):
    from rkspeech.plan.plan import load_plan

    out, _ = built
    plan = load_plan(out / "plan.json", backend="rknnlite", expect_target="rk3588")
    assert plan.contracts["main"].codes_length == 16 and plan.contracts["first"].codes_length == 4
    assert load_plan(out / "plan.json", backend="sim").contract == plan.contract  # the ONNX the .rknn came from
    # ort runs the exact host graphs (reference formulation): the same B, signal and cache size
    from rkspeech.plan.plan import contract_differences

    plan_ort = load_plan(out / "plan.json", backend="ort")
    assert plan_ort.contract.formulation == "reference" and plan_ort.contract.cache_numel == plan.contract.cache_numel
    assert {d.split()[0] for d in contract_differences(plan_ort.contract, plan.contract)} == \
        {"formulation", "codes_dtype", "cache"}


def test_rerun_skips_unchanged_stages(built, reduced_ckpt):
    from rkspeech.pipelines.vocoder_build import build_vocoder

    out, _ = built
    again = build_vocoder(_options(reduced_ckpt, out))
    assert all(s.get("skipped") for s in again["stages"].values()), again["stages"]
