"""`rkspeech export` end to end through the CLI: report JSON fields, check-only, bad input."""

from __future__ import annotations

import json
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "rkspeech", *args], capture_output=True, text=True)


def test_export_cli_writes_report(reduced_ckpt, tmp_path):
    report = tmp_path / "r.json"
    onnx = tmp_path / "s.onnx"
    proc = _run("export", "qwen3-tts-vocoder", "--model-dir", str(reduced_ckpt), "--codes-length", "4",
                "--output", str(onnx), "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["B"] == 4 and r["cache_numel"] > 0
    # the default npu graph's phase Snake is approximate in fp32 (measured 72 dB; see thresholds)
    assert r["snr_db"]["torch_step"] >= 60 and r["snr_db"]["onnxruntime_step"] >= 60
    assert r["onnx"]["nodes"] > 100 and r["onnx"]["op_histogram"]["Conv"] > 0
    assert onnx.is_file()
    assert "SNR onnxruntime step" in proc.stdout


def test_check_only_exports_nothing(reduced_ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = _run("export", "qwen3-tts-vocoder", "--model-dir", str(reduced_ckpt), "-B", "2", "--check-only")
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.glob("*.onnx"))


def test_bad_codes_length_is_a_clean_error(reduced_ckpt):
    proc = _run("export", "qwen3-tts-vocoder", "--model-dir", str(reduced_ckpt), "-B", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "codes-length" in proc.stderr
