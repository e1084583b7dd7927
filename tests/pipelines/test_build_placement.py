"""``rkspeech build qwen3-tts --talker cpu-int4 --code-predictor cpu-int8``: CPU-placed stages in the
build, the plan and the runtime (issue 26, deliver 1), on the reduced custom-voice root.

The vocoder is not what is under test here: the build reuses a vocoder plan (``--vocoder-plan``)
whose NPU files are placeholders (the session's exported reduced step graphs as its ONNX, 24
bytes standing for each .rknn), so no conversion runs and ``speak --backend ort`` (the vocoder's
ONNX on onnxruntime, which never reads a .rknn) speaks through the plan's CPU stages.

* the plan's talker and code predictor sections are impl ``onnx``, placed ``cpu-int4`` /
  ``cpu-int8``, their ONNX the variants (``MatMulNBits`` / ``MatMulInteger`` inside) with the
  quantization record; no .rknn is made for them; the report has the record and file sizes.  The
  accuracy gate is tests/accuracy/test_accuracy_gate.py's: on this random root it fails (flat logits), so
  this build runs with ``--gate off``, which the report records as a warning;
* ``speak`` opens those variants on onnxruntime with the plan's threads and writes frames x 1920
  samples;
* a malformed quantization record, a placement that contradicts its impl, and contradictory
  build options are refused in one line.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

CAPACITY, PREFILL = 96, 16


@pytest.fixture(scope="module")
def vocoder_plan(placeholder_vocoder_plan):
    return placeholder_vocoder_plan


def _build_argv(tts_custom_ckpt, vocoder_plan, home):
    return ["build", "qwen3-tts", "--model-dir", os.path.relpath(tts_custom_ckpt, home), "--out-dir", "out",
            "--vocoder-plan", os.path.relpath(vocoder_plan, home), "--talker", "cpu-int4", "--code-predictor",
            "cpu-int8", "--cpu-threads", "1", "--talker-capacity", str(CAPACITY),
            "--talker-prefill", str(PREFILL), "--gate", "off"]


@pytest.fixture(scope="module")
def built(tts_custom_ckpt, vocoder_plan, tmp_path_factory):
    """The build as a user runs it: from a folder of their own, relative paths in and out."""
    from rkfixtures import run_relative

    home = tmp_path_factory.mktemp("tts_cpu_build")
    rc, _, new = run_relative(home, _build_argv(tts_custom_ckpt, vocoder_plan, home))
    assert rc == 0
    assert all(p.startswith("out/") for p in new), sorted(new)
    return home / "out"


def _op_types(path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_plan_places_the_stages_on_the_cpu(built):
    from rkspeech.plan.plan import load_plan

    raw = json.loads((built / "plan.json").read_text())
    plan = load_plan(built / "plan.json", backend="ort")
    talker, cp = plan.stages["talker"], plan.stages["code_predictor"]
    assert (talker.on_npu, talker.placement, talker.threads) == (False, "cpu-int4", 1)
    assert (cp.on_npu, cp.placement, cp.threads) == (False, "cpu-int8", 1)
    # the artifacts are the variants, and hold the quantized ops
    for role, path in talker.paths("ort").items():
        assert path.name.endswith(".int4.onnx") and path.parent.name == "cpu", path
        assert "MatMulNBits" in _op_types(path), role
    (role, path), = cp.paths("ort").items()
    assert role == "step" and path.name.endswith(".int8.onnx")
    assert "MatMulInteger" in _op_types(path) and "MatMulNBits" not in _op_types(path)
    # the records the plan keeps
    tq, cq = raw["talker"]["quantization"], raw["code_predictor"]["quantization"]
    assert (tq["variant"], tq["bits"], tq["block_size"], tq["accuracy_level"]) == ("int4", 4, 32, 4)
    assert tq["quantizer"].endswith("MatMul4BitsQuantizer") and tq["onnxruntime"]
    assert set(tq["graphs"]) == {"prefill", "decode"}
    assert tq["graphs"]["decode"]["source"] == "talker/onnx/talker_decode_B1_cap96.onnx"  # relative
    assert tq["graphs"]["decode"]["quantized_ops"]["MatMulNBits"] > 0
    assert (cq["variant"], cq["bits"], cq["per_channel"]) == ("int8", 8, True) and "dataset" not in cq
    assert cp.simulator_build() == {}  # a CPU record says nothing to the simulator
    # the code predictor's 15 heads as int8 graphs (pipelines.cpu_heads), each with its contract
    from rkspeech.contracts.head import HeadContract
    from rkspeech.contracts.read import read_contract

    assert sorted(cp.heads) == list(range(1, 16)) and talker.heads == {}
    for j, path in cp.heads.items():
        c = read_contract(path, HeadContract)
        assert c.index == j and path.name == f"head{j}.int8.onnx" and "MatMulInteger" in _op_types(path)
    assert raw["code_predictor"]["artifacts"]["head1"] == {"onnx": "code_predictor/cpu/heads/head1.int8.onnx"}  # relative
    # its start graph (pipelines.cpu_start): the same stack at B=2, written alike
    from rkspeech.contracts.talker import TalkerContract

    assert raw["code_predictor"]["artifacts"]["start"] == {"onnx": "code_predictor/cpu/code_predictor_start_B2.int8.onnx"}
    start = read_contract(cp.start, TalkerContract)
    step = read_contract(cp.paths("ort")["step"], TalkerContract)
    assert start.B == 2 and start.same_model(step) and talker.start is None
    assert "MatMulInteger" in _op_types(cp.start)
    # CPU stages are exported with per-layer cache inputs and grouped k/v (cpu_stages.CPU_EXPORT)
    for stage in (talker, cp):
        assert (stage.contract["cache_io"], stage.contract["kv_layout"]) == ("layers", "grouped")
    # no .rknn for CPU stages (the vocoder's placeholders are linked into vocoder/, as its plan names them)
    assert sorted(p.relative_to(built).as_posix() for p in built.rglob("*.rknn")) == ["vocoder/first.rknn",
                                                                                    "vocoder/main.rknn"]
    assert not (built / "code_predictor" / "calib").exists()


def test_report_has_the_cpu_stage_records(built):
    report = json.loads((built / "build-report.json").read_text())
    assert report["placements"] == {"talker": "cpu-int4", "code_predictor": "cpu-int8", "vocoder": "npu"}
    for name, variant in (("talker", "int4"), ("code_predictor", "int8")):
        row = report["graphs"][name]
        assert row["placement"] is None and row["rknn"] is None, name  # not converted
        cpu = row["cpu"]
        assert cpu["placement"] == f"cpu-{variant}" and cpu["quantization"]["variant"] == variant
        for f in cpu["files"].values():
            assert 0 < f["variant_bytes"] < f["fp32_bytes"], f
        assert cpu["check"] is None, cpu  # --gate off: not measured
    heads = report["graphs"]["code_predictor"]["cpu"]["heads"]
    assert heads["heads"] == 15 and heads["variant"] == "int8" and 0 < heads["bytes_after"] < heads["bytes_before"]
    start = report["graphs"]["code_predictor"]["cpu"]["start"]
    assert start["variant"] == "int8" and 0 < start["bytes_after"] < start["bytes_before"], start
    # the gate's figures are tests/accuracy/test_accuracy_gate.py's (on the random root they fail: flat logits)
    gate = report["accuracy_gate"]
    assert gate["mode"] == "off" and gate["passed"] is None and "stages" not in gate
    assert report["warnings"] == [gate["warning"]] and "--gate off" in gate["warning"]
    # the talker's fp32 graph was still checked against torch
    assert report["graphs"]["talker"]["verify"]["codes_identical_ort"] is True


def test_summary_table_shows_the_cpu_stages(built):
    from rkspeech.cli.build_tts import summary_rows

    rows = dict(summary_rows(json.loads((built / "build-report.json").read_text())))
    assert rows["talker: NPU / CPU ops"] == "cpu-int4 (onnxruntime, not converted)"
    assert "MatMul4BitsQuantizer" in rows["talker: CPU weights"] and "block 32" in rows["talker: CPU weights"]
    assert rows["accuracy gate"] == "off: the quantized stages were not measured"


def test_speak_runs_the_cpu_variants(built, tts_custom_ckpt, tmp_path, capsys):
    """From a copy of the build folder alone, at another depth (as on a board): a --vocoder-plan
    build pointed at ../../voc_plan/... and broke there (issue 37); its plan now names only
    files inside its folder."""
    import shutil

    from rkfixtures import run_relative
    from rkspeech.plan.integrity import expected_files
    from rkspeech.plan.paths import inside

    raw = json.loads((built / "plan.json").read_text())
    names = [*(f for k in raw["vocoder"]["artifacts"].values() for f in k.values()), *raw["integrity"]["files"]]
    assert names and all(inside(built, n) for n in names), names
    board = tmp_path / "board" / "deeper" / "plan"
    shutil.copytree(built, board)
    assert all(f.is_file() for f in expected_files(raw, board))
    rc, err, new = run_relative(tmp_path, [
        "speak", "Hello from the board.", "--model-dir", os.path.relpath(tts_custom_ckpt, tmp_path), "--plan",
        os.path.relpath(board / "plan.json", tmp_path), "--backend", "ort", "--speaker", "vivian", "--greedy",
        "--max-frames", "6", "-o", "s.wav", "--report", "r.json"], capsys)
    assert rc == 0, err
    assert new == {"s.wav", "r.json"}, sorted(new)
    report = json.loads((tmp_path / "r.json").read_text())
    names = report["stage_backends"]
    assert names["talker"] == "talker graph (ort: talker_decode_B1_cap96.int4.onnx)", names
    assert names["code_predictor"] == ("code-predictor step (ort: code_predictor_step.int8.onnx) + start graph "
                                       "code_predictor_start_B2.int8.onnx + 15 head graphs"), names
    flat = " ".join(err.split())  # progress lines wrap at the terminal's width
    assert "cpu-int4 on ort, 1 threads" in flat and "cpu-int8 on ort, 1 threads" in flat, err
    pcm, rate = sf.read(tmp_path / "s.wav", dtype="int16")
    assert report["frames"] == 6 and rate == 24000 and len(pcm) == report["frames"] * 1920
    assert np.abs(pcm).max() > 0


def test_a_second_build_resumes(built, tts_custom_ckpt, vocoder_plan, capsys):
    """Every stage of the CPU build, the variants and the agreement check included, is skipped
    when nothing changed, and the plan comes out the same."""
    from rkfixtures import run_relative

    home = built.parent
    plan = (built / "plan.json").read_text()
    capsys.readouterr()
    rc, err, _ = run_relative(home, _build_argv(tts_custom_ckpt, vocoder_plan, home), capsys)
    assert rc == 0
    flat = " ".join(err.split())
    for stage in ("talker_quantize_int4", "code_predictor_quantize_int8", "code_predictor_heads_int8",
                  "code_predictor_start_int8", "talker_export", "cpu_goldens"):
        assert f"skip: {stage}" in flat, err
    assert "== " not in err, err
    assert (built / "plan.json").read_text() == plan


CPU_ROLES = {"talker": {"prefill", "decode"},
             "code_predictor": {"step", "start", *(f"head{j}" for j in range(1, 16))}}


def test_cpu_goldens_are_recorded_and_listed(built):
    """Every CPU graph has a golden beside it, listed in its stage record and hashed by the plan;
    their inputs are a generation's real calls: the talker's decode and the code predictor's
    step chained from their first call's cache, the prefill and the start graph from an empty one."""
    from rkspeech.plan.integrity import golden_path
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.golden import load_golden

    raw = json.loads((built / "plan.json").read_text())
    plan = load_plan(built / "plan.json", backend="ort")
    for name, roles in CPU_ROLES.items():
        listed = raw[name]["goldens"]
        assert set(listed) == roles, (name, sorted(listed))
        for role, rel in listed.items():
            onnx = raw[name]["artifacts"][role]["onnx"]
            assert built / rel == golden_path(built / onnx) and rel in raw["integrity"]["files"], (name, role)
        assert plan.stages[name].goldens == {r: built / v for r, v in listed.items()}
    report = json.loads((built / "build-report.json").read_text())["cpu_goldens"]["graphs"]
    decode = load_golden(built / raw["talker"]["goldens"]["decode"])
    assert decode.steps == 3 and decode.meta["inputs"] == "generation" and decode.chain[0]["kind"] == "kv_write"
    assert all(not any(n.startswith("cache") for n in f) for f in decode.inputs[1:])  # chained: state once
    assert decode.inputs[0]["cache_k0"].any()  # the prompt's keys: the state the decode golden stores
    assert decode.chain[0]["positions"] == [decode.chain[0]["positions"][0] + k for k in range(2)]
    assert report["talker"]["decode"]["chained"] and report["code_predictor"]["step"]["chained"]
    assert not report["talker"]["prefill"]["chained"] and not report["code_predictor"]["start"]["chained"]
    start = load_golden(built / raw["code_predictor"]["goldens"]["start"])
    assert start.steps == 3 and not any(a.any() for f in start.inputs for n, a in f.items() if n.startswith("cache"))
    head = load_golden(built / raw["code_predictor"]["goldens"]["head3"])
    assert head.steps == 3 and set(head.outputs[0]) == {"logits"}
    total = sum(r["bytes"] for stage in report.values() for r in stage.values())
    assert total < 600_000, report  # reduced: ~465 KB, 15 heads x 25 KB of logits the most of it


