"""The accuracy map as a build stage and in ``rkspeech verify --plot`` (issue 15, part 5).

Fast by design: the reduced synthetic vocoder at B=4 is exported for real and mapped for real
(2 blocks, fp32 and the fp16 storage model), but the toolkit's conversion and container read
and verify's simulator run are replaced by stand-ins: converting this step takes 90-170 s on
the shared 2-core machine (measured 2026-12-01) and the simulator map of the same step two more
builds, far over the 60 s a test may take.  What the stand-ins skip is tested elsewhere
(tests/pipelines/test_build.py: conversion and verify; tests/accuracy/test_accuracy_map.py: the map on the
simulator, whose figures this stage only passes on).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

PNG = b"\x89PNG\r\n\x1a\n"


def _cli(*argv) -> int:
    from rkspeech.cli import main

    return main([str(a) for a in argv])


@pytest.fixture
def no_toolkit(monkeypatch):
    """Conversion, container read and board estimate replaced: the fake .rknn holds the contract."""
    import rkspeech.convert.conversion as conversion
    import rkspeech.contracts.rknn_file as container
    import rkspeech.pipelines.vocoder_build as vocoder_build
    from rkspeech.contracts.vocoder import VocoderContract

    def convert(onnx_path, output_path, *, target, custom_string=None, **_):
        with open(output_path, "w") as f:
            f.write(custom_string)
        return SimpleNamespace(to_report=lambda: {"placement": {"npu_ops": 1, "cpu_ops": 0},
                                                  "build": {"seconds": 0.0, "peak_rss_mb": 0,
                                                            "regtask_overflow_lines": 0},
                                                  "rknn": {"bytes": 1}})

    def read_container(path, expect_target=None):
        text = open(path).read()
        return SimpleNamespace(contract=VocoderContract.from_json(text), custom_string=text, file_size=len(text),
                               format="fake",
                               target=expect_target, toolkit_version="fake", node_counts=lambda: {})

    monkeypatch.setattr(conversion, "convert", convert)
    monkeypatch.setattr(container, "read_container", read_container)
    monkeypatch.setattr(vocoder_build, "_board_estimate", lambda path: {})


@pytest.fixture
def built(reduced_ckpt, tmp_path, no_toolkit):
    """``rkspeech build qwen3-tts-vocoder -B 4 --accuracy-pieces 2 --accuracy-skip-sim``."""
    out = tmp_path / "build"
    assert _cli("build", "qwen3-tts-vocoder", "--model-dir", reduced_ckpt, "-B", 4, "--first-length", 0,
                "--out-dir", out, "--skip-sim", "--accuracy-pieces", 2, "--accuracy-skip-sim") == 0
    return out


def test_build_records_the_accuracy_headline_and_verify_draws_it(built, tmp_path, monkeypatch):
    from rkspeech.cli.build_vocoder import summary_rows
    from rkspeech.verify import simulator

    report = json.loads((built / "build-report.json").read_text())
    acc = report["accuracy"]
    assert acc["pieces"] == 2 and acc["simulated"] is False
    assert acc["inputs"].startswith("step 3 of a stepwise onnxruntime decode")
    # final SNR of the audio: the fp16 storage model, in the band of the simulator's (47-49 dB)
    assert 40 < acc["final_snr_db"]["audio_values"]["fp16_model"] < 60
    assert [b["index"] for b in acc["worst_blocks"]] and acc["worst_blocks"][0]["label"]
    assert len(acc["worst_layers"]) == 5 and all(e["fp16_model_snr_db"] < 60 for e in acc["worst_layers"])
    assert not acc["overflow"]
    full = json.loads((built / "accuracy-report.json").read_text())
    assert acc["report"] == str(built / "accuracy-report.json") and len(full["blocks"]) == 2
    rows = dict(summary_rows(report))  # the build's table
    assert rows["accuracy map: audio_values vs fp32"].startswith(
        f"{acc['final_snr_db']['audio_values']['fp16_model']:.1f} dB (fp16 storage model, 2 blocks")

    # verify --plot draws that map (verify's own simulator run stood in for)
    monkeypatch.setattr(simulator, "verify_vocoder", lambda *a, **k: simulator.VerifyResult(
        tokens=10, snr_db={"rknn_sim_step": 47.0}, sim_vs_ort_db=50.0, per_step={"rknn_sim_step": [47.0]}))
    step = built / "onnx" / "vocoder_npu_step_B4.onnx"
    plot, rep = tmp_path / "map.png", tmp_path / "verify.json"
    assert _cli("verify", "--model-dir", built, "--onnx", step, "--plot", plot, "--report", rep,
                "--accuracy-report", built / "accuracy-report.json") == 0
    assert plot.read_bytes()[:8] == PNG
    got = json.loads(rep.read_text())["accuracy"]
    assert got["plot"] == str(plot) and got["final_snr_db"] == acc["final_snr_db"]

    # a rebuild with the same flags skips the stage (the map is not redone) and keeps its headline
    assert _cli("build", "qwen3-tts-vocoder", "--model-dir", report["options"]["model_dir"], "-B", 4,
                "--first-length", 0, "--out-dir", built, "--skip-sim", "--accuracy-pieces", 2,
                "--accuracy-skip-sim") == 0
    again = json.loads((built / "build-report.json").read_text())
    ran = report["stages"]["accuracy"]["seconds"]  # the first build's time, kept by the resumed one
    assert again["stages"]["accuracy"] == {"skipped": True, "built_seconds": ran} and again["accuracy"] == acc

    # the default build (no --accuracy-pieces) has no accuracy stage and no headline
    assert _cli("build", "qwen3-tts-vocoder", "--model-dir", report["options"]["model_dir"], "-B", 4,
                "--first-length", 0, "--out-dir", built, "--skip-sim") == 0
    plain = json.loads((built / "build-report.json").read_text())
    assert plain["accuracy"] is None and "accuracy" not in plain["stages"]
    assert not any(k.startswith("accuracy map") for k, _ in summary_rows(plain))


def test_bad_values_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "other.json").write_text(json.dumps({"model": "x.onnx"}))
    (tmp_path / "broken.json").write_text("{not json")
    step = tmp_path / "step.onnx"  # never read: each mistake is caught before any work
    cases = [
        (("build", "qwen3-tts-vocoder", "--out-dir", tmp_path / "o", "--accuracy-pieces", -1),
         "argument --accuracy-pieces: must be >= 0, got -1"),
        (("build", "qwen3-tts-vocoder", "--out-dir", tmp_path / "o", "--accuracy-skip-sim"),
         "--accuracy-skip-sim applies to the accuracy map: give --accuracy-pieces N too"),
        (("verify", "--onnx", step, "--plot", tmp_path / "map.jpg"), "--plot writes a PNG"),
        (("verify", "--onnx", step, "--plot", tmp_path / "map.png", "--accuracy-pieces", 0),
         "--accuracy-pieces must be >= 1, got 0"),
        (("verify", "--onnx", step, "--plot", tmp_path / "map.png", "--accuracy-report", tmp_path / "none.json"),
         "no such file"),
        (("verify", "--onnx", step, "--plot", tmp_path / "map.png", "--accuracy-report", tmp_path / "broken.json"),
         "cannot read it as JSON"),
        (("verify", "--onnx", step, "--plot", tmp_path / "map.png", "--accuracy-report", tmp_path / "other.json"),
         "not an accuracy report"),
        (("verify", "--onnx", step, "--accuracy-report", tmp_path / "other.json"), "give --plot R.png too"),
        (("verify", "--onnx", step, "--plot", tmp_path / "missing" / "map.png"), "plot"),
    ]
    for args, message in cases:
        assert _cli(*args) == 2, args
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (args, err)
