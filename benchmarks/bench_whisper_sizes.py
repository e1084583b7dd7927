"""Whisper encoder at every size's real geometry (synthetic weights): write, load, export, check, lint.

    .venv/bin/python benchmarks/bench_whisper_sizes.py tiny small large-v3 [--out DIR] [--convert]

Each size runs in its own child process (so peak RSS is that size's alone): write an openai-format
``.pt`` with random fp16 encoder weights (``rkspeech.models.whisper.sizes.write_synthetic_openai``),
load it with ``load_whisper_encoder``, export the fixed-window ONNX (``export_encoder``), check the
graph's promises (``check_encoder_onnx``), the geometry check the runtime applies
(``check_encoder_geometry`` against the size's n_mels / d_model), and ``rkspeech lint``.  With
``--convert`` also the fp16 rk3588 conversion (not for sizes above base on a shared 24 GB host
unless you mean it).  Prints one JSON line per size; nothing is kept unless ``--out`` is given.
The per-size conversion table (conversion, placement, simulator accuracy on speech) is
``benchmarks/bench_whisper_convert.py``, which runs the build pipeline itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_size(name: str, out: Path, convert: bool) -> dict:
    import torch

    from rkspeech.export.whisper_onnx import check_encoder_onnx, export_encoder
    from rkspeech.lint.checker import lint_model
    from rkspeech.models.whisper.sizes import (
        encoder_parameters,
        size_dims,
        write_synthetic_openai,
    )
    from rkspeech.models.whisper.weights import load_whisper_encoder
    from rkspeech.runtime.whisper.checks import check_encoder_geometry

    torch.set_num_threads(int(os.environ.get("RKSPEECH_THREADS", "2")))
    dims = size_dims(name)
    row: dict = {"size": name, "n_mels": dims.n_mels, "d_model": dims.n_audio_state,
                 "layers": dims.n_audio_layer, "heads": dims.n_audio_head,
                 "encoder_params": encoder_parameters(dims.encoder)}
    t = time.perf_counter()
    pt = write_synthetic_openai(out / f"{name}.pt", name)
    row["write_s"] = round(time.perf_counter() - t, 2)
    row["pt_bytes"] = pt.stat().st_size
    t = time.perf_counter()
    loaded = load_whisper_encoder(pt)
    row["load_s"] = round(time.perf_counter() - t, 2)
    pt.unlink()
    onnx_path = out / f"{name}" / "encoder.onnx"
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    exported = export_encoder(loaded.model, onnx_path)
    row["export_s"] = round(exported.seconds, 2)
    del loaded
    files = list(onnx_path.parent.iterdir())
    row["onnx_bytes"] = sum(f.stat().st_size for f in files)
    row["onnx_files"] = len(files)
    check = check_encoder_onnx(onnx_path)
    row["nodes"], row["layer_norms"] = check["nodes"], check["layer_norms"]
    import onnx

    g = onnx.load(str(onnx_path), load_external_data=False).graph
    shape = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim]
    check_encoder_geometry(str(onnx_path), shape(g.input[0]), shape(g.output[0]),
                           n_mels=dims.n_mels, d_model=dims.n_audio_state)
    t = time.perf_counter()
    try:
        lint = lint_model(onnx_path, "rk3588")
        row["lint"] = {"errors": len(lint.errors), "warnings": len(lint.warnings),
                       "rules": sorted(lint.rule_ids())}
    except Exception as exc:  # noqa: BLE001 - record what fails at this size
        row["lint"] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    row["lint_s"] = round(time.perf_counter() - t, 2)
    if convert:
        from rkspeech.convert.conversion import convert as rk_convert

        t = time.perf_counter()
        res = rk_convert(str(onnx_path), str(onnx_path.with_suffix(".rknn")), target="rk3588", dtype="fp16")
        row["convert_s"] = round(time.perf_counter() - t, 2)
        row["conversion"] = res.to_report()
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="+")
    p.add_argument("--out", default=None, help="keep the artifacts here (default: a temp folder, removed)")
    p.add_argument("--convert", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        (name,) = args.sizes
        print(json.dumps(one_size(name, Path(args.out), args.convert)))
        return 0
    for name in args.sizes:
        out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix=f"whisper_{name}_"))
        start = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc = subprocess.run([sys.executable, __file__, name, "--child", "--out", str(out)]
                              + (["--convert"] if args.convert else []), check=False, capture_output=True, text=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        row = (json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0
               else {"size": name, "failed": proc.stderr.strip().splitlines()[-1:]})
        row["wall_s"] = round(time.perf_counter() - start, 2)
        row["peak_rss_mb"] = round(peak / 1024) if peak > before else f"<= {round(before / 1024)}"
        print(json.dumps(row), flush=True)
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
