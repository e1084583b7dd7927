"""Plan stage sections (talker, code predictor): written relative, read back, every fault one line."""

from __future__ import annotations

import json
import shutil

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.plan import load_plan, write_plan
from rkspeech.plan.sections import stage_section

from streaming_fixtures import step_graphs, write_ort_plan

CP_FORMAT = "rkspeech-code-predictor/1"


def tagged_onnx(path, fmt: str | None):
    """A one-node ONNX whose rkspeech.contract metadata has format ``fmt`` (None: no metadata)."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if fmt is not None:
        m.metadata_props.add(key="rkspeech.contract", value=json.dumps({"format": fmt}))
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, reduced_model):
    return step_graphs(tmp_path_factory, reduced_model)


def make_plan(tmp_path, graphs, *, cp_fmt=CP_FORMAT, placement="npu", with_rknn=True):
    for p in graphs.values():
        shutil.copy(p, tmp_path / p.name)
    plan = write_ort_plan(tmp_path, {r: tmp_path / p.name for r, p in graphs.items()})
    raw = json.loads(plan.read_text())
    (tmp_path / "cp").mkdir()
    onnx_p = tagged_onnx(tmp_path / "cp" / "frame.onnx", cp_fmt)
    rknn_p = tmp_path / "cp" / "frame.rknn"
    rknn_p.write_bytes(b"not read unless rknnlite")
    sec = stage_section(placement=placement, target="rk3588", artifacts={"frame": {"onnx": onnx_p, "rknn": rknn_p if with_rknn else None}},
                        contract={"format": CP_FORMAT}, base=tmp_path)
    raw["code_predictor"] = sec
    plan.write_text(json.dumps(raw))
    return plan


def test_stage_section_round_trip_and_moves(tmp_path, graphs):
    (tmp_path / "a").mkdir()
    plan = make_plan(tmp_path / "a", graphs)
    raw = json.loads(plan.read_text())
    assert raw["code_predictor"]["artifacts"]["frame"] == {"onnx": "cp/frame.onnx", "rknn": "cp/frame.rknn"}
    moved = tmp_path / "moved"
    shutil.copytree(plan.parent, moved)
    p = load_plan(moved / "plan.json", backend="ort")
    st = p.stages["code_predictor"]
    assert st.paths("ort") == {"frame": moved / "cp" / "frame.onnx"}
    assert st.paths("rknnlite") == {"frame": moved / "cp" / "frame.rknn"}
    assert st.backend_for("sim") == "sim" and st.backend_for("ort") == "ort"
    assert "talker" not in p.stages  # absent: torch on the host


def test_vocoder_only_plan_has_no_stages(tmp_path, graphs):
    for p in graphs.values():
        shutil.copy(p, tmp_path / p.name)
    plan = write_ort_plan(tmp_path, {r: tmp_path / p.name for r, p in graphs.items()})
    assert load_plan(plan, backend="ort").stages == {}


@pytest.mark.parametrize("fault, message", [
    ("missing", "frame artifact .* is missing"),
    ("format", "carries contract format 'rkspeech-talker/1', the plan says 'rkspeech-code-predictor/1'"),
    ("placement", r"code_predictor.placement is 'gpu'"),
    ("roles", "artifacts must hold step or frame"),
    ("no_rknn", "placed on the NPU but frame has no rknn file"),
])
def test_stage_faults_are_one_line(tmp_path, graphs, fault, message):
    plan = make_plan(tmp_path, graphs, cp_fmt="rkspeech-talker/1" if fault == "format" else CP_FORMAT,
                     with_rknn=fault != "no_rknn")
    raw = json.loads(plan.read_text())
    if fault == "missing":
        (tmp_path / "cp" / "frame.onnx").unlink()
    elif fault == "placement":
        raw["code_predictor"]["placement"] = "gpu"
    elif fault == "roles":
        raw["code_predictor"]["artifacts"] = {"prefill": raw["code_predictor"]["artifacts"]["frame"]}
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match=message) as e:
        load_plan(plan, backend="ort")
    assert "\n" not in str(e.value)


def test_onnx_stage_runs_on_ort_whatever_the_vocoder_backend(tmp_path, graphs):
    plan = make_plan(tmp_path, graphs, placement="cpu-fp32", with_rknn=False)
    st = load_plan(plan, backend="ort").stages["code_predictor"]
    assert st.backend_for("rknnlite") == "ort"
    assert st.paths("rknnlite") == {"frame": tmp_path / "cp" / "frame.onnx"}


def test_write_plan_writes_stage_sections(tmp_path, graphs):
    from rkspeech.contracts.read import read_contract

    for p in graphs.values():
        shutil.copy(p, tmp_path / p.name)
    onnx = {r: tmp_path / p.name for r, p in graphs.items()}
    contracts = {r: read_contract(p) for r, p in onnx.items()}
    (tmp_path / "cp").mkdir()
    cp = tagged_onnx(tmp_path / "cp" / "f.onnx", CP_FORMAT)
    sec = stage_section(placement="cpu-fp32", target=None, artifacts={"frame": {"onnx": cp}}, contract={"format": CP_FORMAT},
                        base=tmp_path)
    plan = write_plan(tmp_path / "plan.json", placement="cpu-fp32", target=None, contracts=contracts, onnx=onnx,
                      stages={"code_predictor": sec})
    assert load_plan(plan, backend="ort").stages["code_predictor"].placement == "cpu-fp32"


def _quantized_plan(tmp_path, graphs, dtype="int16-hybrid", with_dataset=True):
    plan = make_plan(tmp_path, graphs)
    raw = json.loads(plan.read_text())
    ds = tmp_path / "cp" / "calib" / "dataset.txt"
    if with_dataset:
        ds.parent.mkdir()
        ds.write_text("h0.npy f0.npy\n")
    sec = stage_section(placement="npu", target="rk3588",
                        artifacts={"frame": {"onnx": tmp_path / "cp" / "frame.onnx", "rknn": tmp_path / "cp" / "frame.rknn"}},
                        contract={"format": CP_FORMAT}, base=tmp_path,
                        quantization={"dtype": dtype, "dataset": ds, "hybrid": {"margin": 1.5}})
    raw["code_predictor"] = sec
    plan.write_text(json.dumps(raw))
    return plan, ds


def test_quantized_stage_reaches_the_simulator(tmp_path, graphs, monkeypatch):
    """An int16-hybrid code predictor's plan section tells the simulator how to build it; the
    board (rknnlite) and onnxruntime get nothing (they load the .rknn / run the ONNX)."""
    plan, ds = _quantized_plan(tmp_path, graphs)
    assert json.loads(plan.read_text())["code_predictor"]["quantization"]["dataset"] == "cp/calib/dataset.txt"
    st = load_plan(plan, backend="sim").stages["code_predictor"]
    assert st.simulator_build() == {"dtype": "int16-hybrid", "dataset": str(ds), "hybrid": {"margin": 1.5}}

    seen = {}

    class FakeGraph:
        def __init__(self, path, backend="ort", **kw):
            seen[backend] = kw

    import rkspeech.runtime.tts.code_predictor_backend as cpb
    from rkspeech.runtime.tts.open_stages import open_stage_backends

    monkeypatch.setattr(cpb, "GraphCodePredictor", FakeGraph)
    open_stage_backends(load_plan(plan, backend="sim"), "sim")
    open_stage_backends(load_plan(plan, backend="ort"), "ort")
    assert seen["sim"]["dtype"] == "int16-hybrid" and seen["sim"]["dataset"] == str(ds)
    assert "dtype" not in seen["ort"]
    # an fp16 stage has no section and builds as before
    (tmp_path / "fp16").mkdir()
    fp16_plan = make_plan(tmp_path / "fp16", graphs)
    assert "quantization" not in json.loads(fp16_plan.read_text())["code_predictor"]
    assert load_plan(fp16_plan, backend="sim").stages["code_predictor"].simulator_build() == {}


@pytest.mark.parametrize("fault, message", [
    ("dtype", r"quantization must hold dtype \(one of \('fp16', 'int16-hybrid'\)\)"),
    ("dataset", "calibration list .*dataset.txt is missing"),
])
def test_quantized_stage_faults_are_one_line(tmp_path, graphs, fault, message):
    plan, _ = _quantized_plan(tmp_path, graphs, dtype="int4" if fault == "dtype" else "int16-hybrid",
                              with_dataset=fault != "dataset")
    with pytest.raises(RkspeechError, match=message) as e:
        load_plan(plan, backend="sim")
    assert "\n" not in str(e.value)


def test_stage_core_mask_reaches_the_runner(tmp_path, graphs, monkeypatch):
    """A stage's ``core_mask`` (plan) pins its rknn-lite runner; without one the caller's (serve's
    --tts-core-mask) applies; a mask that is not one of core.targets.CORE_MASKS is one line."""
    plan = make_plan(tmp_path, graphs)
    seen = []

    class FakeGraph:
        def __init__(self, path, backend="ort", **kw):
            seen.append(kw.get("core_mask"))

    import rkspeech.runtime.tts.code_predictor_backend as cpb
    from rkspeech.runtime.tts.open_stages import open_stage_backends

    monkeypatch.setattr(cpb, "GraphCodePredictor", FakeGraph)
    open_stage_backends(load_plan(plan, backend="ort"), "ort", core_mask="2")
    raw = json.loads(plan.read_text())
    raw["code_predictor"]["core_mask"] = "1"
    plan.write_text(json.dumps(raw))
    assert load_plan(plan, backend="ort").stages["code_predictor"].core_mask == "1"
    open_stage_backends(load_plan(plan, backend="ort"), "ort", core_mask="2")
    assert seen == ["2", "1"]
    raw["code_predictor"]["core_mask"] = "3"
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match=r"code_predictor.core_mask is '3', expected one of auto, 0, 1, 2"):
        load_plan(plan, backend="ort")


def test_a_stage_record_with_its_fp16_rescale_loads(tmp_path, graphs):
    """``build qwen3-tts``' fp16 headroom stage adds ``fp16_rescale`` to the NPU stage's record
    (``pipelines.fp16_headroom``): the plan stays format 2 and loads as before."""
    from rkspeech.plan.record import PLAN_FORMAT

    plan = make_plan(tmp_path, graphs)
    raw = json.loads(plan.read_text())
    raw["code_predictor"]["fp16_rescale"] = [{"layer": 1, "channels": [13, 64, 71], "shift": 4}]
    plan.write_text(json.dumps(raw))
    p = load_plan(plan, backend="ort")
    assert raw["format"] == PLAN_FORMAT and p.stages["code_predictor"].placement == "npu"


@pytest.mark.parametrize("fault, message", [
    (None, None),
    ("npu", "only a CPU-placed talker or step-form code predictor has a lanes graph"),
    ("frame", "only a CPU-placed talker or step-form code predictor has a lanes graph"),
    ("missing", "lanes graph .* is missing"),
    ("format", "lanes graph lanes.onnx does not carry the stage's contract"),
])
def test_a_cpu_stage_may_hold_a_lanes_graph(tmp_path, graphs, fault, message):
    """``lanes`` (``pipelines.lane_graphs``): read into ``StagePlan.lanes``; only beside a CPU-placed
    talker or step-form code predictor, one ONNX file with the stage's contract."""
    talker_fmt = "rkspeech-talker/1"
    plan = make_plan(tmp_path, graphs)
    raw = json.loads(plan.read_text())
    (tmp_path / "t").mkdir()
    arts = {r: {"onnx": tagged_onnx(tmp_path / "t" / f"{r}.onnx", talker_fmt)} for r in ("prefill", "decode")}
    if fault == "frame":  # the code predictor's frame form holds no lanes
        raw["code_predictor"]["placement"] = "cpu-fp32"
        raw["code_predictor"]["artifacts"]["lanes"] = {"onnx": "cp/frame.onnx"}
    else:
        lanes = tagged_onnx(tmp_path / "t" / "lanes.onnx", CP_FORMAT if fault == "format" else talker_fmt)
        sec = stage_section(placement="npu" if fault == "npu" else "cpu-fp32", target=None, artifacts=arts,
                            contract={"format": talker_fmt}, base=tmp_path, lanes=lanes)
        if fault == "npu":
            for r in ("prefill", "decode"):
                sec["artifacts"][r]["rknn"] = sec["artifacts"][r]["onnx"]
        raw["talker"] = sec
        if fault == "missing":
            lanes.unlink()
    plan.write_text(json.dumps(raw))
    if fault is None:
        talker = load_plan(plan, backend="ort").stages["talker"]
        assert talker.lanes == tmp_path / "t" / "lanes.onnx" and set(talker.paths("ort")) == {"prefill", "decode"}
        return
    with pytest.raises(RkspeechError, match=message) as e:
        load_plan(plan, backend="ort")
    assert "\n" not in str(e.value)
