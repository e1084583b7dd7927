"""``rkspeech serve`` under hostile-but-honest clients (issue 30): descriptors, stalled bodies, one
memory budget, a non-reading client, clients that leave.  No Whisper model: the engines are
stand-ins (:class:`Words`, :class:`CountingTranscriber`), so what is checked is the server's
limits, fast (short timeouts)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time
import wave

import numpy as np
import pytest

pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")


class Words:
    """TEST DOUBLE of ``SpeechEngine``: ``samples`` of silence per word; a voice must be one of
    :attr:`voices` (checked in ``stream``, as a custom-voice model does, while ``speakers`` is
    empty so the server's own check lets it through)."""

    sample_rate = 24000
    languages: list = []

    def __init__(self, samples: int = 1200, speakers=(), voices=("ryan",)):
        self.samples, self.speakers, self.voices = samples, list(speakers), voices

    produced = 0  # chunks made, all streams together

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        from rkspeech.core.errors import RkspeechError

        if speaker is not None and speaker not in self.voices:
            raise RkspeechError(f"unknown speaker {speaker!r}")
        for _ in text.split():
            self.produced += 1
            yield np.full(self.samples, 0.1, np.float32)


class CountingTranscriber:
    """TEST DOUBLE of a faster-whisper model: counts the transcriptions it was asked for."""

    class model:
        is_multilingual = False

    def __init__(self):
        self.calls = 0

    def transcribe(self, audio, **options):
        from types import SimpleNamespace

        self.calls += 1
        return iter([]), SimpleNamespace(language="en", language_probability=1.0, duration=len(audio) / 16000)


class SlowSegments(CountingTranscriber):
    """TEST DOUBLE of a faster-whisper model decoding a long input: ``n`` segments of ``text``,
    ``each_s`` apart; :attr:`produced` counts the segments decoded."""

    def __init__(self, n: int = 200, each_s: float = 0.05, text: str = " word"):
        super().__init__()
        self.n, self.each_s, self.text, self.produced = n, each_s, text, 0

    def transcribe(self, audio, **options):
        _, info = super().transcribe(audio, **options)

        def segments():
            from types import SimpleNamespace

            for i in range(self.n):
                time.sleep(self.each_s)
                self.produced += 1
                yield SimpleNamespace(text=self.text)
        return segments(), info


def _wav(seconds: float = 0.5) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.zeros(int(16000 * seconds), np.int16).tobytes())
    return buf.getvalue()


def _server(**kw):
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    pool = ServePool(transcribers=[kw.pop("transcriber", CountingTranscriber())],
                     speakers=[kw.pop("speaker", Words())], max_queue=4, owned=False,
                     request_timeout_s=kw.get("request_timeout_s", 300.0))  # as rkspeech serve builds it
    return ServerThread(pool, ServeOptions(**{"wyoming": "tcp://127.0.0.1:0", "http": "127.0.0.1:0", **kw})).start()


def _hostport(st, kind):
    host, port = st.addresses[kind].removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def _post_head(path: str, length: int, ctype: str = "multipart/form-data; boundary=x") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {ctype}\r\ncontent-length: {length}\r\n\r\n").encode()


def _reply(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


# -- descriptors -------------------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import asyncio, json, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    sys.path.insert(0, sys.argv[1])
    from test_serve_limits import Words
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import Server, serve_forever
    options = ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", max_connections=5000,
                           header_timeout_s=2.0, idle_timeout_s=2.0)
    server = Server(ServePool(speakers=[Words()], owned=False), options)
    asyncio.run(serve_forever(server, on_ready=lambda a: print(json.dumps(a), flush=True)))
