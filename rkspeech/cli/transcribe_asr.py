"""``rkspeech transcribe --plan PLAN AUDIO...``: Qwen3-ASR through a built plan (``runtime.qwen3_asr``).

Outputs as Whisper's: the text on stdout (one line a file), ``--json`` the report, ``--out-dir``
(or ``--output-format``) ``AUDIO-stem.txt`` and ``.json`` per file, written atomically.  No
timestamps: they come from Qwen3-ASR's separate forced aligner, which no plan carries.
"""

from __future__ import annotations

import argparse

#: what a Qwen3-ASR transcription writes (no timestamps, so no srt / vtt)
ASR_FORMATS = ("txt", "json")


def run_plan(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from rkspeech.core import progress
    from rkspeech.core.atomic import write_json, write_text
    from rkspeech.core.errors import RkspeechError
    from rkspeech.plan.asr import is_asr_plan
    from rkspeech.runtime.audio import decode_audio

    if args.model_dir or args.encoder:
        raise RkspeechError("--plan runs a Qwen3-ASR plan on its own: drop --model-dir / --encoder")
    if args.max_new_tokens < 1:
        raise RkspeechError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not Path(args.plan).is_file():
        raise RkspeechError(f"--plan {args.plan}: no such file")
    if not is_asr_plan(args.plan):
        raise RkspeechError(f"--plan {args.plan} is not a Qwen3-ASR plan (a Whisper plan goes to --encoder)")
    fmt = args.output_format
    if fmt and fmt not in ASR_FORMATS + ("all",):
        raise RkspeechError(f"--output-format {fmt}: a Qwen3-ASR transcript has no timestamps; choose txt or json")
    formats = () if not (args.out_dir or fmt) else (ASR_FORMATS if fmt in (None, "all") else (fmt,))
    from rkspeech.models.qwen3_asr.languages import normalize_language

    language = None if args.language in (None, "", "auto") else normalize_language(args.language)
    audios = [decode_audio(path, sample_rate=16000, allow_empty=True) for path in args.audio]
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    backend = args.backend or "ort"
    with progress.stage(f"open the Qwen3-ASR plan (encoder on {backend})"):
        asr = ASRTranscriber(args.plan, backend=backend, threads=args.threads or None, core_mask=args.core_mask)
    files = []
    with asr:
        for index, (path, audio) in enumerate(zip(args.audio, audios), 1):
            progress.info(f"[{index}/{len(audios)}] {path} ({len(audio) / 16000:.1f} s)")
            if len(audio) == 0:
                result_lang, text, ids, secs = "", "", [], 0.0
            else:
                r = asr.transcribe(audio, context=args.context, language=language, max_new_tokens=args.max_new_tokens,
                                   progress=path)
                result_lang, text, ids, secs = r.language, r.text, r.token_ids, r.seconds
            entry = {"audio": path, "language": result_lang, "text": text, "token_ids": ids,
                     "seconds": round(secs, 3), "audio_seconds": round(len(audio) / 16000, 3)}
            out_dir = Path(args.out_dir or ".")
            written = []
            if "txt" in formats:
                written.append(write_text(out_dir / f"{Path(path).stem}.txt", text + "\n"))
            if "json" in formats:
                written.append(write_json(out_dir / f"{Path(path).stem}.json", entry))
            if written:
                entry["outputs"] = [str(p) for p in written]
            files.append(entry)
            if not args.json:
                print(text, file=sys.stdout)
    if args.json:
        print(json.dumps({"plan": str(args.plan), "backend": backend, "files": files}, indent=2, ensure_ascii=False))
    return 0
