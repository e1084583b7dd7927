"""``rkspeech accuracy`` on a tiny three-layer graph (issue 15): the per-block map, its agreement
with the whole graph on the simulator, the fp16 storage model, and broken inputs caught.

The graph: x[1,128,32] -> MatMul -> Tanh -> MatMul -> Add (residual) -> Mul (square) -> MatMul,
node names /l1/.., /l2/.., /l3/.. as torch exports them.  Measured 2026-12-01 (rk3588 fp16,
3 pieces, random inputs seed 0): simulator whole graph 62.7 dB against fp32, pieces cumulative
62.1 dB, fp16 storage model 62.1 dB; 4 simulator builds, ~10 s.  Plus the reduced vocoder step
at B=4 without the simulator (--stepwise; fp16 storage model 49.5 dB on the audio).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkfixtures import have_rknn

TOL_DB = 3.0  # pieces vs whole graph: a cut loses fusions (measured 0.6 dB here)


def tiny_graph(path, scale: float = 1.0):
    """The three-layer graph; ``scale`` multiplies the second weight (300: the square overflows fp16)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array((rng.standard_normal(s) * 0.2 * f).astype(np.float32), n)
         for n, s, f in (("W1", (32, 64), 1.0), ("W2", (64, 64), scale), ("W3", (64, 16), 1.0))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="/l1/MatMul"),
             helper.make_node("Tanh", ["h1"], ["a1"], name="/l1/Tanh"),
             helper.make_node("MatMul", ["a1", "W2"], ["h2"], name="/l2/MatMul"),
             helper.make_node("Add", ["h2", "a1"], ["r2"], name="/l2/Add"),
             helper.make_node("Mul", ["r2", "r2"], ["s2"], name="/l3/Mul"),
             helper.make_node("MatMul", ["s2", "W3"], ["y"], name="/l3/MatMul")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 16])], initializer=w)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _cli(*argv) -> int:
    from rkspeech.cli import main

    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    root = tmp_path_factory.mktemp("accuracy")
    model = tiny_graph(root / "tiny.onnx")
    rc = _cli("accuracy", model, "--pieces", 3, "--report", root / "map.json", "--plot", root / "map.png")
    assert rc == 0
    return json.loads((root / "map.json").read_text()), root