""")


def test_2000_idle_connections_at_a_1024_descriptor_limit_leave_health_answering(tmp_path):
    """The server runs with RLIMIT_NOFILE 1024 and asks for --max-connections 5000: the cap is lowered
    to 864, 432 per front end; 1,000 idle HTTP and 1,000 idle Wyoming connections: those over a share are answered and
    closed at once (no accept fails for want of a descriptor), the rest are closed by the header /
    idle timeouts (2 s), and /health answers within a few seconds; refusals are logged once per
    interval, not once per connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4200:
        pytest.skip(f"this test opens 2,000+ sockets; the hard descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4200), hard))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, os.path.dirname(__file__)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    socks = []
    try:
        addresses = json.loads(proc.stdout.readline())
        http = addresses["http"].rsplit(":", 1)
        wy = addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
        for i in range(2000):
            s = socket.socket()
            s.settimeout(10)
            s.connect((http[0], int(http[1])) if i % 2 else (wy[0], int(wy[1])))
            socks.append(s)
        start = time.monotonic()
        health = None
        while time.monotonic() - start < 15:
            try:
                health = httpx.get(f"http://{addresses['http']}/health", timeout=2)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        waited = time.monotonic() - start
        replies = [_reply(s, 0.5) for s in socks[-200:]]  # the newest: over the cap
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert health is not None and health.status_code == 200, (health, err[-2000:])
    assert waited < 8, waited
    assert sum(b"503 Service Unavailable" in r for r in replies[1::2]) == 100, (replies[:4], err[-3000:])  # HTTP: a clear 503
    assert sum(b"too-many-connections" in r for r in replies[0::2]) == 100  # Wyoming: an error event
    assert "out of system resource" not in err and "Traceback" not in err, err[-2000:]
    for front_end in ("http", "wyoming"):  # once per 10 s, not per accept
        assert 1 <= err.count(f"{front_end} connection(s) over its share of 432 open") <= 3, err[-2000:]


# -- bodies and the memory budget --------------------------------------------------------------------


def test_stalled_uploads_are_cut_by_the_body_timeout_and_count_against_the_budget():
    """20 uploads declaring 1 MB send 64 KB and stall: they are held in the budget (1 MB) until it is full,
    then refused with 503 at once; every stalled one is answered 408 after --body-timeout (1.5 s),
    and the budget is whole again."""
    st = _server(body_timeout_s=1.5, header_timeout_s=5, memory_budget_bytes=1_000_000,
                 max_upload_bytes=2 * 1024 * 1024)
    host, port = _hostport(st, "http")
    socks = []
    try:
        start = time.monotonic()
        for _ in range(20):
            s = socket.create_connection((host, port))
            s.sendall(_post_head("/v1/audio/transcriptions", 1024 * 1024) + b"\0" * 65536)
            socks.append(s)
            time.sleep(0.01)
        time.sleep(0.3)
        held = st.server.limits.budget.used
        replies = [_reply(s, 4) for s in socks]
        took = time.monotonic() - start
        time.sleep(0.2)
        used_after = st.server.limits.budget.used
    finally:
        for s in socks:
            s.close()
        st.stop()
    cut = [r for r in replies if r.startswith(b"HTTP/1.1 408")]
    refused = [r for r in replies if r.startswith(b"HTTP/1.1 503")]
    assert len(cut) + len(refused) == 20, [r[:40] for r in replies]
    assert len(cut) == 1_000_000 // 65536 and held == len(cut) * 65536, (len(cut), held)
    assert all(b"--body-timeout" in r for r in cut) and all(b"over-budget" in r for r in refused)
    assert took < 1.5 + 3, took
    assert used_after == 0


def test_wyoming_audio_and_streamed_text_count_against_the_budget():
    """Budget 1 MB: one client buffers 0.9 MB of audio; a second one's audio and a streamed text past
    the rest are refused with over-budget errors; once the first client leaves, the budget is whole."""
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import SynthesizeChunk, SynthesizeStart

    st = _server(memory_budget_bytes=1_000_000, max_text_chars=500_000)
    host, port = _hostport(st, "wyoming")
    chunk = AudioChunk(rate=16000, width=2, channels=1, audio=b"\0" * 90_000).event()

    async def go():
        async with AsyncTcpClient(host, port) as a, AsyncTcpClient(host, port) as b:
            await a.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            for _ in range(10):
                await a.write_event(chunk)
            await a.write_event(AudioStart(rate=16000, width=2, channels=1).event())  # a new stream: back to 0
            for _ in range(10):
                await a.write_event(chunk)
            await asyncio.sleep(0.3)
            held = st.server.limits.budget.used
            await b.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await b.write_event(chunk)  # 0.99 MB in all: still within
            await b.write_event(chunk)
            audio_refused = await asyncio.wait_for(b.read_event(), 5)
            await b.write_event(SynthesizeStart().event())
            await b.write_event(SynthesizeChunk(text="no sentence end " * 10_000).event())
            text_refused = await asyncio.wait_for(b.read_event(), 5)
        await asyncio.sleep(0.3)
        return held, audio_refused, text_refused, st.server.limits.budget.used

    try:
        held, audio_refused, text_refused, after = asyncio.run(go())
    finally:
        st.stop()
    assert held == 900_000
    for e in (audio_refused, text_refused):
        assert e.type == "error" and e.data["code"] == "over-budget" and "--memory-budget-mb" in e.data["text"], e
    assert after == 0


def test_the_sentence_split_scans_each_character_once():
    from rkspeech.core.sentences import SENTENCE_END, SentenceSplitter

    text = "One sentence here. " * 20 + "x" * 20_000 + ". Last"
    splitter, got = SentenceSplitter(), []
    for i in range(0, len(text), 7):  # token-sized pieces
        got += splitter.feed(text[i:i + 7])
    assert got == SENTENCE_END.split(text)[:-1] and splitter.rest() == "Last"
    assert splitter.chars_scanned <= len(text) + 10  # a rescan of the buffer per piece: ~30 million


def test_decoded_audio_counts_against_the_budget_while_it_is_transcribed():
    """An upload's float32 samples are held until transcribed: 0.25 s of audio (8 KB of wav, 16 KB of
    samples) is charged body + samples while its SSE transcription runs; 1 s (32 KB of wav, 64 KB of
    samples, 96 KB held while decoding) passes an 80 KB budget on its own: 413, found while
    decoding (it can never fit: not "retry later").  Wyoming: 16-bit audio buffered
    + its float32 samples (3x) while transcribed.  The budget is whole afterwards."""
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    slow = SlowSegments(n=10, each_s=0.05)
    st = _server(transcriber=slow, memory_budget_bytes=80_000)
    url = f"http://{st.addresses['http']}/v1/audio/transcriptions"
    host, port = _hostport(st, "wyoming")

    async def wyoming():
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=b"\0" * 16_000).event())
            await c.write_event(AudioStop().event())
            used = 0
            for _ in range(20):  # the most held while the 0.5 s transcription runs
                await asyncio.sleep(0.02)
                used = max(used, st.server.limits.budget.used)
            while (await asyncio.wait_for(c.read_event(), 5)).type != "transcript":
                pass
        return used

    try:
        with httpx.stream("POST", url, timeout=10, files={"file": ("a.wav", _wav(0.25))},
                          data={"stream": "true"}) as r:
            lines = r.iter_lines()
            next(lines)
            during = st.server.limits.budget.used
            list(lines)
        time.sleep(0.1)
        after = st.server.limits.budget.used
        refused = httpx.post(url, timeout=10, files={"file": ("a.wav", _wav(1.0))})
        wyoming_during = asyncio.run(wyoming())
        time.sleep(0.1)
        wyoming_after = st.server.limits.budget.used
    finally:
        st.stop()
    assert 8_044 + 16_000 <= during < 8_044 + 16_000 + 1_000 and after == 0, (during, after)
    assert refused.status_code == 413 and "whole memory budget" in refused.json()["error"]["message"], refused.text
    assert wyoming_during == 3 * 16_000 and wyoming_after == 0, wyoming_during


