"""``rkspeech build qwen3-tts`` end to end on the reduced custom-voice root, then ``speak --plan``
through the simulator.

One build (the session's reduced vocoder build reused with ``--vocoder-plan``, a few verify
frames): the report holds, per graph, the figures issue 13 names; the code predictor and the talker land
wholly on the NPU; the talker's onnxruntime codes equal torch's; the plan speaks through the
simulator with every stage on a graph.  Bad options fail in one line before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from rkfixtures import have_rknn

pytestmark = pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")


@pytest.fixture(scope="module")
def built(tts_custom_ckpt, reduced_vocoder_build, tmp_path_factory):
    """The build as a user runs it: from a folder of their own, relative paths in and out."""
    import os

    from rkfixtures import run_relative

    home = tmp_path_factory.mktemp("tts_build")
    rc, _, new = run_relative(home, [
        "build", "qwen3-tts", "--model-dir", os.path.relpath(tts_custom_ckpt, home), "--out-dir", "out",
        "--vocoder-plan", os.path.relpath(reduced_vocoder_build[0] / "plan.json", home), "--verify-frames", "4",
        "--talker-capacity", "96", "--talker-prefill", "16", "--timeout", "900"])
    assert rc == 0
    assert all(p.startswith("out/") for p in new), sorted(new)
    return home / "out"


def test_report_has_the_figures_per_graph(built):
    report = json.loads((built / "build-report.json").read_text())
    graphs = report["graphs"]
    assert set(graphs) == {"talker", "code_predictor", "vocoder"}
    for name, row in graphs.items():
        assert row["placement"]["npu_ops"] > 0, name
        assert row["build"]["regtask_overflow_lines"] == 0, name
        assert row["rknn"]["bytes"] > 100_000, name
    for name in ("talker", "code_predictor"):
        assert graphs[name]["placement"]["cpu_ops"] == 0, (name, graphs[name]["placement"])
    sim = graphs["code_predictor"]["sim"]
    assert sim["frames"] == 4 and sim["code_agreement"] >= 0.9 and sim["logit_snr_db"] > 40
    tv = graphs["talker"]["verify"]
    assert tv["codes_identical_ort"] is True and tv["logit_snr_db"] > 40
    # the talker's golden replays come from the verify stage's simulator builds (no separate ones)
    assert {r: g["source"] for r, g in tv["golden"].items()} == {"prefill": "sim", "decode": "sim"}
    assert "talker_verify" in report["stages"] and "talker_golden" not in report["stages"], report["stages"]
    assert set(graphs["talker"]["per_graph"]) == {"prefill", "decode"}
    # each talker .rknn carries its contract in the custom string
    assert all(report["talker"]["graphs"][r]["rknn"]["has_contract"] for r in ("prefill", "decode"))
    # the gate would judge both NPU stages on the simulator, but this random root never stops by
    # itself: the fp32 reference is abandoned, nothing judged, the build says so and passes
    gate = report["accuracy_gate"]
    assert gate["passed"] is True and gate["not_judged"] == ["code_predictor", "talker"], gate
    assert gate["reference_abandoned_after"] < 20 and gate["stopped_reference"] < 10, gate
    assert report["warnings"] == [gate["warning"]] and "NPU-placed code predictor not judged" in gate["warning"]


def test_plan_places_every_stage(built):
    from rkspeech.plan.plan import load_plan

    plan = load_plan(built / "plan.json", backend="sim")
    assert set(plan.stages) == {"talker", "code_predictor"}
    assert all(s.placement == "npu" for s in plan.stages.values())
    assert plan.stages["talker"].contract["capacity"] == 96
    # the vocoder's exact host graphs travel into the combined plan: ort runs them, sim the npu ones
    decoder = json.loads((built / "plan.json").read_text())["vocoder"]
    assert decoder["backends"]["ort"] == "host_onnx" and {r for r, k in decoder["artifacts"].items() if "host_onnx" in k} == {"main", "first"}
    assert load_plan(built / "plan.json", backend="ort").graphs("ort") != plan.graphs("sim")


def test_speak_with_the_plan_through_the_simulator(built, tts_custom_ckpt, tmp_path, capsys):
    """Sampled (qwen-tts' defaults, seeded): the step-form code predictor samples on the host.  Run
    as a user runs it, from a folder of their own with relative paths (every stage's simulator
    child works in a folder of its own)."""
    import os

    from rkfixtures import run_relative

    wav, rep = tmp_path / "s.wav", tmp_path / "r.json"
    rc, err, new = run_relative(tmp_path, [
        "speak", "Hello from the board.", "--model-dir", os.path.relpath(tts_custom_ckpt, tmp_path), "--plan",
        os.path.relpath(built / "plan.json", tmp_path), "--backend", "sim", "--speaker", "vivian", "--seed", "3",
        "--max-frames", "6", "--threads", "1", "-o", "s.wav", "--report", "r.json"], capsys)
    assert rc == 0, err
    assert new == {"s.wav", "r.json"}, sorted(new)
    report = json.loads(rep.read_text())
    assert "torch" not in report["stage_backends"].values(), report["stage_backends"]
    pcm, rate = sf.read(wav, dtype="int16")
    assert rate == 24000 and len(pcm) == report["frames"] * 1920 and report["frames"] >= 1
    assert np.abs(pcm).max() > 0


@pytest.mark.parametrize("flags, message", [
    (["--talker-prefill", "200", "--talker-capacity", "96"], "exceeds --talker-capacity"),
    (["--verify-frames", "0"], "--verify-frames must be >= 1"),
    (["--vocoder-plan", "ORT"], "not .rknn graphs for rk3588"),
])
def test_bad_options_fail_in_one_line(tts_custom_ckpt, tmp_path, capsys, flags, message, request):
    from rkspeech.cli import main

    if "ORT" in flags:  # a vocoder plan of ONNX graphs (onnxruntime), not converted for the target
        from streaming_fixtures import step_graphs, write_ort_plan

        graphs = step_graphs(request.getfixturevalue("tmp_path_factory"), request.getfixturevalue("reduced_model"))
        flags = ["--vocoder-plan", str(write_ort_plan(tmp_path, graphs))]

    rc = main(["build", "qwen3-tts", "--model-dir", str(tts_custom_ckpt), "--out-dir", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o" / "plan.json").exists()



def test_check_board_replays_every_graph_of_the_plan(built, tmp_path, monkeypatch):
    """Every NPU graph of the plan has a golden replay beside it; onnxruntime replays them all
    within the pass marks of the simulator's outputs (the build's own goldens)."""
    from rkspeech.board.check import CheckBoardOptions, check_board

    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))
    rep = check_board(CheckBoardOptions(plan=built / "plan.json", backend="ort", repeats=1))
    assert [g["graph"] for g in rep["graphs"]] == ["vocoder first", "vocoder main", "talker prefill",
                                                    "talker decode", "code predictor step"]
    assert rep["ok"], [g.get("failure") for g in rep["graphs"]]
    for g in rep["graphs"]:
        assert g["golden_source"] == "sim" and len(g["steps"]) >= 1
        assert g["estimate"]["est_step_ms"] is not None, g["graph"]
    talker = rep["graphs"][3]
    assert len(talker["steps"]) == 3  # decode B=1: positions 0, 1, 2 through the KV cache
