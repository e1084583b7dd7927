"""The clients of ``bench_serve.py``: asyncio coroutines that repeat one request until a deadline,
check every answer against what the library path gave for the same input before the load, and
time what a voice assistant feels.

* ``http_asr``: the official ``openai.AsyncOpenAI`` client, ``stream=true`` on every other
  request: end of audio (the upload is the whole recording, so: the request's start) -> final
  transcript, and -> first ``transcript.text.delta``.
* ``wyoming_asr``: ``wyoming.client.AsyncTcpClient``: after ``audio-stop`` -> first
  ``transcript-chunk``, -> ``transcript``.
* ``http_tts``: ``/v1/audio/speech`` (mp3, the default), streamed: text -> first audio bytes;
  checked by decoding (PyAV) to the expected length within one mp3 frame.
* ``wyoming_tts``: ``synthesize`` -> first ``audio-chunk``; checked sample for sample.

A refused request (503 / Wyoming ``busy``) waits 0.2 s and tries again; it counts as refused.
"""

from __future__ import annotations

import asyncio
import io
import random
import time

import numpy as np

RETRY_S = 0.2


def _until(until: float):
    """Iterations while time is left, and at least one (the warm-up runs with until = now)."""
    yield 0
    while time.monotonic() < until:
        yield 0


def percentiles(values) -> dict:
    if not values:
        return {"p50": None, "p95": None}
    v = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(v, q)), 3) for q in (50, 95)}


class Stats:
    def __init__(self):
        self.served = self.wrong = self.errors = self.refused = 0
        self.final: list[float] = []
        self.first: list[float] = []
        self.samples: list[str] = []

    def error(self, what) -> None:
        self.errors += 1
        self.samples.append(str(what)[:200])

    def check(self, ok: bool, what) -> None:
        if ok:
            self.served += 1
        else:
            self.wrong += 1
            self.samples.append(str(what)[:200])

    def row(self, name: str) -> dict:
        return {"client": name, "served": self.served, "wrong": self.wrong, "errors": self.errors,
                "refused": self.refused, "final_s": percentiles(self.final), "first_s": percentiles(self.first),
                "samples": self.samples[:3]}


class Think:
    def __init__(self, mean_s: float, seed: int):
        self.mean_s, self.rng = mean_s, random.Random(seed)

    async def __call__(self):
        if self.mean_s > 0:
            await asyncio.sleep(self.rng.uniform(0, 2 * self.mean_s))


async def http_asr(base, key, clip, expected: str, stats: Stats, until: float, think: Think):
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=600)
    data = clip.read_bytes()
    for n, _ in enumerate(_until(until)):
        stream = n % 2 == 1
        start = time.perf_counter()
        try:
            if stream:
                events, first = [], None
                async for event in await client.audio.transcriptions.create(model="whisper-1", file=(clip.name, data),
                                                                            stream=True):
                    if first is None and event.type == "transcript.text.delta":
                        first = time.perf_counter() - start
                    events.append(event)
                text = events[-1].text if events and events[-1].type == "transcript.text.done" else None
                deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
                ok = text == expected and deltas == expected
            else:
                text = (await client.audio.transcriptions.create(model="whisper-1", file=(clip.name, data))).text
                ok = text == expected
        except openai.APIStatusError as exc:
            if exc.status_code == 503:
                stats.refused += 1
                await asyncio.sleep(RETRY_S)
                continue
            stats.error(f"{exc.status_code} {exc.message}")
            continue
        except Exception as exc:  # noqa: BLE001 - counted
            stats.error(repr(exc))
            continue
        stats.final.append(time.perf_counter() - start)
        if stream and first is not None:
            stats.first.append(first)
        stats.check(ok, f"{text!r} != {expected!r}")
        await think()
    await client.close()


async def wyoming_asr(address, pcm: bytes, expected: str, stats: Stats, until: float, think: Think):
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    for _ in _until(until):
        try:
            async with AsyncTcpClient(host, int(port), read_timeout=600) as client:
                await client.write_event(Transcribe(language="en").event())
                await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                for i in range(0, len(pcm), 3200):
                    await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 3200]).event())
                await client.write_event(AudioStop().event())
                end_of_audio, first, chunks = time.perf_counter(), None, []
                while True:
                    event = await client.read_event()
                    if event is None or event.type not in ("transcript-start", "transcript-chunk", "transcript-stop"):
                        break
                    if event.type == "transcript-chunk":
                        first = first if first is not None else time.perf_counter() - end_of_audio
                        chunks.append(event.data["text"])
                final = time.perf_counter() - end_of_audio
        except Exception as exc:  # noqa: BLE001 - counted
            stats.error(repr(exc))
            continue
        if event is not None and event.type == "error" and event.data.get("code") == "busy":
            stats.refused += 1
            await asyncio.sleep(RETRY_S)
            continue
        if event is None or event.type != "transcript":
            stats.error(repr(event))
            continue
        stats.final.append(final)
        if first is not None:
            stats.first.append(first)
        stats.check(event.data["text"] == expected and "".join(chunks) == expected, event.data["text"])
        await think()


def mp3_samples(data: bytes) -> int:
    import av

    with av.open(io.BytesIO(data)) as f:
        return sum(frame.samples for frame in f.decode(audio=0))


async def http_tts(base, key, text: str, voice: str, expected_samples: int, stats: Stats, until: float,
                   think: Think):
    import httpx

    from rkspeech.serve.speech_formats import ENCODER_DELAY

    async with httpx.AsyncClient(timeout=600) as client:
        for _ in _until(until):
            start = time.perf_counter()
            body, first = b"", None
            try:
                async with client.stream("POST", f"{base}/v1/audio/speech", headers={"Authorization": f"Bearer {key}"},
                                         json={"model": "tts-1", "voice": voice, "input": text}) as response:
                    if response.status_code == 503:
                        stats.refused += 1
                        await asyncio.sleep(RETRY_S)
                        continue
                    if response.status_code != 200:
                        stats.error(f"{response.status_code} {(await response.aread())[:200]!r}")
                        continue
                    async for piece in response.aiter_bytes():
                        if first is None and piece:
                            first = time.perf_counter() - start
                        body += piece
                samples = await asyncio.to_thread(mp3_samples, body)
            except Exception as exc:  # noqa: BLE001 - counted
                stats.error(repr(exc))
                continue
            stats.final.append(time.perf_counter() - start)
            stats.first.append(first or 0.0)
            extra = samples - ENCODER_DELAY["mp3"] - expected_samples
            stats.check(0 <= extra < 576, f"mp3 of {samples} samples for {expected_samples}")
            await think()


async def wyoming_tts(address, text: str, voice: str, expected: bytes, stats: Stats, until: float, think: Think):
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeVoice

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    for _ in _until(until):
        try:
            async with AsyncTcpClient(host, int(port), read_timeout=600) as client:
                start, first, audio = time.perf_counter(), None, []
                await client.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice)).event())
                while True:
                    event = await client.read_event()
                    if event is None or event.type in ("audio-stop", "error"):
                        break
                    if event.type == "audio-chunk":
                        first = first if first is not None else time.perf_counter() - start
                        audio.append(event.payload)
                final = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - counted
            stats.error(repr(exc))
            continue
        if event is not None and event.type == "error" and event.data.get("code") == "busy":
            stats.refused += 1
            await asyncio.sleep(RETRY_S)
            continue
        if event is None or event.type != "audio-stop":
            stats.error(repr(event))
            continue
        stats.final.append(final)
        stats.first.append(first or 0.0)
        stats.check(b"".join(audio) == expected, f"{len(b''.join(audio))} bytes for {len(expected)}")
        await think()
