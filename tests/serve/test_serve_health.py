"""``rkspeech healthcheck`` (issue 41, item 1): a real describe -> info round trip.  Healthy
server: exit 0 and the programs named; a server without an expected program, a port nobody
listens on, and a wedged server (a socket that accepts and never answers) exit 1 within the time
limit.  Stand-in engines (test_serve_limits): a few seconds."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")

from test_serve_limits import Words, _server  # noqa: E402 - after the importorskips

from rkspeech.cli import main  # noqa: E402


def test_healthy_server_exits_0_and_names_its_programs(capsys, monkeypatch):
    st = _server(http=None)
    try:
        uri = st.addresses["wyoming"]
        assert main(["healthcheck", uri, "--expect", "asr", "tts"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"rkspeech healthcheck: healthy: {uri}: asr rkspeech-whisper (whisper), "
                              "tts rkspeech-speech (1 voice); info in "), out
        monkeypatch.setenv("RKSPEECH_WYOMING", uri.replace("127.0.0.1", "0.0.0.0"))  # serve's variable, a wildcard
        assert main(["healthcheck", "-q"]) == 0 and capsys.readouterr().out == ""
    finally:
        st.stop()


def test_a_missing_program_or_no_server_exits_1(capsys, monkeypatch):
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    st = ServerThread(ServePool(speakers=[Words()], owned=False), ServeOptions(wyoming="tcp://127.0.0.1:0",
                                                                               http=None)).start()
    try:
        uri = st.addresses["wyoming"]
        assert main(["healthcheck", uri, "--expect", "tts"]) == 0
        assert main(["healthcheck", uri]) == 0  # at least one of asr / tts
        monkeypatch.setenv("RKSPEECH_ASR_MODEL_DIR", "models/base")  # serve's env file: asr is expected
        assert main(["healthcheck", uri]) == 1
        monkeypatch.delenv("RKSPEECH_ASR_MODEL_DIR")
        assert main(["healthcheck", uri, "--expect", "asr", "tts"]) == 1
    finally:
        st.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rkspeech healthcheck: unhealthy: {uri}: no asr program in its info "
                   "(it offers: tts rkspeech-speech (1 voice))"] * 2, err
    assert main(["healthcheck", uri]) == 1  # stopped: nobody listens
    assert "cannot connect (Connection refused)" in capsys.readouterr().err


def test_a_wedged_server_exits_1_within_the_timeout(capsys):
    """The kernel accepts into the backlog of a socket nobody reads: connected, never answered."""
    wedged = socket.socket()
    wedged.bind(("127.0.0.1", 0))
    wedged.listen(8)
    port = wedged.getsockname()[1]
    try:
        start = time.monotonic()
        assert main(["healthcheck", f"tcp://127.0.0.1:{port}", "--timeout", "0.5"]) == 1
        took = time.monotonic() - start
    finally:
        wedged.close()
    assert 0.5 <= took < 2.0, took
    assert "no info within 0.5 s of connecting" in capsys.readouterr().err


def test_bad_uri_is_a_usage_error(capsys):
    assert main(["healthcheck", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.strip() == \
        "rkspeech healthcheck: error: 'http://127.0.0.1:1': use tcp://HOST:PORT or unix://PATH"


def test_wait_retries_until_the_server_answers(capsys):
    """``--wait``: a server that starts listening 1 s after the check begins is healthy within it."""
    import threading

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    started = []

    def later():
        time.sleep(1.0)
        started.append(_server(http=None, wyoming=f"tcp://127.0.0.1:{port}"))

    t = threading.Thread(target=later)
    t.start()
    try:
        assert main(["healthcheck", f"tcp://127.0.0.1:{port}", "--wait", "10"]) == 0
    finally:
        t.join()
        for st in started:
            st.stop()
    assert "healthy" in capsys.readouterr().out
    assert main(["healthcheck", f"tcp://127.0.0.1:{port}", "--wait", "0.6"]) == 1  # stopped: retried, then 1


def test_a_unix_socket_server(tmp_path, capsys):
    path = tmp_path / "w.sock"
    st = _server(http=None, wyoming=f"unix://{path}")
    try:
        assert main(["healthcheck", f"unix://{path}", "--expect", "tts"]) == 0
    finally:
        st.stop()
    assert f"healthy: unix://{path}: " in capsys.readouterr().out