# -- a client that does not read -----------------------------------------------------------------------


def test_a_wyoming_client_that_does_not_read_is_dropped_within_the_request_timeout():
    """A client with a 4 KB receive buffer asks for ~20 MB of speech and reads nothing: the server's
    writes stall; within --request-timeout (2 s) + a few s the connection is dropped and its handler
    gone, the engine idle, and another client is served.  Meanwhile the engine ran ahead of the
    client by at most RUN_AHEAD_BYTES, charged to the memory budget."""
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe
    from wyoming.tts import Synthesize

    from rkspeech.serve.engines import SPEECH
    from rkspeech.serve.limits import RUN_AHEAD_BYTES

    words = Words(samples=48_000)  # 192 KB chunks
    st = _server(speaker=words, request_timeout_s=2.0, max_text_chars=1000)
    host, port = _hostport(st, "wyoming")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect((host, port))
        event = Synthesize(text="w " * 450).event()  # 450 x 2 s of 24 kHz 16-bit: 43 MB
        s.sendall(json.dumps({"type": event.type, "data": event.data}).encode() + b"\n")
        start = time.monotonic()
        while not st.server.wyoming._tasks and time.monotonic() - start < 5:
            time.sleep(0.01)
        time.sleep(1.0)
        stalled = len(st.server.wyoming._tasks)  # still writing to the client after 1 s
        ahead, produced = st.server.limits.budget.used, words.produced
        while time.monotonic() - start < 15 and (st.server.wyoming._tasks or not st.pool.lanes[SPEECH].idle()):
            time.sleep(0.1)
        dropped_after = time.monotonic() - start
        tasks = len(st.server.wyoming._tasks)

        async def other():
            async with AsyncTcpClient(host, port) as c:
                await c.write_event(Describe().event())
                return await asyncio.wait_for(c.read_event(), 5)

        served = asyncio.run(other())
    finally:
        s.close()
        st.stop()
    assert stalled == 1 and tasks == 0 and 2.0 <= dropped_after < 2.0 + 4, (stalled, dropped_after)
    assert served.type == "info"
    # what runs ahead of the client stops at RUN_AHEAD_BYTES (4 MiB: 21 chunks), charged to the budget;
    # the engine waits (the socket buffers took ~30 chunks' 16-bit audio: 51 of 450 made, measured)
    assert 3_000_000 < ahead <= RUN_AHEAD_BYTES and produced < 150, (ahead, produced)


