"""load_plan: every inconsistency becomes one clear RkspeechError."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.read import read_contract
from rkspeech.plan.plan import load_plan, write_plan

from streaming_fixtures import step_graphs, write_ort_plan


def fake_rknn(path, target: str, custom: str | None) -> str:
    """A minimal .rknn container (format 6) the reader accepts: header, a FlatBuffer whose root
    table has only field 11 (the custom string), and the metadata JSON with the chip."""
    vt_fields = 12  # fields 0..11
    vtable = struct.pack("<HH", 4 + 2 * vt_fields, 8) + b"".join(
        struct.pack("<H", 4 if i == 11 else 0) for i in range(vt_fields))
    table_at = 8 + len(vtable)
    s = (custom or "").encode()
    table = struct.pack("<i", table_at - 8) + struct.pack("<I", 4)  # soffset, field 11 -> +4
    blob = struct.pack("<I", table_at) + b"RKNN" + vtable + table + struct.pack("<I", len(s)) + s + b"\0"
    meta = json.dumps({"target_platform": [target], "version": "2.5.0"}).encode()
    data = b"RKNN" + b"\0" * 4 + struct.pack("<QQ", 6, len(blob)) + b"\0" * 40 + blob
    data += struct.pack("<Q", len(meta)) + meta
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, reduced_model):
    return step_graphs(tmp_path_factory, reduced_model)


@pytest.fixture(scope="module")
def other_first(tmp_path_factory):
    """A B=4 first graph of a reduced config with ONE transformer layer: a different cache."""
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.models.qwen3_tts.synthetic_vocoder import CONFIGS, make_checkpoint_state
    from rkspeech.stepgraph.step import VocoderStep

    cfg = dataclasses.replace(CONFIGS["reduced"], num_hidden_layers=1)
    out = tmp_path_factory.mktemp("other") / "first_1layer_B4.onnx"
    return export_step_onnx(VocoderStep(make_checkpoint_state(cfg, 1), 4), out)


@pytest.fixture
def folder(tmp_path, graphs):
    for role, p in graphs.items():
        shutil.copy(p, tmp_path / p.name)
    return tmp_path, {r: tmp_path / p.name for r, p in graphs.items()}


def test_valid_plan_roundtrip(folder):
    d, paths = folder
    plan = load_plan(write_ort_plan(d, paths), backend="ort")
    assert plan.roles() == ["first", "main"]
    assert plan.contracts["first"].codes_length == 4 and plan.contract.codes_length == 16
    assert plan.onnx["main"] == d / paths["main"].name
    raw = json.loads((d / "plan.json").read_text())
    assert raw["format"] == "rkspeech-plan/2" and "speech_decoder" not in raw
    assert raw["vocoder"]["artifacts"] == {"first": {"onnx": "step_B4.onnx"}, "main": {"onnx": "step_B16.onnx"}}  # relative
    # the folder can move: paths are relative to the plan
    moved = d.parent / (d.name + "_moved")
    shutil.copytree(d, moved)
    assert load_plan(moved / "plan.json", backend="ort").onnx["main"] == moved / "step_B16.onnx"


def test_plan_file_errors(tmp_path):
    with pytest.raises(RkspeechError, match="does not exist"):
        load_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text("{not json")
    with pytest.raises(RkspeechError, match="not valid JSON"):
        load_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text("[]")
    with pytest.raises(RkspeechError, match="not a JSON object"):
        load_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text(json.dumps({"format": "rkspeech-plan/2"}))
    with pytest.raises(RkspeechError, match="no vocoder record"):
        load_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text(json.dumps({"format": "rkspeech-plan/9"}))
    with pytest.raises(RkspeechError, match="format 'rkspeech-plan/9' is not one this version reads"):
        load_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text(json.dumps({"speech_decoder": {"impl": "tflite"}}))
    with pytest.raises(RkspeechError, match="impl is 'tflite'"):
        load_plan(tmp_path / "plan.json")


def test_missing_artifact(folder):
    d, paths = folder
    plan = write_ort_plan(d, paths)
    paths["first"].unlink()
    with pytest.raises(RkspeechError, match=r"first artifact .*step_B4.onnx is missing"):
        load_plan(plan, backend="ort")


def test_ort_backend_needs_onnx(folder):
    d, paths = folder
    contracts = {r: read_contract(p) for r, p in paths.items()}
    r = fake_rknn(d / "main.rknn", "rk3588", contracts["main"].to_json())
    plan = write_plan(d / "plan.json", placement="npu", target="rk3588", contracts=contracts, rknn={"main": r})
    for backend in ("ort", "sim"):
        with pytest.raises(RkspeechError, match=f"backend {backend} needs ONNX"):
            load_plan(plan, backend=backend)


def test_first_and_main_caches_differ(folder, other_first):
    d, paths = folder
    contracts = {"first": read_contract(other_first), "main": read_contract(paths["main"])}
    assert contracts["first"].cache_numel != contracts["main"].cache_numel
    plan = write_plan(d / "plan.json", placement="cpu-fp32", target=None, contracts=contracts,
                      onnx={"first": other_first, "main": paths["main"]})
    with pytest.raises(RkspeechError, match="first and main artifacts have different caches.*rebuild"):
        load_plan(plan, backend="ort")


def test_plan_contract_disagrees_with_artifact(folder):
    d, paths = folder
    plan = write_ort_plan(d, paths)
    raw = json.loads(plan.read_text())
    raw["vocoder"]["contract"]["B"] = 32  # the plan says B=32, the main graph is B=16
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match="contract in the plan disagrees with the main artifact.*B 32 vs 16\\)"):
        load_plan(plan, backend="ort")
    raw["vocoder"]["contract"]["B"] = 16
    raw["vocoder"]["contract"]["sliding_window"] = 64
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match="disagrees"):
        load_plan(plan, backend="ort")
    # an ONNX that is not an rkspeech step graph
    raw["vocoder"]["contract"]["sliding_window"] = 72
    plan.write_text(json.dumps(raw))
    paths["first"].write_bytes(b"\x08\x07")  # a protobuf with only ir_version, no metadata
    with pytest.raises(RkspeechError, match=r"step_B4\.onnx has 2 bytes, the plan records"):
        load_plan(plan, backend="ort")  # the integrity record sees it first
    raw.pop("integrity")  # a plan without the record (written before 2026-12-01): the content check
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match="no rkspeech.contract metadata"):
        load_plan(plan, backend="ort")


def test_rknn_built_for_another_chip(folder):
    d, paths = folder
    contracts = {r: read_contract(p) for r, p in paths.items()}
    rk = {r: fake_rknn(d / f"{r}.rknn", "rk3576", c.to_json()) for r, c in contracts.items()}
    plan = write_plan(d / "plan.json", placement="npu", target="rk3576", contracts=contracts, rknn=rk)
    ok = load_plan(plan, backend="rknnlite", expect_target="rk3576")
    assert ok.contracts["first"].codes_length == 4 and ok.target == "rk3576"
    with pytest.raises(RkspeechError, match="built for rk3576, this machine is rk3588"):
        load_plan(plan, backend="rknnlite", expect_target="rk3588")
    # the plan says rk3588 but one artifact was built for rk3576
    rk["first"] = fake_rknn(d / "first.rknn", "rk3576", contracts["first"].to_json())
    rk["main"] = fake_rknn(d / "main.rknn", "rk3588", contracts["main"].to_json())
    plan = write_plan(d / "plan.json", placement="npu", target="rk3588", contracts=contracts, rknn=rk)
    with pytest.raises(RkspeechError, match=r"first\.rknn: built for rk3576, not rk3588.*--target rk3588"):
        load_plan(plan, backend="rknnlite", expect_target="rk3588")


def test_rknn_contract_problems(folder, other_first):
    d, paths = folder
    contracts = {r: read_contract(p) for r, p in paths.items()}
    rk = {"main": fake_rknn(d / "main.rknn", "rk3588", None)}
    plan = write_plan(d / "plan.json", placement="npu", target="rk3588", contracts=contracts, rknn=rk)
    with pytest.raises(RkspeechError, match="carries no rkspeech contract"):
        load_plan(plan, backend="rknnlite")
    rk = {"main": fake_rknn(d / "main.rknn", "rk3588", contracts["main"].to_json()),
          "first": fake_rknn(d / "first.rknn", "rk3588", read_contract(other_first).to_json())}
    plan = write_plan(d / "plan.json", placement="npu", target="rk3588", contracts=contracts, rknn=rk)
    with pytest.raises(RkspeechError, match="different caches"):
        load_plan(plan, backend="rknnlite")
    (d / "main.rknn").write_bytes((d / "main.rknn").read_bytes()[:-5])  # truncated
    with pytest.raises(RkspeechError, match=r"main\.rknn has \d+ bytes, the plan records"):
        load_plan(plan, backend="rknnlite")  # the integrity record sees it first
    raw = json.loads(plan.read_text())
    raw.pop("integrity")  # without the record, the container check
    plan.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match="truncated|corrupt"):
        load_plan(plan, backend="rknnlite")
