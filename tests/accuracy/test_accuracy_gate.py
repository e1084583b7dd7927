"""The accuracy gate of ``build qwen3-tts`` on the confident (trained) reduced checkpoint (issue 27,
deliver 2): the honest int8 CPU stages pass it, a damaged one is refused in one line.

The build reuses conftest's placeholder vocoder plan (no conversion) and the session's trained
root (cached: only the first session trains); ``--skip-sim`` drops the talker's torch-vs-onnxruntime
check (test_build_placement.py has it), not the gate, which runs onnxruntime only.  ``--talker cpu-int8 --code-predictor cpu-int8``:

* passes: the report's ``accuracy_gate`` covers >= 300 fp32 frames of 20 utterances (speakers and
  languages cycled) in the checkpoint's recorded streaming prompt form, every one stopped by
  itself; per stage >= 99 % teacher-forced agreement, the same stop frame on >= 95 % of
  utterances free running, logit SNR above the mark; the plan records the verdict and the prompt
  form; the summary table shows them;
* refused: a build whose talker's int8 weight scales are multiplied by 3 (the quantizer wrapped;
  the code predictor kept fp32, 6 frames per utterance to keep it short) exits 2 with one line
  naming the talker, writes the report (verdict and figures) and no plan; ``--gate warn`` then
  writes the plan and records the failures as a warning.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

CAPACITY, PREFILL = 96, 16
#: the damaged build: only the talker quantized, 6 frames per utterance (the refusal needs no more;
#: the 300-frame mark then fails too, listed after the talker's own failures)
DAMAGED = ("--cpu-check-frames", "6")


def _argv(root, vocoder_plan, home, out, *extra, code_predictor="cpu-int8"):
    return ["build", "qwen3-tts", "--model-dir", os.path.relpath(root, home), "--out-dir", out,
            "--vocoder-plan", os.path.relpath(vocoder_plan, home), "--talker", "cpu-int8", "--code-predictor",
            code_predictor, "--cpu-threads", "1", "--talker-capacity", str(CAPACITY), "--talker-prefill",
            str(PREFILL), "--skip-sim", *extra]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("gate_build")


#: what the honest build printed on stderr (its progress), for test_the_gate_says_where_it_is
PRINTED: dict[str, str] = {}


@pytest.fixture(scope="module")
def honest(trained_tts_ckpt, placeholder_vocoder_plan, home):
    import contextlib
    import io

    from rkfixtures import run_relative

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc, _, _ = run_relative(home, _argv(trained_tts_ckpt[0], placeholder_vocoder_plan, home, "out"))
    PRINTED["honest"] = err.getvalue()
    assert rc == 0, PRINTED["honest"][-2000:]
    return home / "out"


def test_the_gate_says_where_it_is(honest):
    """The gate ran ~15 min (published size) with no progress: now a line per stage and the
    progress of each part (fp32 reference, teacher forced, free running) for both stages."""
    printed = " ".join(PRINTED["honest"].split())
    assert "accuracy gate: stage 1/2: talker (20 utterances" in printed
    assert "accuracy gate: stage 2/2: code predictor (20 utterances" in printed
    for part in ("fp32 reference: 20/20", "talker, teacher forced: 20/20", "talker, free running: 20/20",
                 "code predictor, teacher forced: 20/20", "code predictor, free running: 20/20"):
        assert f"accuracy gate: {part}" in printed, part


def test_honest_int8_stages_pass_the_gate(honest):
    from rkspeech.core.thresholds import GATE_MIN_AGREEMENT, GATE_MIN_LOGIT_SNR_DB, GATE_MIN_SAME_STOP

    report = json.loads((honest / "build-report.json").read_text())
    gate = report["accuracy_gate"]
    assert gate["mode"] == "refuse" and gate["passed"] is True and gate["failures"] == [], gate["failures"]
    assert gate["prompt_form"] == "streaming" and gate["texts"] == 20 and gate["requests"] == 20
    assert gate["host_loop"] == "numpy"  # measured through the loop speak runs on this plan
    assert gate["reference_frames"] >= 300 and gate["stopped_reference"] == 20, gate
    for name in ("talker", "code_predictor"):
        s = gate["stages"][name]
        tf, free = s["teacher_forced"], s["free_running"]
        assert s["placement"] == "cpu-int8" and tf["agreement"] >= GATE_MIN_AGREEMENT, (name, tf)
        assert tf["logit_snr_db"] >= GATE_MIN_LOGIT_SNR_DB and tf["margin"]["median"] > 1.0, (name, tf)
        assert free["utterances"] == 20 and free["same_stop"] >= GATE_MIN_SAME_STOP * 20, (name, free)
        assert len(free["texts"]) == 20 and all("first_diverging_frame" in t for t in free["texts"])
        assert report["graphs"][name]["cpu"]["check"] == s  # the stage's row holds its figures
    # the code predictor was measured with its quantized heads (pipelines.cpu_heads), as speak runs it
    assert gate["stages"]["code_predictor"]["backend"].endswith("+ 15 head graphs"), gate["stages"]["code_predictor"]
    # the talker decided every stop, teacher forced as well
    assert gate["stages"]["talker"]["teacher_forced"]["same_stop_share"] >= GATE_MIN_SAME_STOP
    plan = json.loads((honest / "plan.json").read_text())
    assert plan["build"]["prompt_form"] == "streaming" and plan["build"]["accuracy_gate"]["passed"] is True
    assert "warnings" not in report


def test_summary_table_shows_the_gate(honest):
    from rkspeech.cli.build_tts import summary_rows

    rows = dict(summary_rows(json.loads((honest / "build-report.json").read_text())))
    assert rows["accuracy gate verdict"] == "passed"
    assert "streaming prompt" in rows["accuracy gate"] and "agreement >= 99 %" in rows["accuracy gate"]
    assert rows["talker: accuracy gate"] == "pass"
    assert rows["code_predictor vs fp32 (free running)"].startswith("same stop ")


def _scaled(path, factor: float):
    """Multiply every weight scale of a dynamic-int8 graph in place (its MatMulInteger outputs scale)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    n = 0
    for init in m.graph.initializer:
        if init.name.endswith("_scale") and init.data_type == onnx.TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
            n += 1
    assert n, path
    onnx.save(m, str(path))