def test_a_wyoming_client_that_reads_too_slowly_is_dropped_at_the_request_deadline():
    """A client that takes 64 KB every 30 ms (~2 MB/s) asks for ~43 MB of speech: no single write
    waits --request-timeout (2 s), but the whole answer cannot be taken in time: the connection is
    reset at the request's deadline (+ a few s) -- not left open after a late ``timeout`` error."""
    from wyoming.tts import Synthesize

    st = _server(speaker=Words(samples=48_000), request_timeout_s=2.0, max_text_chars=1000)
    host, port = _hostport(st, "wyoming")
    s = socket.create_connection((host, port))
    try:
        event = Synthesize(text="w " * 450).event()
        s.sendall(json.dumps({"type": event.type, "data": event.data}).encode() + b"\n")
        start, got, closed = time.monotonic(), 0, False
        s.settimeout(0.5)
        while time.monotonic() - start < 8:
            try:
                data = s.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed = True
                break
            if not data:
                closed = True
                break
            got += len(data)
            time.sleep(0.03)
        took = time.monotonic() - start
    finally:
        s.close()
        st.stop()
    assert got > 1_000_000 and closed and took < 2.0 + 4, (got, closed, took)


def test_an_http_client_that_does_not_read_a_streamed_answer_is_dropped_within_the_request_timeout():
    """A raw HTTP client with a 4 KB receive buffer asks for ~10 MB of streamed speech (pcm) and reads
    nothing: uvicorn's send waits on the socket with no limit of its own; the server aborts the
    connection at the request's deadline (--request-timeout 2 s), the engine is idle, and another
    request is served, within 2 s + a few s.  Meanwhile the speech made ahead of the client counts
    against the memory budget (1 MB), and the engine waits once it is full."""
    from rkspeech.serve.engines import SPEECH

    words = Words(samples=24_000)  # 96 KB chunks
    st = _server(speaker=words, request_timeout_s=2.0, max_text_chars=1000, memory_budget_bytes=1_000_000)
    host, port = _hostport(st, "http")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect((host, port))
        body = json.dumps({"input": "w " * 450, "response_format": "pcm"}).encode()  # 450 x 1 s: 21.6 MB
        s.sendall(_post_head("/v1/audio/speech", len(body), "application/json") + body)
        start = time.monotonic()
        time.sleep(1.0)
        stalled = st.server.limits.gate.open  # still writing to the client after 1 s
        ahead, produced = st.server.limits.budget.used, words.produced
        while time.monotonic() - start < 15 and (st.server.limits.gate.open or not st.pool.lanes[SPEECH].idle()):
            time.sleep(0.1)
        dropped_after = time.monotonic() - start
        still_open = st.server.limits.gate.open
        served = httpx.post(f"http://{st.addresses['http']}/v1/audio/speech", timeout=10,
                            json={"input": "one two", "response_format": "pcm"})
    finally:
        s.close()
        st.stop()
    assert stalled == 1 and still_open == 0 and dropped_after < 2.0 + 4, (stalled, still_open, dropped_after)
    assert served.status_code == 200 and len(served.content) == 2 * 2 * 24_000
    # the speech made ahead of the client is charged and stops at the budget (1 MB: 10 chunks queued);
    # the engine waits (the socket buffers took ~60 chunks' 16-bit audio: 72 of 450 made, measured)
    assert 0 < ahead <= 1_000_000 and produced < 150, (ahead, produced)
    assert st.server.limits.budget.used == 0


def test_streamed_transcriptions_stop_between_segments_when_their_client_leaves():
    """SSE (HTTP stream=true) and Wyoming: a long transcription (200 segments, 10 s of decoding) whose
    segments have no text yet (silence: no partial is sent, so no write finds the client gone); the
    client gives up after 0.5 s and closes: the decoding stops at the next segment, the engine is
    free within a second, and far fewer than 200 segments were decoded."""
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    from rkspeech.serve.engines import TRANSCRIBE

    slow = SlowSegments(text="")
    st = _server(transcriber=slow)
    lane = st.pool.lanes[TRANSCRIBE]

    def stopped_after_leaving():
        left = time.monotonic()
        while not lane.idle() and time.monotonic() - left < 12:
            time.sleep(0.02)
        produced, slow.produced = slow.produced, 0
        return time.monotonic() - left, produced

    async def wyoming():
        host, port = _hostport(st, "wyoming")
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=b"\1\0" * 8000).event())
            await c.write_event(AudioStop().event())
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.read_event(), 0.5)

    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://{st.addresses['http']}/v1/audio/transcriptions", timeout=0.5,
                       files={"file": ("a.wav", _wav())}, data={"stream": "true"})
        sse = stopped_after_leaving()
        asyncio.run(wyoming())
        wy = stopped_after_leaving()
    finally:
        st.stop()
    for took, produced in (sse, wy):
        assert took < 1.0 and produced < 40, (sse, wy)


