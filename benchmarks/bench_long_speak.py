"""Peak memory of speaking a long text: sentence by sentence (``rkspeech speak``'s loop,
``runtime.tts.long_text.stream_sentences``) or, with ``--whole``, as one utterance (the old way).

    .venv/bin/python benchmarks/bench_long_speak.py --model-dir DIR --plan plan.json
        [--chars 50000] [--frames-per-sentence 2] [--host-stages] [--whole]

Each utterance is capped at ``--frames-per-sentence`` frames so the run measures the prompt and
the loop, not hours of audio (a synthetic talker may never stop by itself).  The audio is
written nowhere (counted); one JSON line: characters, sentences, frames, seconds, peak RSS.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time

from make_long_audio import SENTENCES  # the same five sentences as the long recording (same folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--chars", type=int, default=50_000)
    ap.add_argument("--frames-per-sentence", type=int, default=2)
    ap.add_argument("--speaker", default=None)
    ap.add_argument("--host-stages", action="store_true", help="talker and code predictor in torch")
    ap.add_argument("--whole", action="store_true", help="one utterance of the whole text (the old way)")
    args = ap.parse_args()

    from rkspeech.core.sentences import sentences
    from rkspeech.runtime.tts.long_text import stream_sentences
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    text, i = "", 0
    while len(text) < args.chars:
        text += SENTENCES[i % len(SENTENCES)] + " "
        i += 1
    text = text[:args.chars]
    speaker = Speaker(args.model_dir, args.plan, host_stages=args.host_stages)
    voice = args.speaker or (speaker.speakers[0] if speaker.speakers else None)
    options = dataclasses.replace(speaker.default_options(), max_new_tokens=args.frames_per_sentence + 1)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    timing, start = SpeechTiming(), time.perf_counter()
    if args.whole:
        chunks = speaker.stream(text, speaker=voice, options=options, timing=timing)
    else:
        chunks = stream_sentences(speaker, text, options=options, timing=timing, speaker=voice)
    samples = sum(len(c) for c in chunks)
    print(json.dumps({"chars": len(text), "utterances": 1 if args.whole else len(sentences(text)),
                      "frames": timing.frames, "samples": samples, "seconds": round(time.perf_counter() - start, 1),
                      "host_stages": args.host_stages, "whole": args.whole,
                      "rss_after_load_mb": round(loaded), "peak_rss_mb": round(
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
    speaker.close()


if __name__ == "__main__":
    main()
