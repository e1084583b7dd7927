"""Compare ``rkspeech transcribe`` of a long file with stock faster-whisper on windows of it
(docs/long-inputs.md).

Stock faster-whisper (``WhisperModel.transcribe``) cannot take a 2 h file on this machine: it
computes the whole file's features at once (6.9 GB, issue 30).  So it transcribes clips of the
file instead -- the first and last windows, read from the wav without loading the rest -- and
each clip's text is compared with the text of the segments ``rkspeech transcribe`` (its JSON
output, run before) put in the same time range.  A clip starts without the text of the windows
before it (Whisper's previous-text prompt) and its features' log floor is the clip's, not the
file's, so a difference here is not necessarily ours; the first window's has neither caveat.

``--features``: also compare the features ``rkspeech transcribe`` decodes (streamed, the whole
file: 115 MB per hour) with stock ``FeatureExtractor`` on each clip, in log10 units, after
flooring the clip's at the file's floor (the file's peak - 8; the clip's own peak is lower) and
leaving out the 3 frames next to a cut inside the file (the clip reflects its own samples there,
the file has the next ones): the file's own start and end are compared as they are.

``python benchmarks/compare_long_windows.py LONG.wav RKSPEECH.json --model-dir DIR
[--window=0:30] [--window=-30:] [--beam-size 1] [--language en] [--features] [--whole]``: a window is
START:END in seconds, negative from the end, END empty = the end of the file; a segment belongs
to the window its start falls in.  Prints one JSON line per window.
"""

from __future__ import annotations

import argparse
import json
import wave

import numpy as np


def read_clip(path: str, start_s: float, end_s: float | None) -> tuple[np.ndarray, float, float]:
    """float32 samples of [start_s, end_s) of a 16-bit mono wav (negative: from the end)."""
    with wave.open(path) as w:
        rate, total = w.getframerate(), w.getnframes()
        duration = total / rate
        start = start_s if start_s >= 0 else duration + start_s
        end = duration if end_s is None else (end_s if end_s >= 0 else duration + end_s)
        w.setpos(int(start * rate))
        pcm = np.frombuffer(w.readframes(int((end - start) * rate)), np.int16)
    return pcm.astype(np.float32) / 32768.0, start, end


def parse_window(text: str) -> tuple[float, float | None]:
    a, _, b = text.partition(":")
    return float(a or 0), (float(b) if b else None)


#: frames next to a cut inside the file whose STFT frame reaches past the cut (n_fft 400 / hop 160)
CUT_FRAMES = 3


def feature_diff(audio_path: str, windows, extractor) -> list[dict]:
    """Per window: the largest |streamed - stock| log10 feature difference and the frames that differ."""
    from rkspeech.runtime.audio import iter_audio
    from rkspeech.runtime.whisper.features import stream_features

    ours, _ = stream_features(iter_audio(audio_path, sample_rate=16000), extractor)
    ours = ours * 4 - 4  # back to log10 (faster-whisper scales (log + 4) / 4)
    floor = float(ours.max()) - 8
    hop, out = extractor.hop_length, []
    for start_s, end_s in windows:
        clip, start, end = read_clip(audio_path, start_s, end_s)
        stock = np.maximum(extractor(clip) * 4 - 4, floor)
        first = int(round(start * 16000)) // hop
        frames = min(stock.shape[1], ours.shape[1] - first)
        lo = CUT_FRAMES if first > 0 else 0
        hi = frames - (CUT_FRAMES if first + frames < ours.shape[1] else 0)
        d = np.abs(stock[:, lo:hi] - ours[:, first + lo:first + hi])
        out.append({"max_abs_log10": float(d.max()), "frames_differing": int((d.max(0) > 0).sum()),
                    "frames": int(hi - lo)})
    return out


def segments_of(report: dict) -> list[dict]:
    """The segments of ``rkspeech transcribe``'s JSON (the file's own, or the --json report's)."""
    if "segments" in report:
        return report["segments"]
    (first,) = report["files"] if "files" in report else report["results"]
    return first["segments"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("audio")
    p.add_argument("report")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--window", action="append", type=parse_window)
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--language", default="en")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--features", action="store_true", help="also compare the features (see above)")
    p.add_argument("--whole", action="store_true",
                   help="stock on the whole file instead (its features at once: ~6.6 GB for 2 h), every segment compared")
    args = p.parse_args()
    import ctranslate2
    from faster_whisper import WhisperModel

    segments = segments_of(json.load(open(args.report)))
    model = WhisperModel(args.model_dir, device="cpu", compute_type="float32", cpu_threads=args.threads)
    if args.whole:
        import resource

        audio, _, _ = read_clip(args.audio, 0.0, None)
        ctranslate2.set_random_seed(args.seed)
        stock_segments, _ = model.transcribe(audio, beam_size=args.beam_size, language=args.language)
        stock = [(round(s.start, 2), round(s.end, 2), s.text) for s in stock_segments]
        ours = [(round(s["start"], 2), round(s["end"], 2), s["text"]) for s in segments]
        diff = next((i for i, (a, b) in enumerate(zip(stock, ours)) if a != b), None)
        print(json.dumps({"stock_segments": len(stock), "rkspeech_segments": len(ours),
                          "identical_in_order": sum(a == b for a, b in zip(stock, ours)), "first_difference": diff,
                          "stock_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                          "last": {"stock": stock[-2:], "rkspeech": ours[-2:]}}, ensure_ascii=False))
        return
    windows = args.window or [(0.0, 30.0), (-30.0, None)]
    features = feature_diff(args.audio, windows, model.feature_extractor) if args.features else [None] * len(windows)
    for (start_s, end_s), feat in zip(windows, features):
        clip, start, end = read_clip(args.audio, start_s, end_s)
        ctranslate2.set_random_seed(args.seed)  # the temperature fallback samples: rkspeech transcribe's seed
        stock_segments, _ = model.transcribe(clip, beam_size=args.beam_size, language=args.language)
        stock = [(round(start + s.start, 2), round(start + s.end, 2), s.text) for s in stock_segments]
        ours = [(round(s["start"], 2), round(s["end"], 2), s["text"]) for s in segments if start <= s["start"] < end]
        stock_text, our_text = "".join(t for *_, t in stock).strip(), "".join(t for *_, t in ours).strip()
        print(json.dumps({"window_s": [round(start, 2), round(end, 2)], "same_text": stock_text == our_text,
                          **({"features": feat} if feat else {}), "stock": stock, "rkspeech": ours},
                         ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