def _with_vocoder_goldens(built, tmp_path):
    """A copy of the build whose placeholder vocoder gets goldens (onnxruntime on its ONNX), so
    check-board has every graph to replay."""
    import shutil

    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.integrity import golden_path
    from rkspeech.runtime.golden import golden_inputs, record_golden
    from rkspeech.runtime.runners import open_runner

    folder = tmp_path / "plan"
    shutil.copytree(built, folder)
    raw = json.loads((folder / "plan.json").read_text())
    for role, files in raw["vocoder"]["artifacts"].items():
        with open_runner("ort", folder / files["onnx"]) as r:
            g = golden_inputs(role, read_contract(folder / files["onnx"]), r.input_specs())
            record_golden(golden_path(folder / files["rknn"]), g, r, source="ort")
    return folder


def test_check_board_replays_the_cpu_goldens(built, tmp_path, capsys):
    from rkspeech.cli import main
    from rkspeech.core.thresholds import CPU_GOLDEN_MIN_SNR_DB

    folder = _with_vocoder_goldens(built, tmp_path)
    rc = main(["check-board", "--plan", str(folder / "plan.json"), "--backend", "ort", "--repeats", "1",
               "-o", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    rep = json.loads((tmp_path / "r.json").read_text())
    cpu = {g["graph"]: g for g in rep["graphs"] if g["placement"] == "cpu"}
    assert set(cpu) == {f"{n.replace('_', ' ')} {r}" for n, roles in CPU_ROLES.items() for r in roles}, sorted(cpu)
    assert {g["graph"] for g in rep["graphs"] if g["placement"] == "npu"} == {"vocoder first", "vocoder main"}
    assert rep["notes"] == [] and rep["cpu_pass_marks"]["snr_db"] == CPU_GOLDEN_MIN_SNR_DB
    for name, g in cpu.items():
        assert g["ok"] and g["file"].endswith(".onnx") and len(g["steps"]) == 3, name
    top1 = [r["top1"] for s in cpu["code predictor head3"]["steps"] for r in s["outputs"]]
    assert top1 and all(t["rows"] == 1 and t["decided_flips"] == 0 for t in top1)


def test_check_board_fails_on_a_changed_cpu_golden(built, tmp_path, capsys):
    """One changed value of a head's golden logits fails naming graph and step: the runner-up made
    the golden's top-1 by one rms, a decided row, while SNR (~30 dB) and cosine stay above the CPU
    marks, so only the top-1 rule sees it."""
    import numpy as np

    from rkspeech.cli import main
    from rkspeech.runtime.golden import load_golden, save_golden

    folder = _with_vocoder_goldens(built, tmp_path)
    raw = json.loads((folder / "plan.json").read_text())
    path = folder / raw["code_predictor"]["goldens"]["head5"]
    g = load_golden(path)
    row = g.outputs[1]["logits"].reshape(-1)
    second = np.argsort(row)[-2]
    row[second] = row.max() + np.sqrt(np.mean(row ** 2))  # the runner-up on top by one rms
    path.unlink()
    save_golden(path, g)
    plan = folder / "plan.json"
    raw.pop("integrity")  # the golden changed on purpose: re-record the plan over the files as they are
    from rkspeech.plan.plan import write_plan_data

    plan.unlink()
    write_plan_data(plan, raw)
    rc = main(["check-board", "--plan", str(plan), "--backend", "ort", "--repeats", "1"])
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("rkspeech: check-board:")]
    assert rc == 1 and len(line) == 1 and "code predictor head5, step 1: output logits differs" in line[0], err
    assert "top-1 flipped on 1 of 1 decided rows" in line[0], line
    from rkspeech.core.thresholds import CPU_GOLDEN_MIN_SNR_DB

    snr = float(line[0].split("(SNR ")[1].split(" dB")[0])
    assert snr > CPU_GOLDEN_MIN_SNR_DB, line  # the SNR mark alone would have passed it


def test_check_board_on_a_plan_without_cpu_goldens_says_so(built, tmp_path, capsys):
    """A plan built before CPU goldens: one line says its CPU stages are not checked; the rest is."""
    from rkspeech.cli import main

    folder = _with_vocoder_goldens(built, tmp_path)
    plan = folder / "plan.json"
    raw = json.loads(plan.read_text())
    for name in CPU_ROLES:
        raw[name].pop("goldens")
    plan.write_text(json.dumps(raw))
    rc = main(["check-board", "--plan", str(plan), "--backend", "ort", "--repeats", "1", "-o", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    notes = [x for x in err.splitlines() if "golden" in x]
    assert rc == 0 and len(notes) == 1, err
    assert "CPU stage(s) talker, code predictor have no golden replays" in notes[0] and "rebuild" in notes[0]
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [g["graph"] for g in rep["graphs"]] == ["vocoder first", "vocoder main"]


def test_doctor_compares_the_plan_runtime_versions(built, tmp_path, capsys, monkeypatch):
    """The plan records what it was built with; doctor names each skew with the installed one
    (faked here: the board extra's onnxruntime 1.32.0 / numpy 2.4.6) and says what to do."""
    import importlib.metadata as md

    from rkspeech.cli import main

    rec = json.loads((built / "plan.json").read_text())["build"]["runtime_versions"]
    assert rec == {"onnxruntime": md.version("onnxruntime"), "numpy": md.version("numpy"),
                   "rknn-toolkit2": rec["rknn-toolkit2"], "librknnrt": rec["rknn-toolkit2"]}, rec
    # the CPU stages alone (the vocoder's .rknn here are placeholders doctor cannot read)
    plan = _edit_plan(built, tmp_path, lambda r: r.pop("vocoder"))
    try:
        main(["doctor", "--plan", str(plan)])
        out = capsys.readouterr().out
        assert "version-skew" not in out and "versions-unrecorded" not in out, out
        real = md.version
        fake = {"onnxruntime": "1.32.0", "numpy": "2.4.6"}
        monkeypatch.setattr(md, "version", lambda name: fake.get(name) or real(name))
        main(["doctor", "--plan", str(plan)])
    finally:
        plan.unlink()
    lines = {x.split(":")[0]: x for x in capsys.readouterr().out.splitlines() if "version-skew" in x}
    assert set(lines) == {"WARNING version-skew-onnxruntime", "WARNING version-skew-numpy"}, lines
    ort = lines["WARNING version-skew-onnxruntime"]
    assert f"onnxruntime 1.32.0 here, the plan's CPU stages (talker, code predictor) were built and checked with " \
           f"{rec['onnxruntime']}" in ort and "check-board" in ort and f"onnxruntime=={rec['onnxruntime']}" in ort
    assert f"numpy=={rec['numpy']}" in lines["WARNING version-skew-numpy"]


def _edit_plan(built, tmp_path, edit):
    """A copy of the built plan beside it (its relative paths still resolve), edited."""
    raw = json.loads((built / "plan.json").read_text())
    edit(raw)
    bad = built / f"plan-{tmp_path.name}.json"
    bad.write_text(json.dumps(raw))
    return bad


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["talker"]["quantization"].update(bits="four"), r"talker.quantization is not a valid CPU weight "
                                                                r"record \(bits is 'four'\)"),
    (lambda r: r["talker"]["quantization"].update(block_size=24), r"block_size 24: int4 needs a power of two"),
    (lambda r: r["code_predictor"]["quantization"].update(variant="int4"), "variant 'int4' for placement 'cpu-int8'"),
    (lambda r: r["code_predictor"]["quantization"].pop("graphs"), "graphs must hold one entry per role"),
    (lambda r: r["talker"].pop("quantization"), "placed cpu-int4 but has no quantization record"),
    (lambda r: r["talker"].update(placement="npu"), "talker is placed on the NPU but prefill has no rknn file"),
    (lambda r: r["talker"].update(threads=0), "talker.threads must be a whole number >= 1"),
    (lambda r: r["talker"]["artifacts"].update(start=r["code_predictor"]["artifacts"]["start"]),
     "talker.artifacts.start: only a code predictor placed on the CPU in step form has a start graph"),
    (lambda r: r["code_predictor"]["artifacts"].update(start={"onnx": "code_predictor/cpu/gone.onnx"}),
     r"start graph \S+gone.onnx is missing"),
    (lambda r: r["code_predictor"]["artifacts"].update(start=r["code_predictor"]["artifacts"]["head1"]),
     "start graph head1.int8.onnx does not carry the stage's contract"),
])
def test_malformed_cpu_stage_is_one_line(built, tmp_path, capsys, edit, message):
    import re

    from rkspeech.cli import main

    bad = _edit_plan(built, tmp_path, edit)
    try:
        rc = main(["decode", "--plan", str(bad), str(tmp_path / "c.npy"), "-o", str(tmp_path / "o.wav")])
    finally:
        bad.unlink()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and re.search(message, err) and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("flags, message", [
    (["--talker", "npu", "--skip-talker-rknn"], "--skip-talker-rknn places the talker on the CPU"),
    (["--code-predictor", "cpu-int4", "--code-predictor-dtype", "int16-hybrid"], "is an NPU conversion"),
    (["--vocoder", "cpu-fp32"], "--vocoder cpu-fp32: not available yet"),
    (["--talker", "cpu-int8", "--skip-talker"], "--skip-talker keeps the talker in torch"),
    (["--cpu-threads", "0"], "--cpu-threads must be >= 1"),
])
def test_bad_placement_options_fail_in_one_line(tts_custom_ckpt, tmp_path, capsys, flags, message):
    from rkspeech.cli import main

    rc = main(["build", "qwen3-tts", "--model-dir", str(tts_custom_ckpt), "--out-dir", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_skip_talker_rknn_is_cpu_fp32():
    from rkspeech.pipelines.tts_options import TTSBuildOptions, code_predictor_placement, talker_placement

    assert talker_placement(TTSBuildOptions(out_dir="o", skip_talker_rknn=True)) == "cpu-fp32"
    assert talker_placement(TTSBuildOptions(out_dir="o", skip_talker_rknn=True, talker="cpu-int4")) == "cpu-int4"
    assert talker_placement(TTSBuildOptions(out_dir="o")) == code_predictor_placement(TTSBuildOptions(out_dir="o")) == "npu"


def test_head_graphs_of_another_model_are_refused_in_one_line(built):
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.tts.heads import HeadGraphs

    from rkspeech.contracts.head import HeadContract
    from rkspeech.contracts.read import read_contract
    from rkspeech.core.errors import RkspeechError

    heads = load_plan(built / "plan.json", backend="ort").stages["code_predictor"].heads
    c = read_contract(heads[1], HeadContract)
    size = {"hidden": c.hidden, "vocab": c.vocab_size, "groups": len(heads) + 1}
    with pytest.raises(RkspeechError, match="is not codebook 1's head of this model"):
        HeadGraphs(heads, **size, fingerprint="0" * 16)
    with pytest.raises(RkspeechError, match="is not codebook 2's head"):
        HeadGraphs({1: heads[1], 2: heads[1], **{j: p for j, p in heads.items() if j > 2}}, **size)
    with pytest.raises(RkspeechError, match="cover codebooks"):
        HeadGraphs({j: p for j, p in heads.items() if j < 15}, **size)
    assert len(HeadGraphs(heads, **size)) == 15


def test_start_graph_is_two_step_calls_in_one(built, tts_custom_ckpt, tmp_path):
    """The start graph (B=2) leaves the stack where two step calls leave it: in fp32 the same
    hidden state and cache to float rounding, in one call instead of two; a step graph given as
    the start graph is refused in one line."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.cpu_start import build_start
    from rkspeech.pipelines.resumable import RunEveryStage
    from rkspeech.runtime.tts.code_predictor_codebook import open_step_stack

    files = resolve_model_root(tts_custom_ckpt)
    start = build_start(RunEveryStage(), "cpu-fp32", files, LazyTTSModel(files), tmp_path)["start"]
    step = built / "code_predictor" / "code_predictor_step.onnx"  # the fp32 step graph the variants come from
    out = []
    for s in (None, start):
        stack = open_step_stack(step, "ort", 16, rope="numpy", start=s, threads=1)[3]
        x = np.random.default_rng(0).standard_normal((2, stack.contract.hidden)).astype(np.float32)
        stack.start(16)
        out.append((stack.forward(x), stack.cache.copy(), dict(stack.calls)))
        stack.close()
    (h1, c1, n1), (h2, c2, n2) = out
    assert n1 == {"prefill": 0, "decode": 2} and n2 == {"prefill": 1, "decode": 0}
    assert np.allclose(h1, h2, atol=1e-4) and np.allclose(c1[:, :, :2], c2[:, :, :2], atol=1e-4)
    with pytest.raises(RkspeechError, match=r"B=1, not a code-predictor step \(.*B=2\)"):
        open_step_stack(step, "ort", 16, start=step)


def test_an_utterance_cut_by_the_talker_capacity_says_so(built, tts_custom_ckpt, tmp_path, capsys):
    """The random talker never ends an utterance: at --max-frames 200 the plan's capacity of 96
    positions cuts it.  That used to be silent (issue 37); now one line on stderr and the report."""
    from rkfixtures import run_relative

    rc, err, _ = run_relative(tmp_path, [
        "speak", "Hello.", "--model-dir", os.path.relpath(tts_custom_ckpt, tmp_path), "--plan",
        os.path.relpath(built / "plan.json", tmp_path), "--backend", "ort", "--speaker", "vivian", "--greedy",
        "--max-frames", "200", "-o", "s.wav", "--report", "r.json"], capsys)
    assert rc == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    (cut,) = report["cut"]
    assert cut.startswith(f"the utterance was cut after {report['frames']} frames") and report["frames"] < CAPACITY
    assert f"the talker graph holds {CAPACITY} positions (rebuild with a larger --talker-capacity)" in cut
    lines = [x for x in err.splitlines() if x.startswith("warning: the utterance was cut")]
    assert len(lines) == 1 and cut in " ".join(err.split()), err
