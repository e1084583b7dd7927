"""Plans of format 1 (``speech_decoder`` + per-stage sections, ``impl`` beside ``placement``) load
as format 2's stage records (``plan.record.upgrade``), so every plan built before keeps running."""

import json
import shutil

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.record import PLAN_FORMAT, upgrade

from rkfixtures import format_1

#: a format-1 plan as ``build qwen3-tts`` wrote it (every kind of section, abridged contracts)
FORMAT_1 = {
    "format": "rkspeech-plan/1",
    "speech_decoder": {"impl": "rknn", "target": "rk3588",
                       "artifacts": {"main": "vocoder/main.rknn", "first": "vocoder/first.rknn"},
                       "onnx": {"main": "vocoder/main.onnx", "first": "vocoder/first.onnx"},
                       "contract": {"B": 16}, "codes_length": {"main": 16, "first": 2},
                       "host_onnx": {"main": "vocoder/host/main.onnx", "first": "vocoder/host/first.onnx"},
                       "host_contract": {"B": 16},
                       "backends": {"ort": "host_onnx", "sim": "onnx", "rknnlite": "artifacts"}},
    "talker": {"impl": "rknn", "target": "rk3588", "placement": "npu", "contract": {"format": "rkspeech-talker/1"},
               "artifacts": {"prefill": {"onnx": "t/p.onnx", "rknn": "t/p.rknn"},
                             "decode": {"onnx": "t/d.onnx", "rknn": "t/d.rknn"}}},
    "code_predictor": {"impl": "onnx", "target": None, "placement": "cpu-int8", "threads": 2,
                       "contract": {"format": "rkspeech-talker/1"},
                       "artifacts": {"step": {"onnx": "cp/step.int8.onnx"}},
                       "heads": {"1": "cp/heads/head1.int8.onnx", "2": "cp/heads/head2.int8.onnx"},
                       "start": "cp/start.int8.onnx",
                       "quantization": {"variant": "int8", "graphs": {"step": {"source": "cp/step.onnx"}}}},
    "whisper_encoder": {"impl": "onnx", "target": "rk3588", "custom_string": "x",
                        "artifacts": {"encoder": {"onnx": "encoder.onnx"}}},
    "build": {"dtype": "fp16"},
    "integrity": {"files": {}},
}

FORMAT_2 = {
    "format": PLAN_FORMAT,
    "vocoder": {"placement": "npu", "target": "rk3588", "contract": {"B": 16}, "codes_length": {"main": 16, "first": 2},
                "host_contract": {"B": 16}, "backends": {"ort": "host_onnx", "sim": "onnx", "rknnlite": "rknn"},
                "artifacts": {"main": {"rknn": "vocoder/main.rknn", "onnx": "vocoder/main.onnx",
                                       "host_onnx": "vocoder/host/main.onnx"},
                              "first": {"rknn": "vocoder/first.rknn", "onnx": "vocoder/first.onnx",
                                        "host_onnx": "vocoder/host/first.onnx"}}},
    "talker": {"placement": "npu", "target": "rk3588", "contract": {"format": "rkspeech-talker/1"},
               "artifacts": {"prefill": {"onnx": "t/p.onnx", "rknn": "t/p.rknn"},
                             "decode": {"onnx": "t/d.onnx", "rknn": "t/d.rknn"}}},
    "code_predictor": {"placement": "cpu-int8", "target": None, "threads": 2, "contract": {"format": "rkspeech-talker/1"},
                       "artifacts": {"step": {"onnx": "cp/step.int8.onnx"}, "head1": {"onnx": "cp/heads/head1.int8.onnx"},
                                     "head2": {"onnx": "cp/heads/head2.int8.onnx"},
                                     "start": {"onnx": "cp/start.int8.onnx"}},
                       "quantization": {"variant": "int8", "graphs": {"step": {"source": "cp/step.onnx"}}}},
    "whisper_encoder": {"placement": "cpu-fp32", "target": "rk3588", "custom_string": "x",
                        "artifacts": {"encoder": {"onnx": "encoder.onnx"}}},
    "build": {"dtype": "fp16"},
    "integrity": {"files": {}},
}


def test_format_1_becomes_one_record_per_stage():
    got = upgrade(json.loads(json.dumps(FORMAT_1)), "plan P")
    assert got == FORMAT_2
    assert upgrade(got, "plan P") is got  # format 2 as it is
    for rec in (v for k, v in got.items() if k in ("vocoder", "talker", "code_predictor", "whisper_encoder")):
        assert "impl" not in rec and rec["placement"] in ("npu", "cpu-fp32", "cpu-int8")  # one word


def test_a_plan_without_format_is_format_1():
    old = {k: v for k, v in FORMAT_1.items() if k != "format"}
    assert upgrade(old, "plan P") == FORMAT_2


@pytest.mark.parametrize("change, message", [
    (lambda r: r["talker"].update(impl="gpu"), r"plan P: talker.impl is 'gpu'"),
    (lambda r: r["talker"].update(placement="cpu-int4"), "talker is placed cpu-int4 but its impl is 'rknn'"),
    (lambda r: r["code_predictor"].update(heads=["a"]), "code_predictor.heads must map codebooks"),
    (lambda r: r["speech_decoder"].update(onnx=["a"]), r"speech_decoder.onnx must be an object"),
    (lambda r: r.update(format="rkspeech-plan/7"), "format 'rkspeech-plan/7' is not one this version reads"),
])
def test_a_damaged_format_1_plan_is_one_line(change, message):
    raw = json.loads(json.dumps(FORMAT_1))
    change(raw)
    with pytest.raises(RkspeechError, match=message) as e:
        upgrade(raw, "plan P")
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, reduced_model):
    from streaming_fixtures import step_graphs

    return step_graphs(tmp_path_factory, reduced_model)


def test_format_1_plan_loads_as_the_same_plan(tmp_path, graphs):
    """The same files behind a format-1 and a format-2 plan.json: the same Plan, integrity checked."""
    from rkspeech.plan.integrity import record
    from rkspeech.plan.plan import load_plan
    from rkspeech.plan.sections import stage_section
    from streaming_fixtures import write_ort_plan
    from test_plan_stages import CP_FORMAT, tagged_onnx

    d = tmp_path / "plan"
    d.mkdir()
    for p in graphs.values():
        shutil.copy(p, d / p.name)
    new = write_ort_plan(d, {r: d / p.name for r, p in graphs.items()})
    raw = json.loads(new.read_text())
    (d / "cp").mkdir()
    cp = tagged_onnx(d / "cp" / "frame.onnx", CP_FORMAT)
    raw["code_predictor"] = stage_section(placement="cpu-fp32", target=None, artifacts={"frame": {"onnx": cp}},
                                          contract={"format": CP_FORMAT}, base=d)
    raw["integrity"] = record(raw, d)
    new.write_text(json.dumps(raw))
    old = d / "old.json"
    old.write_text(json.dumps(format_1(raw)))
    assert "speech_decoder" in json.loads(old.read_text())
    a, b = load_plan(new, backend="ort"), load_plan(old, backend="ort")
    assert (a.placement, a.onnx, a.host_onnx, a.rknn, a.backends, a.contract) == \
           (b.placement, b.onnx, b.host_onnx, b.rknn, b.backends, b.contract)
    assert a.stages["code_predictor"] == b.stages["code_predictor"]
    (d / "cp" / "frame.onnx").write_bytes(b"damaged")  # the old plan's integrity record is still checked
    with pytest.raises(RkspeechError, match=r"frame.onnx has 7 bytes, the plan records"):
        load_plan(old, backend="ort")
