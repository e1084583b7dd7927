"""``/v1/audio/speech`` in every OpenAI format, ``speed``, ``stream_format="sse"`` and
``/v1/models``, with the official ``openai`` client on loopback, over the deterministic
``ToneSpeaker`` TEST DOUBLE (tests/serve/test_serve.py): what is checked is the encoding and the
streaming, not a voice.  The reference is the wav path's 16-bit samples."""

from __future__ import annotations

import base64
import io
import json
import time

import numpy as np
import pytest

pytest.importorskip("av")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from test_serve import ToneSpeaker  # noqa: E402 - after the importorskips

TEXT = " ".join(f"word{i} sound{i % 7} tone{i % 5}" for i in range(12))  # 36 words, 1.8 s


class TimedTone(ToneSpeaker):
    """ToneSpeaker that records when it yielded its last chunk."""

    last_chunk_at = 0.0

    def stream(self, text, **kw):
        for chunk in super().stream(text, **kw):
            TimedTone.last_chunk_at = time.monotonic()
            yield chunk


@pytest.fixture(scope="module")
def client():
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    pool = ServePool(speakers=[TimedTone(delay_s=0.01)], max_queue=2, owned=False)
    st = ServerThread(pool, ServeOptions(wyoming=None, http="127.0.0.1:0", max_text_chars=1000)).start()
    yield openai.OpenAI(base_url=f"http://{st.addresses['http']}/v1", api_key="unused", max_retries=0, timeout=60)
    assert st.stop()


def _decode(data: bytes) -> tuple[np.ndarray, int]:
    import av

    with av.open(io.BytesIO(data)) as f:
        rate = f.streams.audio[0].rate
        frames = [fr.to_ndarray().reshape(-1) for fr in f.decode(audio=0)]
    pcm = np.concatenate(frames)
    return (pcm.astype(np.float64) if pcm.dtype == np.int16 else pcm * 32768.0), rate


def _snr_db(ref: np.ndarray, test: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - test) ** 2)))


def test_every_format_decodes_to_the_wav_path(client):
    from rkspeech.serve.speech_formats import ENCODER_DELAY

    wav = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="wav").read()
    ref = np.frombuffer(wav[44:], "<i2").astype(np.float64)
    assert ref.size == len(TEXT.split()) * 1200
    mp3 = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)  # no format: mp3, as OpenAI
    assert mp3.response.headers["content-type"] == "audio/mpeg"
    got, rate = _decode(mp3.read())
    assert rate == 24000
    lag = max(range(2000), key=lambda k: float(np.dot(got[k:k + 12000], ref[:12000])))
    assert lag == ENCODER_DELAY["mp3"]  # the stated priming delay (no gapless tag in a stream)
    body = got[lag:]
    assert 0 <= body.size - ref.size < 576  # same length within one frame (576 samples at 24 kHz)
    assert _snr_db(ref, body[:ref.size]) >= 25.0
    flac, rate = _decode(client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT,
                                                    response_format="flac").read())
    assert rate == 24000 and np.array_equal(flac, ref)  # lossless: bit-exact
    aac, rate = _decode(client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT,
                                                   response_format="aac").read())
    assert rate == 24000 and abs(aac.size - ENCODER_DELAY["aac"] - ref.size) < 1024
    assert _snr_db(ref, aac[ENCODER_DELAY["aac"]:][:ref.size]) > 15.0
    opus, rate = _decode(client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT,
                                                    response_format="opus").read())
    assert rate == 48000 and opus.size == 2 * ref.size  # Ogg's pre-skip is honoured: exact length
    with pytest.raises(openai.BadRequestError, match="response_format 'ogg' is not served; use one of mp3, opus"):
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="ogg")


def test_speech_streams_before_the_last_chunk_is_generated(client):
    began = time.monotonic()
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT) as response:
        pieces = response.iter_bytes()
        first = next(pieces)
        first_at = time.monotonic()
        rest = b"".join(pieces)
    assert first and rest
    assert first_at < TimedTone.last_chunk_at, (first_at - began, TimedTone.last_chunk_at - began)


def test_speed_keeps_pitch_and_bad_values_are_one_line_400s(client):
    def pcm(**kw):
        data = client.audio.speech.create(model="tts-1", voice="alloy", input="steady " * 20, response_format="pcm",
                                          **kw).read()
        return np.frombuffer(data, "<i2").astype(np.float64)

    def pitch(x):
        spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
        return np.fft.rfftfreq(x.size, 1 / 24000)[int(np.argmax(spectrum))]

    normal, fast, slow = pcm(), pcm(speed=2.0), pcm(speed=0.5)
    assert abs(2 * fast.size - normal.size) < 1200 and abs(slow.size - 2 * normal.size) < 1200  # within 50 ms
    # atempo keeps the pitch (resampling would move it by an octave): within 5 %
    assert abs(pitch(fast) / pitch(normal) - 1) < 0.05 and abs(pitch(slow) / pitch(normal) - 1) < 0.05
    for bad, message in ((5, "speed 5 is out of range; give a number from 0.25 to 4.0"),
                         ("fast", "speed 'fast' is out of range"),
                         ):
        with pytest.raises(openai.BadRequestError, match=message) as err:
            client.audio.speech.create(model="tts-1", voice="alloy", input="hi", speed=bad)
        assert "\n" not in err.value.message
    with pytest.raises(openai.BadRequestError, match=r"response_format \['mp3'\] is not served"):
        client.audio.speech.create(model="tts-1", voice="alloy", input="hi", extra_body={"response_format": ["mp3"]})
    with pytest.raises(openai.BadRequestError, match="stream_format 'chunks' is not one of audio, sse"):
        client.audio.speech.create(model="tts-1", voice="alloy", input="hi", extra_body={"stream_format": "chunks"})


def test_sse_stream_carries_the_same_audio(client):
    wav = client.audio.speech.create(model="tts-1", voice="ryan", input=TEXT, response_format="wav").read()
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="ryan", input=TEXT,
                                                             response_format="wav", stream_format="sse") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-1:]] == ["speech.audio.done"] and len(events) > 3
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == wav


def test_models_lists_voices_languages_and_formats(client):
    (model,) = client.models.list().data
    extra = model.model_dump()
    assert extra["voices"] == ["alloy", "ryan"] and extra["languages"] == ["en", "de"]
    assert extra["response_formats"] == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
    assert extra["stream_formats"] == ["audio", "sse"] and extra["speed"] == [0.25, 4.0]