@pytest.mark.parametrize("stream", ["true", "false"])
def test_a_transcription_whose_client_left_before_it_reached_the_free_engine_gives_the_engine_back(
        monkeypatch, stream):
    """The upload is decoded slowly (0.8 s); the client gives up after 0.5 s and closes; then the
    request reaches the free engine: the lane hands it the engine just as the request learns
    that its client is gone.  The engine goes back at once (it was kept for good: the lane stayed
    busy, a later request waited in vain, and shutdown waited its whole grace time -- a full
    test run once failed so), nothing is decoded for nobody, and the next request is served."""
    import rkspeech.runtime.audio
    from rkspeech.serve.engines import TRANSCRIBE

    decode = rkspeech.runtime.audio.decode_audio

    def slow_decode(*args, **kw):
        time.sleep(0.8)
        return decode(*args, **kw)

    monkeypatch.setattr(rkspeech.runtime.audio, "decode_audio", slow_decode)  # before the app is built
    slow = SlowSegments(n=4, text="")
    st = _server(transcriber=slow, shutdown_grace_s=2.0)
    lane = st.pool.lanes[TRANSCRIBE]
    acquire, handed = lane.acquire, []

    async def counted(client=None):
        engine = await acquire(client)
        handed.append(engine)
        return engine

    lane.acquire = counted
    url = f"http://{st.addresses['http']}/v1/audio/transcriptions"
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, timeout=0.5, files={"file": ("a.wav", _wav())}, data={"stream": stream})
        start = time.monotonic()
        while not handed and time.monotonic() - start < 5:
            time.sleep(0.01)
        reached = time.monotonic()
        while not lane.idle() and time.monotonic() - reached < 3:
            time.sleep(0.01)
        freed_after, produced, calls, took = time.monotonic() - reached, slow.produced, slow.calls, len(handed)
        served = httpx.post(url, timeout=10, files={"file": ("a.wav", _wav())}) if lane.idle() else None
    finally:
        st.stop()
    assert took == 1 and freed_after < 1.0, (took, freed_after)  # it reached the engine, which came back
    assert produced == 0 and calls == 0, (produced, calls)  # nothing decoded for the client that left
    assert served.status_code == 200 and slow.calls == 1


# -- the minor items -----------------------------------------------------------------------------------


def _hold_engine(st, kind: str, release: threading.Event):
    """Hold the one engine of ``kind`` until ``release`` is set (a future of the holding task)."""

    async def hold():
        lane = st.pool.lanes[kind]
        engine = await lane.acquire()
        try:
            await asyncio.to_thread(release.wait, 30)
        finally:
            lane.release(engine)

    return st.submit(hold)


def test_a_transcription_whose_client_left_is_not_computed():
    """The one engine is held; a client uploads, gives up (1 s) and closes; when the engine is free
    again, that request is not transcribed."""
    from rkspeech.serve.engines import TRANSCRIBE

    counting = CountingTranscriber()
    st = _server(transcriber=counting)
    release = threading.Event()
    holder = _hold_engine(st, TRANSCRIBE, release)
    try:
        url = f"http://{st.addresses['http']}/v1/audio/transcriptions"
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, files={"file": ("a.wav", _wav())}, timeout=1.0)
        time.sleep(0.3)
        waiting = st.pool.status()[TRANSCRIBE]["waiting"]
        release.set()
        holder.result(10)
        time.sleep(0.3)
        served = httpx.post(url, files={"file": ("a.wav", _wav())}, timeout=10)
    finally:
        release.set()
        st.stop()
    assert waiting == 0  # it left the wait line when its client left
    assert served.status_code == 200 and counting.calls == 1  # only the second request was computed


def test_speech_whose_client_left_while_waiting_is_not_made():
    """The speech engine is held; a client asks for speech, gives up (1 s) and closes: its request
    leaves the wait line, and when the engine is free again, nothing is generated for it."""
    from rkspeech.serve.engines import SPEECH

    words = Words()
    st = _server(speaker=words)
    release = threading.Event()
    holder = _hold_engine(st, SPEECH, release)
    try:
        url = f"http://{st.addresses['http']}/v1/audio/speech"
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json={"input": "one two three", "response_format": "pcm"}, timeout=1.0)
        time.sleep(0.3)
        waiting = st.pool.status()[SPEECH]["waiting"]
        release.set()
        holder.result(10)
        time.sleep(0.3)
        produced = words.produced
    finally:
        release.set()
        st.stop()
    assert waiting == 0 and produced == 0, (waiting, produced)


