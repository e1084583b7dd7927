"""``rkspeech estimate --plan P --streams N`` (``estimate.streams``; issue 55): the batched stages read
their weights once for N streams and each stream's cache, the others are made N times."""

from __future__ import annotations

import pytest

from rkspeech.estimate.calls import CpuCall, NpuCall
from rkspeech.estimate.plan_inputs import StageInput
from rkspeech.estimate.plan_time import PlanAssumptions
from rkspeech.estimate.streams import estimate_streams


def _stages(weights_mb=40.0, cache_mb=10.0, npu_ms=10.0):
    return [StageInput("talker decode", CpuCall(weight_bytes=weights_mb * 1e6, cache_bytes=cache_mb * 1e6),
                       per_frame=1.0),
            StageInput("code predictor", CpuCall(weight_bytes=weights_mb * 1e5), per_frame=14.0),
            StageInput("host heads", CpuCall(weight_bytes=1e6), per_frame=1.0, fixed_threads=1),
            StageInput("vocoder main", NpuCall(est_ms=npu_ms, layers=0, traffic_bytes=0.0), B=1)]


def test_batched_stages_read_their_weights_once():
    a = PlanAssumptions(utterance_s=1000.0, ddr_shared_gbps=1e6)
    rep = estimate_streams(_stages(npu_ms=0.5), 12.5, a, [1, 2, 4], plan_lanes=4)
    one, two, four = rep["rows"]
    assert one["streams"] == 1 and not one["batched"] and two["batched"] and not four["rebuild"]
    # per frame of 2 streams: weights once + 2 caches (talker), the code predictor once, the heads twice
    bw = a.cpu_bandwidth(2)[0] * 1e9
    want = 12.5 * ((40e6 + 2 * 10e6) / bw + 14 * 4e6 / bw + 2 * 1e6 / (a.cpu_bandwidth(1)[0] * 1e9)) * 1e3
    assert two["units_ms"]["cpu"] == pytest.approx(want, rel=1e-6)
    assert two["units_ms"]["npu"] == pytest.approx(2 * one["units_ms"]["npu"], rel=1e-3)  # the vocoder per stream
    assert 1.5 < two["gain_vs_one"] < 2.0 and four["gain_vs_one"] > two["gain_vs_one"]
    assert four["rtf_per_stream"] > one["rtf_per_stream"]


def test_the_npu_or_ddr_stops_the_gain():
    a = PlanAssumptions(utterance_s=1000.0, ddr_shared_gbps=1e6)
    rep = estimate_streams(_stages(npu_ms=3.0), 12.5, a, [1, 2, 4, 8], plan_lanes=8)
    assert [r["limiting_unit"].split(" ")[0] for r in rep["rows"]] == ["cpu", "cpu", "npu", "npu"]
    assert rep["saturates_at"] == 4


def test_without_lanes_n_streams_cost_n_times_one():
    a = PlanAssumptions(utterance_s=1000.0, ddr_shared_gbps=1e6)
    npu_talker = [StageInput("talker decode", NpuCall(est_ms=5.0, layers=0, traffic_bytes=0.0), per_frame=1.0)]
    rep = estimate_streams(npu_talker + _stages()[1:], 12.5, a, [1, 4], plan_lanes=1)
    one, four = rep["rows"]
    assert not four["batched"] and four["gain_vs_one"] == pytest.approx(1.0, rel=1e-6)
    assert rep["notes"] and "one at a time" in rep["notes"][0]


def test_counts_beyond_the_plan_say_rebuild():
    rep = estimate_streams(_stages(), 12.5, PlanAssumptions(), [1, 8], plan_lanes=4)
    assert rep["rows"][1]["rebuild"] and "--streams N" in rep["notes"][0]


def test_cli_prices_streams_and_refuses_bad_counts(tmp_path, capsys):
    from rkspeech.cli import main
    from test_estimate_plan import make_plan

    import json

    plan = make_plan(tmp_path / "p")
    assert main(["estimate", "--plan", str(plan), "--streams", "1,2,4", "--report", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr()
    assert "streams at once" in " ".join(out.out.split())
    rows = json.loads((tmp_path / "r.json").read_text())["streams"]["rows"]
    assert [r["streams"] for r in rows] == [1, 2, 4] and rows[2]["rebuild"]  # this plan has no lanes graphs
    assert main(["estimate", "--plan", str(plan), "--streams", "two"]) == 2
    err = capsys.readouterr().err
    assert "--streams must be whole numbers" in err and "Traceback" not in err
