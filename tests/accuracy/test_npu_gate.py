"""The accuracy gate judges NPU-placed stages on the simulator, and the CPU quantizers keep
outlier-carrying MatMuls in fp32 (issue 39, deliverable 3), on the trained reduced root with the
published 0.6B's massive activation in its code predictor (``trained_massive_ckpt``).

* NPU (rknn-toolkit2): ``--code-predictor npu --talker cpu-fp32`` with ``--skip-fp16-headroom``:
  the fp16 code predictor overflows (its logits hold NaN), the gate refuses it in one line naming
  the code predictor, the report holds its simulator figures and no plan is written; with the
  headroom stage's exact rescale the same build passes (>= 99 % agreement, the same stop frames).
* CPU: ``--code-predictor cpu-int8``: the headroom stage finds layer 1's ``down_proj`` input
  carrying an outlier channel, the quantizer keeps that MatMul in fp32 in the step graph and the
  start graph (the record names each node and the bytes it costs) and the gate passes.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rkfixtures import have_rknn

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trained_massive_ckpt(trained_tts_ckpt, tmp_path_factory):
    """The session's trained root, copied, with ``--massive-activations``' recipe applied (~2 s)."""
    from rkspeech.models.qwen3_tts.massive_activations import write_massive_activations

    root = tmp_path_factory.mktemp("trained_massive") / "root"
    shutil.copytree(trained_tts_ckpt[0], root)
    record = write_massive_activations(root)
    return root, record


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("npu_gate")


def _argv(root, vocoder_plan, home, out, *extra):
    return ["build", "qwen3-tts", "--model-dir", os.path.relpath(root, home), "--out-dir", out,
            "--vocoder-plan", os.path.relpath(vocoder_plan, home), "--talker", "cpu-fp32",
            "--talker-capacity", "96", "--talker-prefill", "16", "--cpu-threads", "1", *extra]


@pytest.mark.slow
@pytest.mark.rknn
@pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")
def test_npu_code_predictor_judged_on_the_simulator(trained_massive_ckpt, placeholder_vocoder_plan, home, capsys):
    from rkfixtures import run_relative
    from rkspeech.cli.build_tts import summary_rows
    from rkspeech.core.thresholds import GATE_MIN_AGREEMENT, GATE_MIN_SAME_STOP

    root, record = trained_massive_ckpt
    npu = ("--code-predictor", "npu", "--verify-frames", "4", "--verify-steps", "1")
    # without the rescale: fp16 overflows, the gate refuses the placement in one line
    capsys.readouterr()
    rc, err, _ = run_relative(home, _argv(root, placeholder_vocoder_plan, home, "raw", *npu, "--skip-fp16-headroom"),
                              capsys)
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("rkspeech build: error: accuracy gate: code_predictor "), lines
    assert not (home / "raw" / "plan.json").exists()
    raw = json.loads((home / "raw" / "build-report.json").read_text())["accuracy_gate"]
    s = raw["stages"]["code_predictor"]
    assert s["placement"] == "npu" and "sim" in s["backend"], s["backend"]
    assert s["teacher_forced"]["logit_snr_db"] == "NaN", s["teacher_forced"]["logit_snr_db"]
    assert any("logit SNR NaN" in f for f in s["failures"]), s["failures"]
    assert s["teacher_forced"]["agreement"] < GATE_MIN_AGREEMENT
    # NaN logits fail already: no free run repeats them (the report and the summary say so)
    assert s["free_running"] == {"not_measured": "its teacher-forced logits hold NaN or inf"}, s["free_running"]
    assert not any("stops at fp32's frame" in f for f in s["failures"]), s["failures"]
    raw_rows = dict(summary_rows(json.loads((home / "raw" / "build-report.json").read_text())))
    assert raw_rows["code_predictor (NPU, simulator) vs fp32 (free running)"].startswith("not measured: "), raw_rows

    # with the headroom stage's exact rescale: the same placement passes
    capsys.readouterr()
    rc, err, _ = run_relative(home, _argv(root, placeholder_vocoder_plan, home, "fixed", *npu), capsys)
    assert rc == 0, err[-3000:]
    report = json.loads((home / "fixed" / "build-report.json").read_text())
    gate = report["accuracy_gate"]
    s = gate["stages"]["code_predictor"]
    assert gate["passed"] is True and s["failures"] == [] and s["placement"] == "npu", gate["failures"]
    assert s["teacher_forced"]["agreement"] >= GATE_MIN_AGREEMENT
    assert s["free_running"]["same_stop"] >= GATE_MIN_SAME_STOP * s["free_running"]["utterances"]
    assert gate["reference_frames"] >= 300 and gate["stopped_reference"] == 20
    assert report["graphs"]["code_predictor"]["gate"] == s
    plan = json.loads((home / "fixed" / "plan.json").read_text())
    assert plan["code_predictor"]["fp16_rescale"][0]["layer"] == record["layer"]
    rows = dict(summary_rows(report))
    assert rows["code_predictor (NPU, simulator): accuracy gate"] == "pass"


def test_cpu_int8_keeps_the_outlier_matmul_in_fp32(trained_massive_ckpt, placeholder_vocoder_plan, home, capsys):
    from rkfixtures import run_relative
    from rkspeech.cli.build_tts import summary_rows

    root, record = trained_massive_ckpt
    capsys.readouterr()
    rc, err, _ = run_relative(home, _argv(root, placeholder_vocoder_plan, home, "int8", "--code-predictor",
                                          "cpu-int8", "--skip-sim"), capsys)
    assert rc == 0, err[-3000:]
    report = json.loads((home / "int8" / "build-report.json").read_text())
    layer = record["layer"]
    module = f"model.layers.{layer}.mlp.down_proj"
    row = report["fp16_headroom"]["graphs"]["code_predictor"]
    assert row["placement"] == "cpu" and [o["module"] for o in row["outliers"]] == [module], row["outliers"]
    q = report["graphs"]["code_predictor"]["cpu"]["quantization"]
    kept = q["kept_fp32"]
    # the step graph's and the start graph's (the same stack) MatMul of that module, each priced
    assert [k["graph"] for k in kept] == ["step", "start"] and {k["module"] for k in kept} == {module}, kept
    assert all("down_proj" in k["node"] for k in kept), kept
    K, N = kept[0]["K"], kept[0]["N"]
    assert kept[0]["bytes"] == 4 * K * N - (K * N + 5 * N)  # fp32 against int8 per channel (scale, zero point)
    assert q["kept_fp32_bytes"] == sum(k["bytes"] for k in kept)
    plan = json.loads((home / "int8" / "plan.json").read_text())
    assert plan["code_predictor"]["quantization"]["kept_fp32"] == kept
    gate = report["accuracy_gate"]
    assert gate["passed"] is True, gate["failures"]
    assert dict(summary_rows(report))["code_predictor: kept fp32"].startswith("step ")


def test_nan_logits_fail_and_unvouched_npu_stages_are_not_judged():
    """A NaN logit SNR (an fp16 overflow; ``json_number`` writes it "NaN") fails the SNR mark,
    where ``nan < mark`` alone is False; a stage the gate could not vouch for is listed, not
    failed, and the measurement's own failures then refuse nothing."""
    from rkspeech.accuracy.gate import GateThresholds, apply_thresholds, judge
    from rkspeech.pipelines.stage_gate import gate_section

    figures = {"teacher_forced": {"agreement": 1.0, "logit_snr_db": "NaN"},
               "free_running": {"same_stop": 20, "utterances": 20, "same_stop_share": 1.0}}
    assert judge("code_predictor", figures, GateThresholds()) == [
        "code_predictor logit SNR NaN (its logits hold NaN or inf: an fp16 overflow?)"]
    unvouched = {"texts": 20, "frames_per_text": 48, "reference_frames": 528, "stopped_reference": 0,
                 "stages": {"code_predictor": {"not_judged": "fp32 stopped by itself on 0/20 utterances"}}}
    section = gate_section(unvouched, "refuse")
    assert section["passed"] is True and section["failures"] == [] and section["not_judged"] == ["code_predictor"]
    assert section["warning"].startswith("accuracy gate: the NPU-placed code predictor not judged: fp32 stopped")
    # beside a judged stage the measurement's failures stand
    both = dict(unvouched, stages={**unvouched["stages"], "talker": figures})
    judged = apply_thresholds(both)
    assert judged["failures"][0].startswith("talker logit SNR NaN") and "fp32 stopped" in judged["failures"][-1]
