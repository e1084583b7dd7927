"""``rkspeech build qwen3-tts`` on a Base root: voice cloning's two graphs (``pipelines.clone_encoders``).

The session's reduced Base root built as a user runs it (``tts_base_build``).  What must hold: the
plan holds one stage record per cloning graph (placed cpu-fp32, contract format, hashed by the
integrity record; ``Plan.encoders``, not the per-frame ``Plan.stages``), the report their checks
against torch within ``core.thresholds``' marks, a re-run skips both stages, and the x-vector
check fails a graph fed the wrong front end.  Each graph's golden replay (a call of its check) is
listed in its record and replayed by ``check-board`` (CPU marks; the codes as agreement, not
graded); a scaled x-vector in the golden fails it in one line.  Cloning through the plan:
tests/runtime/test_clone_graphs.py.
"""

from __future__ import annotations

import json

import numpy as np


def test_the_build_lists_and_checks_both_graphs(tts_base_build, tts_base_ckpt, placeholder_vocoder_plan, capsys):
    """The plan holds one stage record each (placed cpu-fp32, hashed by its integrity record); the
    report holds the checks, within the marks; a second run of the build skips both stages."""
    from rkfixtures import run_relative, tts_base_build_argv
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE
    from rkspeech.plan.plan import load_plan

    home, out = tts_base_build
    raw = json.loads((out / "plan.json").read_text())
    for name, fmt in (("speaker_encoder", "rkspeech-speaker-encoder/1"), ("speech_encoder", "rkspeech-speech-encoder/1")):
        rec = raw[name]
        assert rec["placement"] == "cpu-fp32" and rec["contract"]["format"] == fmt
        assert rec["artifacts"] == {"encoder": {"onnx": f"clone/{name}.onnx"}}
        assert f"clone/{name}.onnx" in raw["integrity"]["files"]
        assert rec["goldens"] == {"encoder": f"clone/{name}.golden.npz"}  # its check's first call
        assert f"clone/{name}.golden.npz" in raw["integrity"]["files"]
    plan = load_plan(out / "plan.json", backend="ort")
    assert sorted(plan.encoders) == ["speaker_encoder", "speech_encoder"]
    assert sorted(plan.stages) == ["code_predictor", "talker"]  # the per-frame stages only
    graphs = json.loads((out / "build-report.json").read_text())["graphs"]
    xv = graphs["speaker_encoder"]["clone"]["check"]
    assert len(xv["clips"]) == 3 and xv["max_abs_diff"] <= CLONE_XVECTOR_MAX_ABS
    assert xv["cosine_min"] >= CLONE_XVECTOR_MIN_COSINE
    sc = graphs["speech_encoder"]["clone"]["check"]
    assert sc["codes"] > 100 and sc["different_codes"] == 0
    for name in ("speaker_encoder", "speech_encoder"):
        g = graphs[name]["clone"]["golden"]
        assert g["calls"] == 1 and 0 < g["bytes"] < 64_000, g  # the 0.55 s clip only
    capsys.readouterr()
    rc, err, _ = run_relative(home, tts_base_build_argv(tts_base_ckpt, placeholder_vocoder_plan, home), capsys)
    assert rc == 0
    assert "skip: speaker_encoder (inputs unchanged)" in err and "skip: speech_encoder (inputs unchanged)" in err


def test_the_xvector_check_catches_a_wrong_front_end(tts_base_ckpt, tts_base_build, monkeypatch):
    """The speaker check compares against the torch path: a front end off by a scale (the graph fed
    a mel of audio at half amplitude) fails it."""
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS
    from rkspeech.models.qwen3_tts import clone_inputs
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root
    from rkspeech.pipelines import clone_encoders

    real = clone_inputs.log_mel
    monkeypatch.setattr(clone_inputs, "log_mel", lambda a, sr=24000: real(np.asarray(a) * 0.5, sr))
    files = resolve_model_root(tts_base_ckpt)
    check = clone_encoders._check_speaker(tts_base_build[1] / "clone" / "speaker_encoder.onnx", TTSModel.load(tts_base_ckpt),
                                          read_tts_config(files).speaker_encoder)
    assert check["max_abs_diff"] > 10 * CLONE_XVECTOR_MAX_ABS