def test_empty_api_key_is_refused(capsys, monkeypatch):
    from rkspeech.cli import main

    assert main(["serve", "--tts-model-dir", "x", "--api-key", ""]) == 2
    err = capsys.readouterr().err
    assert "--api-key is empty" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("RKSPEECH_API_KEY", "from-env")
    assert main(["serve", "--tts-model-dir", "x", "--api-key", " "]) == 2  # the flag wins, and is refused
    assert "--api-key is empty" in capsys.readouterr().err


def test_voice_default_and_unknown_voices():
    """``voice: "default"`` is the engine's first voice on a model with voices (a custom-voice model
    needs one); a Wyoming synthesize whose voice the engine refuses gets an error and no audio-start."""
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeVoice

    from rkspeech.serve.speech import SpeakRequest

    assert SpeakRequest.checked(Words(speakers=["ryan", "vivian"]), "hi", speaker="default", max_chars=10).speaker \
        == "ryan"
    assert SpeakRequest.checked(Words(), "hi", speaker="default", max_chars=10).speaker is None
    st = _server()
    host, port = _hostport(st, "wyoming")

    async def go():
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(Synthesize(text="one two", voice=SynthesizeVoice(name="nova")).event())
            first = await asyncio.wait_for(c.read_event(), 5)
            await c.write_event(Synthesize(text="one two", voice=SynthesizeVoice(name="ryan")).event())
            rest = [await asyncio.wait_for(c.read_event(), 5) for _ in range(4)]
        return first, rest

    try:
        first, rest = asyncio.run(go())
    finally:
        st.stop()
    assert first.type == "error" and "unknown speaker 'nova'" in first.data["text"], first
    assert [e.type for e in rest] == ["audio-start", "audio-chunk", "audio-chunk", "audio-stop"]


# -- issue 37 -------------------------------------------------------------------------------------------


def _wyoming_lines(host, port, lines: list[bytes], replies: int, timeout: float = 5.0) -> list[dict]:
    """Send raw event header lines on one connection; the first ``replies`` event headers back."""
    s = socket.create_connection((host, port))
    try:
        s.sendall(b"".join(lines))
        s.settimeout(timeout)
        buf, got = b"", []
        while len(got) < replies:
            while b"\n" not in buf:
                chunk = s.recv(65536)
                assert chunk, got
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            header = json.loads(line)
            length = header.get("data_length") or 0
            while len(buf) < length:
                buf += s.recv(65536)
            header["data"] = json.loads(buf[:length]) if length else {}
            buf = buf[length:]
            got.append(header)
        return got
    finally:
        s.close()


def test_metrics_labels_do_not_come_from_what_clients_send():
    """Issue 37 item 3: made-up Wyoming event types (40 of 10 KB, and one that is not valid UTF-8)
    are answered with errors and counted as one ``other`` endpoint: /metrics stays 200 and does not
    grow with them; every label value of every metric is one the server lists."""
    from prometheus_client.parser import text_string_to_metric_families

    from rkspeech.serve.metrics import ENDPOINTS, HTTP_ROUTES, OTHER

    st = _server()
    host, port = _hostport(st, "wyoming")
    url = f"http://{st.addresses['http']}/metrics"
    try:
        first = _wyoming_lines(host, port, [b'{"type": "made-up"}\n'], 1)
        httpx.get(url, timeout=10)  # /metrics itself is counted from the next scrape on
        before = httpx.get(url, timeout=10)
        lines = [json.dumps({"type": f"{i:03d}" + "x" * 10_000}).encode() + b"\n" for i in range(40)]
        lines.append(b'{"type": "\\ud800"}\n')
        errors = _wyoming_lines(host, port, lines, len(lines))
        for path in ("/" + "p" * 10_000, "/v1/audio/%ED%A0%80", "/v1/models/x"):  # HTTP paths not routed: 404, not counted
            assert httpx.get(url.replace("/metrics", path), timeout=10).status_code == 404
        after = httpx.get(url, timeout=10)
        routes = {r.path for r in st.server.http._server.config.app.routes}
    finally:
        st.stop()
    assert first[0]["type"] == "error" and all(e["type"] == "error" for e in errors), errors[-1]
    assert before.status_code == 200 and after.status_code == 200, after.text[:200]
    assert len(after.content) - len(before.content) < 50, (len(before.content), len(after.content))
    families = {f.name: f for f in text_string_to_metric_families(after.text)}
    requests = [s for s in families["rkspeech_requests"].samples if s.name == "rkspeech_requests_total"]
    assert {s.labels["endpoint"] for s in requests} <= ENDPOINTS | {OTHER}
    assert [s.value for s in requests if s.labels["endpoint"] == OTHER] == [42.0]
    assert routes == set(HTTP_ROUTES)  # every route is counted under its own name


