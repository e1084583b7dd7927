"""The accuracy gate of Qwen3-ASR plans (``accuracy.asr_gate`` in ``build qwen3-asr``): it passes the
trained reduced root's default plan (NPU encoder on the simulator, int4 decoder) with its figures
recorded, refuses a damaged decoder in one line (``--gate warn`` writes it, the failure recorded),
and does not judge a random root it cannot vouch for; the trained root (``synth-checkpoint
qwen3-asr --trained``) is confident and loads in the official package."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

pytestmark = pytest.mark.rknn

#: the damage the refusal test does: layer 1's down_proj scales x3 in the int4 prefill and decode
#: graphs (on 8 clips: 98.9 % agreement, 6.9 dB; docs/qwen3-asr.md, Accuracy gate)
DAMAGED_NODE, DAMAGE = "/mlp/down_proj_1/MatMul_Q4", 3.0


@pytest.fixture(scope="module")
def trained_root(request, tmp_path_factory):
    """The trained reduced root (~25 s to train; cached in pytest's cache folder)."""
    from rkspeech.models.qwen3_asr.trained import write_trained_asr_checkpoint

    cache = request.config.cache.mkdir("rkspeech") / "trained-asr" if getattr(request.config, "cache", None) else None
    root, _ = write_trained_asr_checkpoint(tmp_path_factory.mktemp("asr_trained") / "ck", cache_dir=cache)
    return root


@pytest.fixture(scope="module")
def default_plan(trained_root, tmp_path_factory):
    pytest.importorskip("rknn.api")
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    out = tmp_path_factory.mktemp("asr_gate_plan")
    return build_qwen3_asr(ASRBuildOptions(model_dir=str(trained_root), out_dir=str(out)))


def test_the_default_plan_passes_with_its_figures(default_plan):
    gate = default_plan["accuracy_gate"]
    assert gate["mode"] == "refuse" and gate["passed"] and gate["failures"] == [] and not gate["not_judged"]
    assert gate["stopped_reference"] == gate["texts"] == 20 and gate["reference_frames"] >= 300
    assert set(gate["stages"]) == {"decoder", "encoder", "plan"}
    assert gate["stages"]["encoder"]["placement"] == "npu" and gate["stages"]["decoder"]["placement"] == "cpu-int4"
    for name, s in gate["stages"].items():
        tf, free = s["teacher_forced"], s["free_running"]
        assert tf["decisions"] == gate["reference_frames"] and tf["agreement"] == 1.0, name
        assert tf["logit_snr_db"] is None or tf["logit_snr_db"] >= gate["thresholds"]["min_logit_snr_db"], name
        assert tf["margin"]["min"] > 0.5, name  # confident: no near-tie decides a transcript
        assert free["same_stop"] == free["identical_utterances"] == 20 and free["codes_equal"] == 1.0, name
    assert gate["stages"]["encoder"]["teacher_forced"]["logit_snr_db"] > 40  # fp16 on the simulator
    plan = json.loads(Path(default_plan["plan"]).read_text())
    assert plan["build"]["accuracy_gate"]["passed"] is True and plan["build"]["accuracy_gate"]["unit"] == "tokens"
    assert not list(Path(default_plan["plan"]).parent.glob(".asr-gate-*"))  # its scratch plans removed


def test_the_summary_prints_the_gate(default_plan):
    from rkspeech.cli.build_asr import gate_rows

    rows = dict(gate_rows(default_plan["accuracy_gate"]))
    assert rows["accuracy gate verdict"] == "passed"
    assert rows["decoder (cpu-int4): accuracy gate"] == "pass"
    assert "same stop 20/20 utterances, tokens equal 100.0 %" in rows["plan (npu + cpu-int4) vs fp32 (free running)"]
    assert "fp32 tokens of 20 utterances" in rows["accuracy gate"]


def test_the_trained_root_transcribes_in_the_official_package(trained_root, default_plan):
    """The official qwen-asr loads the trained root and hears what it was trained on; the plan's
    transcript (fp32 windows on onnxruntime, int4 decoder) is the same."""
    from asr_reference import official_asr

    from rkspeech.models.qwen3_asr.trained import gate_clips
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    official = official_asr(trained_root, max_new_tokens=32)
    with ASRTranscriber(default_plan["plan"], backend="ort") as asr:
        for clip in gate_clips(3):
            want = official.transcribe((clip.wave, 16000))[0]
            got = asr.transcribe(clip.wave, max_new_tokens=32)
            assert (want.language, want.text) == (got.language, got.text) == ("English", clip.text)


def _damage(path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    node, = [n for n in m.graph.node if n.name == DAMAGED_NODE]
    init, = [i for i in m.graph.initializer if i.name == node.input[2]]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(DAMAGE), init.name))
    onnx.save(m, str(path))