@pytest.mark.rknn
def test_report_has_per_block_and_per_layer_entries(mapped):
    rep, root = mapped
    assert rep["pieces"] == 3 and len(rep["blocks"]) == 3
    for b in rep["blocks"]:
        for key in ("sim_local", "sim_cumulative", "fp16_model_local", "fp16_model_cumulative"):
            assert b[key]["snr_db"] is not None and b[key]["snr_db"] > 40, (b["index"], key)
        assert b["max_activation"]["max_abs"] > 0 and not b["overflow"]
    assert [b["label"] for b in rep["blocks"]] == ["l1", "l2", "l3"]
    # every layer of the model, in node order, each in its block
    assert [e["node"] for e in rep["layers"]] == ["/l1/MatMul", "/l1/Tanh", "/l2/MatMul", "/l2/Add",
                                                  "/l3/Mul", "/l3/MatMul"]
    assert [e["block"] for e in rep["layers"]] == [0, 0, 1, 1, 2, 2]
    # the first block sees exact inputs either way: local == cumulative
    assert rep["blocks"][0]["sim_local"]["snr_db"] == rep["blocks"][0]["sim_cumulative"]["snr_db"]
    assert (root / "map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["summary"]["worst_blocks"] and not rep["summary"]["overflow"]


@pytest.mark.rknn
def test_last_block_agrees_with_whole_graph_simulator(mapped):
    rep, _ = mapped
    y = rep["graph_outputs"]["y"]
    # the fp32 pieces chain back to the whole graph exactly
    assert y["pieces_fp32_vs_whole_fp32"].get("identical") or y["pieces_fp32_vs_whole_fp32"]["snr_db"] > 120
    whole, pieces = y["sim_whole"]["snr_db"], y["sim_pieces"]["snr_db"]
    assert whole > 50
    assert abs(pieces - whole) < TOL_DB
    assert rep["blocks"][-1]["per_output"]["y"]["sim_cumulative"]["snr_db"] == pieces
    # fp16 storage alone reproduces the simulator's figure on this graph
    assert abs(y["fp16_model"]["snr_db"] - whole) < TOL_DB


def test_overflowing_layer_is_caught(tmp_path):
    """W2 x 300: the square in l3 reaches ~1e6, past fp16's 65504."""
    model = tiny_graph(tmp_path / "hot.onnx", scale=300.0)
    assert _cli("accuracy", model, "--pieces", 3, "--skip-sim", "--report", tmp_path / "hot.json") == 0
    rep = json.loads((tmp_path / "hot.json").read_text())
    over = rep["summary"]["overflow"]
    assert "s2" in over and rep["blocks"][2]["overflow"]
    assert not rep["blocks"][0]["overflow"]
    assert rep["blocks"][2]["max_activation"]["headroom_db"] < 0
    # the fp16 storage model turns the overflow into inf
    assert rep["graph_outputs"]["y"]["fp16_model"].get("nonfinite")


@pytest.mark.rknn
def test_overflow_fails_min_snr_on_the_simulator(tmp_path, capsys):
    """The same graph on the simulator: every output value is inf/NaN (measured: 2048 of 2048),
    and --min-snr turns that into a one-line failure."""
    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    model = tiny_graph(tmp_path / "hot.onnx", scale=300.0)
    assert _cli("accuracy", model, "--pieces", 1, "--min-snr", 40) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "y: simulator output is inf/NaN values against fp32, below 40 dB" in err


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    model = tiny_graph(tmp_path / "tiny.onnx")
    np.savez(tmp_path / "wrong_name.npz", mel=np.zeros((1, 128, 32), np.float32))
    np.savez(tmp_path / "wrong_shape.npz", x=np.zeros((1, 64, 32), np.float32))
    (tmp_path / "text.onnx").write_text("this is not a graph\n" * 20)
    cases = [
        ((tmp_path / "missing.onnx",), "no such file"),
        ((tmp_path / "text.onnx",), "ONNX"),
        ((model, "--inputs", tmp_path / "wrong_name.npz"), "do not match the graph inputs"),
        ((model, "--inputs", tmp_path / "wrong_shape.npz"), "has shape [1, 64, 32], the graph wants [1, 128, 32]"),
        ((model, "--inputs", tmp_path / "none.npz"), "no such file"),
        ((model, "--pieces", 0), "--pieces must be >= 1"),
    ]
    for args, message in cases:
        assert _cli("accuracy", *args, "--skip-sim") == 2, args
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_fp16_storage_model_rounds_after_each_op(tmp_path):
    """The fp16 storage model equals a numpy emulation (weights, input and every activation
    rounded to fp16, math in fp32) and not fp32: the rounding is really there."""
    import onnx

    from rkspeech.accuracy.fp16_model import OrtGraph, float_outputs, fp16_storage
    from rkspeech.core.compare import snr_db

    path = tiny_graph(tmp_path / "tiny.onnx")
    model = onnx.load(str(path))
    inter = float_outputs(model)
    assert list(inter) == ["h1", "a1", "h2", "r2", "s2", "y"] and inter["h1"] == 128 * 64
    x = np.random.default_rng(1).standard_normal((1, 128, 32)).astype(np.float32)
    got = OrtGraph(fp16_storage(model, list(inter)), fp16_inputs=True).run({"x": x})["y"]
    ref = OrtGraph(model).run({"x": x})["y"]

    def r(a):
        return a.astype(np.float16).astype(np.float32)

    w = {t.name: r(onnx.numpy_helper.to_array(t)) for t in model.graph.initializer}
    a1 = r(np.tanh(r(r(x) @ w["W1"])))
    r2 = r(r(a1 @ w["W2"]) + a1)
    want = r(r(r2 * r2) @ w["W3"])
    assert snr_db(want, got) > 90  # summation order aside, the same numbers
    assert 50 < snr_db(ref, got) < 80  # and fp16's error against fp32


def test_cuts_fall_between_the_layers_without_the_simulator(tmp_path):
    model = tiny_graph(tmp_path / "tiny.onnx")
    assert _cli("accuracy", model, "--pieces", 3, "--skip-sim", "--report", tmp_path / "m.json") == 0
    rep = json.loads((tmp_path / "m.json").read_text())
    assert [b["label"] for b in rep["blocks"]] == ["l1", "l2", "l3"]
    assert [b["layers"] for b in rep["blocks"]] == [[0, 2], [2, 4], [4, 6]]
    assert "sim_local" not in rep["blocks"][0] and rep["blocks"][0]["fp16_model_local"]["snr_db"] > 50


@pytest.fixture(scope="module")
def step_b4(reduced_model, tmp_path_factory):
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.stepgraph.step_npu import make_step

    return export_step_onnx(make_step(reduced_model, 4, "npu"), tmp_path_factory.mktemp("acc_step") / "step.onnx")


def test_vocoder_step_stepwise_feed_and_fp16_model(step_b4, tmp_path):
    """--stepwise 2: the second step's feed (cache threaded) of the reduced npu step at B=4; the
    fp16 storage model's audio is measured at 49.5 dB against fp32 (2026-12-01), in the band of
    the simulator's stepwise 47-49 dB on reduced checkpoints (docs/npu-formulation.md)."""
    from rkspeech.accuracy.inputs import check_model
    from rkspeech.accuracy.step_feed import stepwise_feed

    ins, _ = check_model(step_b4)
    feed = stepwise_feed(step_b4, 2, ins)
    assert float(feed["cache_valid"][0]) == 4.0 and np.abs(feed["cache_in"]).max() > 0.1
    assert _cli("accuracy", step_b4, "--stepwise", 2, "--pieces", 1, "--skip-sim", "--report", tmp_path / "s.json") == 0
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["inputs"].startswith("step 2 of a stepwise")
    assert 40 < rep["graph_outputs"]["audio_values"]["fp16_model"]["snr_db"] < 60
    assert len(rep["blocks"]) == 1 and len(rep["layers"]) > 500 and not rep["summary"]["overflow"]


def test_stepwise_needs_a_step_graph(tmp_path, capsys):
    model = tiny_graph(tmp_path / "tiny.onnx")
    assert _cli("accuracy", model, "--stepwise", 2, "--skip-sim") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress line
    assert err.startswith("rkspeech accuracy: error: --stepwise needs a vocoder step graph"), err


#: a build's fp16 headroom record as ``build qwen3-tts`` writes it (``pipelines.fp16_headroom``:
#: the published massive root's code predictor, docs/fp16-headroom.md)
HEADROOM = {"texts": 5, "frames": 115, "margin": 4, "fp16_max": 65504.0, "graphs": {"code_predictor": {
    "placement": "npu",
    "top": [{"tensor": "model.layers.1.mlp.down_proj:input", "peak": 156881.344, "ratio": 2.395},
            {"tensor": "model.layers.1.mlp.up_proj:output", "peak": 73836.156, "ratio": 1.1272},
            {"tensor": "model.layers.4.mlp.down_proj:input", "peak": 15.506, "ratio": 0.0002}],
    "rescale": [{"layer": 1, "channels": [650, 1257], "shift": 3}, {"layer": 1, "channels": [115], "shift": 4}],
    "top_after": [{"tensor": "model.layers.1.mlp.down_proj:input", "peak": 16039.512, "ratio": 0.2449}],
    "over": []}}}


def _build_folder(root, headroom=HEADROOM):
    """A build folder holding the tiny graph as its NPU code predictor, as ``build qwen3-tts`` lays it out."""
    (root / "code_predictor").mkdir(parents=True)
    model = tiny_graph(root / "code_predictor" / "code_predictor_step.onnx")
    (root / "plan.json").write_text(json.dumps({"format": "rkspeech-plan/2", "code_predictor": {
        "placement": "npu", "artifacts": {"step": {"onnx": "code_predictor/code_predictor_step.onnx"}}}}))
    (root / "build-report.json").write_text(json.dumps({"fp16_headroom": headroom}))
    return model


def test_the_map_shows_the_builds_peaks_over_held_out_inputs(tmp_path, capsys):
    """Issue 39: the map of an NPU code predictor graph shows the fp16 peaks its build measured over
    the gate's held-out texts (one input can miss a peak), found from the graph's folder."""
    model = _build_folder(tmp_path / "out")
    assert _cli("accuracy", model, "--pieces", 1, "--skip-sim", "--report", tmp_path / "m.json") == 0
    out = " ".join(capsys.readouterr().out.split())  # the table's title wraps
    assert "fp16 headroom of the code predictor over the build's held-out inputs (5 texts x 115 frames" in out
    assert "model.layers.1.mlp.down_proj:input" in out and "2.4" in out and "0.245" in out
    assert "layer 1 channels [650, 1257] / 2^3" in out and "above 65504 after it: nothing" in out
    s = json.loads((tmp_path / "m.json").read_text())["summary"]["held_out_headroom"]
    assert s["graph"] == "code_predictor" and s["largest"]["ratio"] == 2.395
    assert s["largest_after_rescale"]["ratio"] == 0.2449 and s["over"] == []
    # a build without the stage says so; a graph outside any build has no such section
    model = _build_folder(tmp_path / "skipped", headroom={})
    assert _cli("accuracy", model, "--pieces", 1, "--skip-sim") == 0
    assert "not measured: the build has no fp16 headroom record" in capsys.readouterr().out
    alone = tiny_graph(tmp_path / "alone.onnx")
    assert _cli("accuracy", alone, "--pieces", 1, "--skip-sim", "--report", tmp_path / "a.json") == 0
    assert "held-out" not in capsys.readouterr().out
    assert json.loads((tmp_path / "a.json").read_text())["summary"]["held_out_headroom"] is None
    # a plan named that does not list the graph: one line, before any map is made
    assert _cli("accuracy", alone, "--skip-sim", "--plan", tmp_path / "out" / "plan.json") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lists no talker or code predictor graph" in err[0], err