def _error_codes() -> dict[str, str]:
    """Every error code the server's source answers with -> where: a ``code = "..."`` class
    attribute, the code argument of ``HttpError(...)`` / ``.error(text, code)``, a ``"code": "..."``
    in a prepared answer (bytes or text)."""
    import ast
    import re
    from pathlib import Path

    import rkspeech.serve

    codes = {}
    for path in sorted(Path(rkspeech.serve.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            found = []
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                found.append(node.value)
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "HttpError" and len(node.args) == 3:
                    found.append(node.args[2])
                elif name == "error" and len(node.args) >= 2:
                    found.append(node.args[1])
            elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                text = node.value.decode() if isinstance(node.value, bytes) else node.value
                codes.update({c: f"{path.name}:{node.lineno}" for c in re.findall(r'"code": "([^"]*)"', text)})
            for value in found:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    codes[value.value] = f"{path.name}:{node.lineno}"
    return codes


def test_every_error_code_is_spelled_one_way():
    """Annoyance of issue 37: HTTP answered ``bad_request`` where Wyoming and the error classes said
    ``bad-request``.  Every code the server answers with is lower-case words joined by hyphens
    (the spelling most codes had)."""
    import re

    codes = _error_codes()
    assert {"bad-request", "over-budget", "too-many-connections", "malformed-event", "invalid-api-key"} <= set(codes)
    bad = {c: where for c, where in codes.items() if not re.fullmatch(r"[a-z]+(-[a-z]+)*", c)}
    assert not bad, bad


def test_idle_wyoming_sockets_do_not_lock_out_http(caplog):
    """Issue 37 item 4: 300 idle sockets to the keyless Wyoming port of a server with an API key
    and the default --max-connections (256: 128 per front end): /health and an authenticated
    request are still answered at once; a refused client that sends ``describe`` on connecting
    (as Home Assistant does) reads the documented error event, not a reset; the log counts every
    refusal."""
    import logging
    import re

    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe

    st = _server(api_key="k3y")
    host, port = _hostport(st, "wyoming")
    share = st.server.limits.gate.shares["wyoming"]
    socks = []

    async def refused_client():
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(Describe().event())
            return await asyncio.wait_for(c.read_event(), 5)

    caplog.set_level(logging.WARNING, logger="rkspeech.serve")
    try:
        for _ in range(300):
            socks.append(socket.create_connection((host, port)))
        base = f"http://{st.addresses['http']}"
        health = httpx.get(f"{base}/health", timeout=3)
        models = httpx.get(f"{base}/v1/models", timeout=3, headers={"Authorization": "Bearer k3y"})
        lingering = st.server.wyoming._lingering
        while lingering[0]:  # the burst's refusals are closed (a burst past REFUSED_LINGERING closes at once)
            time.sleep(0.05)
        async def refused_clients():  # a reset is a race: five clients at once
            return await asyncio.gather(*(refused_client() for _ in range(5)))

        events = asyncio.run(refused_clients())
        wyoming_open = st.server.limits.gate._open["wyoming"]
    finally:
        for s in socks:
            s.close()
        st.stop()
    assert (share, wyoming_open) == (128, 128)
    assert health.status_code == 200 and models.status_code == 200, (health.text, models.text)
    assert all(e is not None and e.type == "error" and e.data["code"] == "too-many-connections" for e in events), events
    logged = [int(n) for n in re.findall(r"refused (\d+) wyoming connection", caplog.text)]
    assert sum(logged) == 300 - 128 + 5 and len(logged) <= 3, caplog.text


_SIGNAL_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from test_serve_limits import Words
    import rkspeech.cli.serve as serve

    class Slow(Words):
        def stream(self, text, **kw):
            for chunk in super().stream(text, **kw):
                time.sleep(0.1)
                yield chunk

    serve._open_speaker = lambda args, masks=None: Slow()  # the CLI as it is, with a stand-in engine
    from rkspeech.cli import main
    sys.exit(main(["serve", "--tts-model-dir", "stand-in", "--http", "127.0.0.1:0", "--wyoming", "off",
                   "--max-queue", "2"]))
""")


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_every_ending_signal_stops_serve_gracefully(sig):
    """Issue 37 item 5: ``rkspeech serve`` gets SIGHUP, SIGTERM or SIGINT while it streams an answer
    (20 chunks, 0.1 s each) and another request waits for the engine: the stream completes, the
    waiting request gets a JSON 503 ``shutting-down``, the process exits 0 with no traceback
    (SIGHUP once cut the stream, answered the waiting request with a plain-text 500 and exited 129)."""
    import signal

    env = {**os.environ, "PYTHONPATH": os.getcwd(), "RKSPEECH_API_KEY": ""}
    proc = subprocess.Popen([sys.executable, "-c", _SIGNAL_CHILD, os.path.dirname(__file__)],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        address = None
        while address is None:
            line = proc.stderr.readline()
            assert line, proc.wait(10)
            if " http on " in line:
                address = line.split(" http on ")[1].strip()
        url = f"http://{address}/v1/audio/speech"
        waiting = {}

        def wait_behind():
            waiting["response"] = httpx.post(url, json={"input": "one", "response_format": "pcm"}, timeout=30)

        with httpx.stream("POST", url, json={"input": "w " * 20, "response_format": "pcm"}, timeout=30) as r:
            chunks = r.iter_bytes()
            got = len(next(chunks))
            behind = threading.Thread(target=wait_behind)
            behind.start()
            time.sleep(0.3)  # it waits for the engine
            proc.send_signal(getattr(signal, sig))
            got += sum(len(c) for c in chunks)
        behind.join(30)
        rc = proc.wait(30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got == 20 * 1200 * 2, got  # the whole answer: 20 chunks of 1200 16-bit samples
    assert waiting["response"].status_code == 503, waiting["response"].text
    assert waiting["response"].json()["error"]["code"] == "shutting-down"
    assert rc == 0 and "Traceback" not in err and "stopped (all requests finished)" in err, (rc, err[-2000:])


def test_wyoming_requests_whose_client_left_while_waiting_are_dropped():
    """Issue 37 item 10: the one engine of each kind is held; a Wyoming client asks for speech,
    another for a transcription, and both close after 0.3 s: each request leaves the wait line
    while the engine is still held, nothing is computed for it when the engine is free again, and
    each is counted (``client-gone``)."""
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.tts import Synthesize

    from rkspeech.serve.engines import GONE_POLL_S, SPEECH, TRANSCRIBE

    words, counting = Words(), CountingTranscriber()
    st = _server(speaker=words, transcriber=counting)
    host, port = _hostport(st, "wyoming")
    release = threading.Event()
    holders = [_hold_engine(st, kind, release) for kind in (SPEECH, TRANSCRIBE)]

    def line(event) -> bytes:
        data = json.dumps(event.data).encode()
        header = {"type": event.type, "data_length": len(data)}
        if event.payload:
            header["payload_length"] = len(event.payload)
        return json.dumps(header).encode() + b"\n" + data + (event.payload or b"")

    try:
        speak = socket.create_connection((host, port))
        speak.sendall(line(Synthesize(text="one two three").event()))
        listen = socket.create_connection((host, port))
        listen.sendall(b"".join(line(e) for e in (AudioStart(rate=16000, width=2, channels=1).event(),
                                                   AudioChunk(rate=16000, width=2, channels=1, audio=b"\0" * 3200).event(),
                                                   AudioStop().event())))
        time.sleep(0.3)
        queued = {kind: v["waiting"] for kind, v in st.pool.status().items()}
        speak.close(), listen.close()
        time.sleep(0.1 + 3 * GONE_POLL_S)
        left = {kind: v["waiting"] for kind, v in st.pool.status().items()}
        release.set()
        for h in holders:
            h.result(10)
        time.sleep(0.3)
        metrics = httpx.get(f"http://{st.addresses['http']}/metrics", timeout=10).text
    finally:
        release.set()
        st.stop()
    assert queued == {SPEECH: 1, TRANSCRIBE: 1} and left == {SPEECH: 0, TRANSCRIBE: 0}, (queued, left)
    assert words.produced == 0 and counting.calls == 0, (words.produced, counting.calls)
    for endpoint in ("wyoming synthesize", "wyoming audio-stop"):
        assert f'rkspeech_requests_total{{endpoint="{endpoint}",status="client-gone"}} 1.0' in metrics, metrics


def test_a_body_declared_too_large_is_read_before_the_413():
    """A client that declares 1 MB + 10 bytes over a 1 MB limit and then sends them (as the openai
    client does) gets the 413, not a reset: the server reads and drops such a body first (at most
    4x the limit, for at most 5 s); one declaring far more is refused at once."""
    st = _server(max_upload_bytes=1024 * 1024)
    host, port = _hostport(st, "http")
    try:
        s = socket.create_connection((host, port))
        s.sendall(_post_head("/v1/audio/transcriptions", 1024 * 1024 + 10))
        time.sleep(0.3)  # the server has the head; a server that answers and closes now resets what follows
        for _ in range(16):
            s.sendall(b"\0" * 65536)
        s.sendall(b"\0" * 10)
        reply = _reply(s, 10)
        s.close()
        start = time.monotonic()
        s = socket.create_connection((host, port))
        s.sendall(_post_head("/v1/audio/transcriptions", 100 * 1024 * 1024))
        huge = _reply(s, 10)
        s.close()
        took = time.monotonic() - start
    finally:
        st.stop()
    assert reply.startswith(b"HTTP/1.1 413") and b"limit is 1048576" in reply, reply[:200]
    assert huge.startswith(b"HTTP/1.1 413") and took < 2, (huge[:80], took)