def _mirror(src, dst, copy: tuple[str, ...]):
    """``src`` rebuilt under ``dst`` from symlinks, except the files ``copy`` names (copied)."""
    import shutil

    for p in src.rglob("*"):
        if p.is_file():
            rel = p.relative_to(src).as_posix()
            q = dst / rel
            q.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, q) if rel in copy else q.symlink_to(p.resolve())
    return dst


def test_check_board_replays_the_cloning_graphs(tts_base_build, tmp_path, monkeypatch, capsys):
    """check-board --backend ort replays both cloning goldens on onnxruntime with the CPU marks
    and passes; with the golden's x-vector scaled by 1.1 it fails naming the speaker encoder in one
    line (exit 1), while changed codes in the speech encoder's are reported as agreement, not graded."""
    from rkspeech.board.check import CheckBoardOptions, check_board, cpu_stages_without_goldens, marks
    from rkspeech.cli import main
    from rkspeech.plan.plan import read_plan, write_plan_data
    from rkspeech.runtime.golden import load_golden, save_golden

    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")  # the table's rows unwrapped
    out = tts_base_build[1]
    raw = read_plan(out / "plan.json")
    raw.pop("vocoder")  # the fixture's vocoder plan is placeholders without goldens: the CPU stages only
    plan = write_plan_data(out / "plan_cpu.json", raw)
    rep = check_board(CheckBoardOptions(plan=plan, backend="ort", repeats=1))
    rows = {g["graph"]: g for g in rep["graphs"]}
    assert rep["ok"], [g.get("failure") for g in rep["graphs"]]
    assert [g["graph"] for g in rep["graphs"] if g["graph"].endswith(" encoder")] == ["speaker encoder",
                                                                                      "speech encoder"]
    sp, se = rows["speaker encoder"], rows["speech encoder"]
    assert sp["placement"] == se["placement"] == "cpu" and sp["pass_marks"] == marks(True)
    assert sp["golden_source"] == "ort" and len(sp["steps"]) == len(se["steps"]) == 1
    xv = sp["steps"][0]["outputs"][0]
    assert xv["output"] == "xvector" and xv["graded"] and (xv["snr_db"] is None or xv["snr_db"] > 100), xv
    codes = se["steps"][0]["outputs"][0]
    assert codes["output"] == "codes" and not codes["graded"] and codes["agreement"] == 1.0 and codes["values"] > 50
    assert not rep["notes"]
    for name in ("speaker_encoder", "speech_encoder"):  # a Base plan built before 2026-12-06
        raw[name].pop("goldens")
    assert cpu_stages_without_goldens(raw) == ["speaker_encoder", "speech_encoder"]

    # damaged goldens in a copy of the folder, the plan re-recorded over them
    names = ("clone/speaker_encoder.golden.npz", "clone/speech_encoder.golden.npz")
    d = _mirror(out, tmp_path / "copy", copy=names + ("plan_cpu.json",))
    g = load_golden(d / names[0])
    g.outputs[0]["xvector"] = g.outputs[0]["xvector"] * 1.1
    save_golden(d / names[0], g)
    g = load_golden(d / names[1])
    g.outputs[0]["codes"].reshape(-1)[:3] += 1  # three codes moved: reported, not graded
    save_golden(d / names[1], g)
    raw = json.loads((d / "plan_cpu.json").read_text())  # re-recorded over the files as they are now
    (d / "plan_cpu.json").unlink()
    write_plan_data(d / "plan_cpu.json", raw)
    capsys.readouterr()
    rc = main(["check-board", "--plan", str(d / "plan_cpu.json"), "--backend", "ort", "--repeats", "1",
               "-o", str(tmp_path / "bad.json")])
    cap = capsys.readouterr()
    err = [line for line in cap.err.splitlines() if line.startswith("rkspeech: ")]  # not the progress lines
    assert rc == 1
    assert len(err) == 1 and err[0].startswith("rkspeech: check-board: speaker encoder, step 0: output xvector "
                                               "differs from the golden replay (SNR 2"), err  # ~20.8 dB
    assert err[0].endswith("pass marks 25 dB, 0.998)"), err
    bad = {g["graph"]: g for g in json.loads((tmp_path / "bad.json").read_text())["graphs"]}
    assert not bad["speaker encoder"]["ok"] and bad["speech encoder"]["ok"]
    moved = bad["speech encoder"]["steps"][0]["outputs"][0]
    assert round((1 - moved["agreement"]) * moved["values"]) == 3
    assert f"{moved['values'] - 3}/{moved['values']}" in cap.out  # the table's agreement column
