"""Readers of reports take an identical SNR both ways: ``null`` (``core.compare.json_number``,
written now) and ``Infinity`` (what check-board, the talker's check and the vocoder's verify wrote
before; a resumed build returns its cached stage reports as they were)."""

from __future__ import annotations

import json
import math

import pytest

OLD, NEW = json.loads("Infinity"), None


@pytest.mark.parametrize("identical", [OLD, NEW], ids=["old-Infinity", "new-null"])
def test_vocoder_build_summary_prints_identical(identical):
    from rkspeech.cli.build_vocoder import summary_rows

    summary = {"target": "rk3588", "B": 4, "first_B": None, "convert": {}, "stages": {}, "plan": "p", "seconds": 1.0,
               "export": {"snr_db": {"torch_step": identical, "onnxruntime_step": 61.234}, "onnx": {"nodes": 9}},
               "verify": {"snr_db": {"rknn_sim_step": 48.0, "onnxruntime_step": identical},
                          "sim_vs_onnxruntime_db": 48.04}}
    rows = dict(summary_rows(summary))
    assert rows["SNR torch step / onnxruntime step"] == "identical / 61.2 dB"
    assert rows["simulator step vs full decode"] == "48.0 dB (onnxruntime identical dB)"


@pytest.mark.parametrize("identical", [OLD, NEW], ids=["old-Infinity", "new-null"])
def test_the_talkers_simulator_figure_is_kept_when_identical(identical):
    from rkspeech.cli.build_tts import summary_rows
    from rkspeech.pipelines.tts_build import _npu_figures

    graphs = {"talker": {"verify": {"codes_identical_ort": True, "logit_snr_db": identical}}}
    assert _npu_figures(graphs) == {"talker": {"source": "simulator", "logit_snr_db": identical}}
    assert _npu_figures({"talker": {"verify": {"codes_identical_ort": True}}}) == {}  # not measured: no figure
    rows = dict(summary_rows({"target": "rk3588", "graphs": graphs, "plan": "p", "seconds": 1.0}))
    assert rows["talker checks"] == "onnxruntime greedy codes identical; simulator logit SNR identical dB"


def test_check_board_rows_old_and_new():
    from rkspeech.board.check import snr_text
    from rkspeech.core.compare import db_value

    rows = [{"snr_db": OLD}, {"snr_db": NEW}, {"snr_db": 41.256}, {"snr_db": None, "nonfinite": 3}]
    assert [snr_text(r) for r in rows] == ["identical", "identical", "41.26", "inf/NaN x3"]
    assert min(rows[:3], key=lambda r: db_value(r["snr_db"])) is rows[2]


def test_verify_report_is_valid_json_when_identical():
    from rkspeech.verify.simulator import VerifyResult

    r = VerifyResult(tokens=8, snr_db={"onnxruntime_step": math.inf, "rknn_sim_step": 50.0},
                     sim_vs_ort_db=math.inf, per_step={"onnxruntime_step": [math.inf, 70.123]})
    rep = json.loads(json.dumps(r.to_report(), allow_nan=False))
    assert rep["snr_db"] == {"onnxruntime_step": None, "rknn_sim_step": 50.0}
    assert rep["sim_vs_onnxruntime_db"] is None and rep["per_step_snr_db"]["onnxruntime_step"] == [None, 70.12]


def test_the_fp16_headroom_row():
    from rkspeech.cli.build_tts import summary_rows

    h = {"texts": 5, "frames": 115, "graphs": {
        "code_predictor": {"top": [{"tensor": "model.layers.1.mlp.down_proj:input", "peak": 187716.6, "ratio": 2.8657}],
                           "rescale": [{"layer": 1, "channels": [13, 64, 71], "shift": 4}]},
        "talker": {"top": [{"tensor": "layers.0:output", "peak": 9.0, "ratio": 0.0001}], "rescale": []}}}
    rows = dict(summary_rows({"target": "rk3588", "graphs": {}, "plan": "p", "seconds": 1.0, "fp16_headroom": h}))
    assert rows["code_predictor: fp16 headroom"] == ("peak 2.87 x 65504 (model.layers.1.mlp.down_proj:input) over "
                                                     "115 frames of 5 texts; exact rescale layer 1 channels "
                                                     "[13, 64, 71] / 2^4")
    assert rows["talker: fp16 headroom"].endswith("; no rescale")
    assert "code_predictor: fp16 headroom" not in dict(summary_rows({"target": "rk3588", "graphs": {}, "plan": "p",
                                                                      "seconds": 1.0}))
