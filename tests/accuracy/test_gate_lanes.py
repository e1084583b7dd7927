"""The accuracy gate in lanes (``runtime.tts.lanes``, ``pipelines.gate_lanes``; issue 39 deliver 6).

* a lane graph (the talker's step exported for 3 lanes) gives each sequence the hidden states the
  placed B = 1 / prefill graphs give it, whatever the other lanes hold (prompts of other lengths,
  rows split over calls), up to float rounding;
* on the trained reduced root (int4 stages, built once with ``--gate off``), the gate's figures
  in lanes are those of the gate one utterance at a time: the same decisions, stops and codes,
  the logit SNRs within 0.05 dB; the lane graphs hold the placed graphs' weights (a lane
  graph quantized with other options is refused in one line); int8 stages (dynamic activation
  scales over the whole call: rows are not independent) are measured one at a time.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def talker_graphs(tts, tmp_path_factory):
    """The reduced talker's CPU-export step graphs: placed (decode B=1, prefill B=4, capacity 32)
    and a lane graph (3 lanes of 16 positions, B=3)."""
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    out = tmp_path_factory.mktemp("lanes")
    stack = tts.net.talker.model
    placed = export_talker_pair(stack, out, capacity=32, prefill_B=4, **CPU_EXPORT)
    lanes = export_talker_onnx(TalkerStep(stack, capacity=3 * 16, B=3, **CPU_EXPORT), out / "lanes.onnx")
    return placed, lanes


def test_lanes_give_each_sequence_its_own_hidden_states(talker_graphs):
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.lanes import LaneGroup, Rounds
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    placed, lanes_path = talker_graphs
    rng = np.random.default_rng(0)
    hidden = read_contract(lanes_path).hidden
    # per sequence: its calls (a prompt of 5, 7 or 2 rows, then one row a step; 7 > B: two calls)
    seqs = [[rng.standard_normal((n, hidden), dtype=np.float32)] +
            [rng.standard_normal((1, hidden), dtype=np.float32) for _ in range(steps)]
            for n, steps in ((5, 4), (7, 6), (2, 3))]
    one = open_graph_talker(placed["decode"], placed["prefill"], rope="numpy", threads=1)
    want = []
    for calls in seqs:
        one.start(32)
        want.append([one.forward(x) for x in calls])
    one.close()

    rounds = Rounds()
    group = LaneGroup(open_runner("ort", lanes_path, threads=1), read_contract(lanes_path), lanes=3, lane_capacity=16,
                      rounds=rounds, rope="numpy")

    def run(calls):
        lane = group.lane()
        try:
            lane.start(16)
            return [lane.forward(x) for x in calls]
        finally:
            lane.close()

    got = rounds.map(run, seqs)
    group.close()
    assert rounds.rounds == 7 and rounds.calls == 11  # the prompts: 14 rows in 5 calls; then 6 rounds of steps
    for w, g in zip(want, got):
        assert len(w) == len(g)
        for a, b in zip(w, g):
            np.testing.assert_allclose(b, a, rtol=0, atol=2e-5 * float(np.abs(a).max()))


@pytest.fixture(scope="module")
def gate_build(trained_tts_ckpt, placeholder_vocoder_plan, tmp_path_factory):
    """The trained reduced root built with int4 CPU stages (block 32) and the gate off (the gate runs below)."""
    from rkfixtures import run_relative

    home = tmp_path_factory.mktemp("lanes_build")
    rc, _, _ = run_relative(home, ["build", "qwen3-tts", "--model-dir", os.path.relpath(trained_tts_ckpt[0], home),
                                   "--out-dir", "out", "--vocoder-plan", os.path.relpath(placeholder_vocoder_plan, home),
                                   "--talker", "cpu-int4", "--code-predictor", "cpu-int4", "--cpu-threads", "1",
                                   "--talker-capacity", "96", "--talker-prefill", "16", "--skip-sim", "--gate", "off"])
    assert rc == 0
    return home / "out"


def _gate(build, lanes: bool, folder):
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.stage_gate import check_cpu_stages, gate_inputs
    from rkspeech.pipelines.resumable import StageRunner

    inputs = gate_inputs(build)
    files = resolve_model_root(inputs["model_dir"])
    folder.mkdir()
    return check_cpu_stages(StageRunner(folder, force=True), LazyTTSModel(files), talker=inputs["talker"],
                            code_predictor=inputs["code_predictor"], ckpt=[files.config, files.weights],
                            threads=1, lanes=lanes, int4=inputs["int4"])


def test_gate_figures_in_lanes_are_those_one_at_a_time(gate_build, tmp_path):
    one = _gate(gate_build, False, tmp_path / "one")
    lanes = _gate(gate_build, True, tmp_path / "lanes")
    assert one["timing"]["lanes"] is None and lanes["timing"]["lanes"]["lanes"] == 20
    assert lanes["passed"] and one["passed"]
    for key in ("reference_frames", "stopped_reference", "texts", "requests", "prompt_form"):
        assert one[key] == lanes[key], key
    for name in ("talker", "code_predictor"):
        a, b = one["stages"][name], lanes["stages"][name]
        for part, keys in (("teacher_forced", ("agreement", "decisions", "first_diverging_frame")),
                           ("free_running", ("same_stop", "identical_utterances", "codes_equal",
                                             "first_diverging_frame"))):
            for k in keys:
                assert a[part][k] == b[part][k], (name, part, k)
        assert [t["frames"] for t in a["free_running"]["texts"]] == [t["frames"] for t in b["free_running"]["texts"]]
        assert abs(a["teacher_forced"]["logit_snr_db"] - b["teacher_forced"]["logit_snr_db"]) < 0.05, name
        assert a["teacher_forced"]["margin"]["median"] == pytest.approx(b["teacher_forced"]["margin"]["median"],
                                                                         abs=1e-3)
    report = json.loads((gate_build / "build-report.json").read_text())
    assert report["accuracy_gate"]["mode"] == "off"


def test_lane_graphs_must_hold_the_placed_weights(gate_build, tmp_path):
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.core.errors import RkspeechError
    from rkspeech.pipelines.stage_gate import gate_inputs
    from rkspeech.pipelines.lane_graphs import check_same_weights

    inputs = gate_inputs(gate_build)
    fp32, int4 = inputs["code_predictor"]["fp32"], inputs["code_predictor"]["variant"]
    check_same_weights(int4, int4, "code_predictor int4")
    check_same_weights(quantize_step_graph(fp32, tmp_path / "same.onnx", CpuQuantOptions(variant="int4"))
                       and tmp_path / "same.onnx", int4, "code_predictor int4")  # the build's options: the same
    quantize_step_graph(fp32, tmp_path / "b128.onnx", CpuQuantOptions(variant="int4", block_size=128))
    with pytest.raises(RkspeechError, match="lane graph's weights differ"):
        check_same_weights(tmp_path / "b128.onnx", int4, "code_predictor int4")


def test_int8_stages_are_measured_one_at_a_time():
    from rkspeech.pipelines.stage_gate import lanes_apply

    talker = {"placement": "cpu-int4", "fp32": {"decode": "d.onnx"}}
    cp = {"placement": "cpu-int4", "fp32": "cp.onnx", "role": "step"}
    assert lanes_apply(talker, cp) and lanes_apply(dict(talker, placement="cpu-fp32"), cp)
    assert not lanes_apply(dict(talker, placement="cpu-int8"), cp)
    assert not lanes_apply(talker, dict(cp, placement="cpu-int8"))
    assert not lanes_apply(talker, dict(cp, role="frame")) and not lanes_apply(dict(talker, placement="npu"), cp)