def test_a_damaged_decoder_is_refused_and_warn_writes_it(trained_root, tmp_path, monkeypatch):
    pytest.importorskip("rknn.api")
    from rkspeech.pipelines import cpu_stages
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    quantize = cpu_stages.quantize_stage

    def damaged(*args, **kw):
        q = quantize(*args, **kw)
        for role in ("prefill", "decode"):
            _damage(Path(q["artifacts"][role]))
        return q

    monkeypatch.setattr(cpu_stages, "quantize_stage", damaged)
    out = tmp_path / "plan"
    (out).mkdir()
    (out / "plan.json").write_text("{}")  # an earlier build's: removed, it no longer matches
    opts = ASRBuildOptions(model_dir=str(trained_root), out_dir=str(out), encoder="cpu-fp32")
    with pytest.raises(RkspeechError) as err:
        build_qwen3_asr(opts)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("accuracy gate: decoder ") and "--gate warn writes it anyway" in msg
    assert not (out / "plan.json").exists()
    refused = json.loads((out / "build-report.json").read_text())
    assert refused["plan"] is None and refused["accuracy_gate"]["failures"]
    assert refused["accuracy_gate"]["stages"]["decoder"]["teacher_forced"]["logit_snr_db"] < 12

    report = build_qwen3_asr(ASRBuildOptions(**{**opts.__dict__, "gate": "warn"}))
    gate = report["accuracy_gate"]
    assert gate["passed"] is False and gate["failures"][0].startswith("decoder ")
    assert report["warnings"][0].startswith("accuracy gate failed, plan written anyway (--gate warn): decoder ")
    kept = json.loads(Path(report["plan"]).read_text())["build"]["accuracy_gate"]
    assert kept["mode"] == "warn" and kept["passed"] is False and kept["failures"] == gate["failures"]


def test_a_random_root_is_not_judged(tmp_path):
    """The random reduced root never stops by itself: the gate says so instead of judging near-ties,
    and the plan is written with the warning."""
    pytest.importorskip("rknn.api")
    from rkspeech.models.qwen3_asr.synthetic_asr import write_asr_checkpoint
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    root = write_asr_checkpoint(tmp_path / "ck", "reduced", seed=0)
    report = build_qwen3_asr(ASRBuildOptions(model_dir=str(root), out_dir=str(tmp_path / "plan"), encoder="cpu-fp32"))
    gate = report["accuracy_gate"]
    assert gate["not_judged"] == ["decoder"] and gate["failures"] == [] and gate["stopped_reference"] == 0
    assert gate["passed"] is None  # not a pass: nothing was judged
    assert "fp32 stopped by itself on 0/20 utterances" in gate["stages"]["decoder"]["not_judged"]
    assert gate["reference_abandoned_after"] < 20  # given up as soon as nothing could be judged
    assert "accuracy gate: the decoder not judged" in report["warnings"][0]
    kept = json.loads(Path(report["plan"]).read_text())["build"]["accuracy_gate"]
    assert kept["passed"] is None and kept["not_judged"] == ["decoder"]
    from rkspeech.cli.build_asr import gate_rows

    assert dict(gate_rows(gate))["accuracy gate verdict"] == "not judged"