def test_damaged_stage_is_refused_in_one_line(trained_tts_ckpt, placeholder_vocoder_plan, home, capsys,
                                              monkeypatch):
    import rkspeech.convert.cpu_quant as cpu_quant
    from rkfixtures import run_relative

    real = cpu_quant.quantize_step_graph

    def damaged(src, dst, options):
        record = real(src, dst, options)
        if "talker" in os.path.basename(str(src)):
            _scaled(dst, 3.0)
        return record

    monkeypatch.setattr(cpu_quant, "quantize_step_graph", damaged)
    out = home / "damaged"
    capsys.readouterr()
    rc, err, _ = run_relative(home, _argv(trained_tts_ckpt[0], placeholder_vocoder_plan, home, "damaged", *DAMAGED,
                                          code_predictor="cpu-fp32"),
                              capsys)
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("rkspeech build: error: accuracy gate: talker agrees with fp32 on"), lines
    assert "--gate warn" in lines[0]
    assert not (out / "plan.json").exists()
    report = json.loads((out / "build-report.json").read_text())
    gate = report["accuracy_gate"]
    assert report["plan"] is None and gate["passed"] is False
    assert set(gate["stages"]) == {"talker"} and len(gate["stages"]["talker"]["failures"]) >= 2, gate
    assert gate["stages"]["talker"]["teacher_forced"]["agreement"] < 0.5  # measured: 5 %

    # --gate warn: the plan is written, the failures recorded (the figures are not measured again)
    capsys.readouterr()
    rc, err, _ = run_relative(home, _argv(trained_tts_ckpt[0], placeholder_vocoder_plan, home, "damaged", *DAMAGED,
                                          "--gate", "warn", code_predictor="cpu-fp32"), capsys)
    assert rc == 0 and "skip: accuracy_gate" in " ".join(err.split()), err
    report = json.loads((out / "build-report.json").read_text())
    assert report["warnings"][0].startswith("accuracy gate failed, plan written anyway (--gate warn): talker")
    plan = json.loads((out / "plan.json").read_text())
    assert plan["build"]["accuracy_gate"]["passed"] is False and plan["build"]["accuracy_gate"]["mode"] == "warn"

    # refused again (nothing measured again): the plan the warn build left is removed
    rc, err, _ = run_relative(home, _argv(trained_tts_ckpt[0], placeholder_vocoder_plan, home, "damaged", *DAMAGED,
                                          code_predictor="cpu-fp32"), capsys)
    assert rc == 2 and not (out / "plan.json").exists(), err


def test_recorded_figures_are_judged_again_and_npu_figures_kept(honest):
    """A changed mark re-judges the recorded figures (no new measurement); NPU stages' simulator
    figures ride along unjudged; with no quantized stage the gate passes."""
    from dataclasses import replace

    from rkspeech.accuracy.gate import GateThresholds, apply_thresholds
    from rkspeech.pipelines.stage_gate import gate_section
    from rkspeech.pipelines.tts_build import _npu_figures

    gate = json.loads((honest / "build-report.json").read_text())["accuracy_gate"]
    strict = apply_thresholds(gate, replace(GateThresholds(), min_logit_snr_db=60.0, min_frames=1000))
    assert not strict["passed"] and strict["failures"][-1] == "measured on 378 fp32 frames, fewer than 1000"
    assert [f.split(" logit SNR")[0] for f in strict["failures"][:2]] == ["talker", "code_predictor"], strict

    graphs = {"talker": {"verify": {"logit_snr_db": 64.5}},
              "code_predictor": {"dtype": "fp16", "sim": {"frames": 4, "code_agreement": 0.98, "decisions": 58,
                                                          "decision_agreement": 0.9828, "logit_snr_db": 59.5}}}
    npu = _npu_figures(graphs)
    assert npu == {"talker": {"source": "simulator", "logit_snr_db": 64.5},
                   "code_predictor": {"source": "simulator", "dtype": "fp16", "frames": 4, "code_agreement": 0.98,
                                      "decisions": 58, "decision_agreement": 0.9828, "logit_snr_db": 59.5}}
    section = gate_section(None, "refuse", npu=npu)
    assert section["passed"] is True and section["failures"] == [] and section["npu"] == npu
    off = gate_section(None, "off")
    assert off["passed"] is None and "--gate off" in off["warning"]


def test_a_base_root_is_judged_on_held_out_voices(tts_base_ckpt):
    """A Base model is no longer refused by the gate (it stopped every default build of a Base
    root): its fp32 reference clones the held-out voices (x-vector), one request per utterance."""
    from rkspeech.accuracy.gate import GATE_TEXTS, run_gate
    from rkspeech.models.qwen3_tts.generate import TTSModel

    tts = TTSModel.load(tts_base_ckpt)
    out = run_gate(tts, reference={"talker": tts.talker_backend, "code_predictor": tts.code_predictor_backend},
                   variants={}, texts=GATE_TEXTS[:5], frames=4)
    assert out["requests"] == 5 and 0 < out["reference_frames"] <= 5 * 4 and out["texts"] == 5

