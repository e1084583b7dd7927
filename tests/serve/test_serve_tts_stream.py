"""The Wyoming streaming-synthesis contract (issue 41, item 2), with the official ``wyoming``
client: ``synthesize-start``, ``synthesize-chunk``s that split words and sentences, Home
Assistant's compatibility ``synthesize``, ``synthesize-stop`` -> audio per sentence, each sentence
as soon as its end arrives (``audio-start`` .. ``audio-stop``, wyoming-piper's framing), then
``synthesize-stopped`` last.  Also: an empty stream, a refused stream, voices re-read on every
``describe``.  A stand-in engine (:class:`Sentences`) records what it was asked to say: a few
seconds."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")


class Sentences:
    """TEST DOUBLE of ``SpeechEngine``: records each text it is asked to say; one chunk per word,
    filled with a value of that word, so audio can be matched to its sentence."""

    sample_rate = 24000

    def __init__(self):
        self.speakers = ["alloy", "ryan"]
        self.languages = ["en"]
        self.asked: list[str] = []

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        self.asked.append(text)
        for word in text.split():
            yield np.full(240, (sum(map(ord, word)) % 100) / 200, np.float32)

    @staticmethod
    def pcm(text) -> bytes:
        from rkspeech.serve.audio import float_to_pcm16

        return b"".join(float_to_pcm16(c) for c in Sentences().stream(text))


@pytest.fixture()
def served():
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    engine = Sentences()
    st = ServerThread(ServePool(speakers=[engine], owned=False),
                      ServeOptions(wyoming="tcp://127.0.0.1:0", http=None)).start()
    host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
    yield engine, host, int(port)
    st.stop()


async def _until(client, *types):
    """Events up to and including the first of ``types``."""
    events = []
    while True:
        event = await asyncio.wait_for(client.read_event(), 10)
        assert event is not None, [e.type for e in events]
        events.append(event)
        if event.type in types:
            return events


def _sentences(events) -> list[bytes]:
    """The audio of each audio-start .. audio-stop, checking the framing."""
    out, current = [], None
    for e in events:
        if e.type == "audio-start":
            assert current is None, "audio-start inside audio"
            assert (e.data["rate"], e.data["width"], e.data["channels"]) == (24000, 2, 1)
            current = b""
        elif e.type == "audio-chunk":
            current += e.payload
        elif e.type == "audio-stop":
            out.append(current)
            current = None
    assert current is None, "audio-start without audio-stop"
    return out


def test_word_split_chunks_get_audio_per_sentence_as_each_ends(served):
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

    engine, host, port = served
    text = "Turn on the kit", "chen lig", "hts. Which ro", "om? The li", "ving room"

    async def go():
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="ryan")).event())
            for piece in text[:3]:
                await c.write_event(SynthesizeChunk(text=piece).event())
            # the first sentence is spoken before the rest of the text is sent
            first = await _until(c, "audio-stop")
            for piece in text[3:]:
                await c.write_event(SynthesizeChunk(text=piece).event())
            await c.write_event(Synthesize(text="".join(text), voice=SynthesizeVoice(name="ryan")).event())
            await c.write_event(SynthesizeStop().event())
            rest = await _until(c, "synthesize-stopped")
        return first, rest

    first, rest = asyncio.run(go())
    said = ["Turn on the kitchen lights.", "Which room?", "The living room"]
    assert engine.asked == said  # the compatibility synthesize was not spoken again
    assert _sentences(first) == [Sentences.pcm(said[0])]
    assert _sentences(rest) == [Sentences.pcm(s) for s in said[1:]]
    assert rest[-1].type == "synthesize-stopped" and rest[-2].type == "audio-stop"
    assert "error" not in [e.type for e in first + rest]


def test_empty_and_refused_streams_still_end_with_synthesize_stopped(served):
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

    engine, host, port = served

    async def go():
        async with AsyncTcpClient(host, port) as c:
            await c.write_event(SynthesizeStart().event())
            await c.write_event(SynthesizeChunk(text="  ").event())
            await c.write_event(SynthesizeStop().event())
            empty = await _until(c, "synthesize-stopped")
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nova")).event())
            for piece in ("One. Tw", "o. Three"):
                await c.write_event(SynthesizeChunk(text=piece).event())
            await c.write_event(SynthesizeStop().event())
            refused = await _until(c, "synthesize-stopped")
        return empty, refused

    empty, refused = asyncio.run(go())
    assert [e.type for e in empty] == ["synthesize-stopped"]
    assert [e.type for e in refused] == ["error", "synthesize-stopped"]  # one error, then the end
    assert "unknown voice 'nova'" in refused[0].data["text"]
    assert engine.asked == []


def test_voices_are_re_read_on_every_describe(served):
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe, Info

    engine, host, port = served

    async def describe(c):
        await c.write_event(Describe().event())
        return [v.name for v in Info.from_event((await _until(c, "info"))[-1]).tts[0].voices]

    async def go():
        async with AsyncTcpClient(host, port) as c:
            before = await describe(c)
            engine.speakers.append("vivian")  # e.g. a voice added to the model
            after = await describe(c)
        return before, after

    assert asyncio.run(go()) == (["alloy", "ryan"], ["alloy", "ryan", "vivian"])


class CustomVoice(Sentences):
    """TEST DOUBLE of a custom-voice engine: refuses to speak without a speaker, as
    ``models.qwen3_tts.generate`` does ("needs a speaker"); records the speaker of each request."""

    def __init__(self):
        super().__init__()
        self.voices: list[str | None] = []

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        from rkspeech.core.errors import RkspeechError

        self.voices.append(speaker)
        if speaker is None:
            raise RkspeechError(f"this custom-voice checkpoint needs a speaker; one of: {', '.join(self.speakers)}")
        yield from super().stream(text)


def test_a_synthesize_that_names_no_voice_gets_the_first_voice():
    """wyoming-bench (PyPI 2026.10.0) sends ``synthesize`` and ``synthesize-start`` with no voice, as
    Home Assistant does when no voice is picked (wyoming-piper then speaks its default voice):
    each is spoken in the engine's first voice, plain and streamed (it was an ``error``:
    "needs a speaker")."""
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    engine = CustomVoice()
    st = ServerThread(ServePool(speakers=[engine], owned=False), ServeOptions(wyoming="tcp://127.0.0.1:0", http=None))
    host, port = st.start().addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

    async def go():
        async with AsyncTcpClient(host, int(port)) as c:
            await c.write_event(Synthesize(text="Lights on.").event())
            plain = await _until(c, "audio-stop", "error")
            await c.write_event(SynthesizeStart().event())
            await c.write_event(SynthesizeChunk(text="Lights off. ").event())
            await c.write_event(SynthesizeStop().event())
            streamed = await _until(c, "synthesize-stopped")
        return plain, streamed

    try:
        plain, streamed = asyncio.run(go())
    finally:
        st.stop()
    assert "error" not in [e.type for e in plain + streamed], [e.data for e in plain + streamed if e.type == "error"]
    assert _sentences(plain) == [Sentences.pcm("Lights on.")]
    assert _sentences(streamed) == [Sentences.pcm("Lights off.")]
    assert engine.voices == ["alloy", "alloy"]


class Multilingual(Sentences):
    """TEST DOUBLE of a Qwen3-TTS engine's languages (the model's names, ``TTSConfig.languages``);
    records the language of each request."""

    def __init__(self):
        super().__init__()
        self.languages = ["auto", "chinese", "english", "german", "klingon"]
        self.said_in: list[str | None] = []
        self.voices_asked: list[str | None] = []

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        self.said_in.append(language)
        self.voices_asked.append(speaker)
        yield from super().stream(text)


def test_voices_list_language_codes_and_a_code_is_understood():
    """Home Assistant offers a Wyoming TTS for a pipeline's language only if a voice lists that code
    (``en``; its Wyoming TTS entity takes ``voice.languages`` as they are), so the model's language
    names are advertised as ISO 639-1 codes ("auto" is no language; an unknown name stays as it
    is), and a request's code -- ``en``, ``en_US``, ``de-DE`` -- or name reaches the engine as the
    model's name.  (It listed ``auto, chinese, english, german`` and refused ``en``.)"""
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe, Info
    from wyoming.tts import Synthesize, SynthesizeVoice

    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    engine = Multilingual()
    st = ServerThread(ServePool(speakers=[engine], owned=False), ServeOptions(wyoming="tcp://127.0.0.1:0", http=None))
    host, port = st.start().addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

    async def go():
        async with AsyncTcpClient(host, int(port)) as c:
            await c.write_event(Describe().event())
            info = Info.from_event((await _until(c, "info"))[-1])
            answers = []
            for language in ("en", "en_US", "de-DE", "german", None):
                # the protocol's voice is a name (and speaker) or a language alone
                await c.write_event(Synthesize(text="Hello.", voice=SynthesizeVoice(language=language)).event())
                answers.append([e.type for e in await _until(c, "audio-stop", "error")])
        return info, answers

    try:
        info, answers = asyncio.run(go())
    finally:
        st.stop()
    assert {tuple(v.languages) for v in info.tts[0].voices} == {("zh", "en", "de", "klingon")}
    assert all(a[-1] == "audio-stop" for a in answers), answers
    assert engine.said_in == ["english", "english", "german", "german", None]
    assert engine.voices_asked == ["alloy"] * 5  # a language alone: the first voice speaks it
