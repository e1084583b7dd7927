"""Same numerics across a refactor: export the reduced synthetic step graphs with a baseline
commit and with this checkout, run both ONNX graphs on onnxruntime with the same inputs, and
require bit-identical outputs and the same op histogram.

    .venv/bin/python benchmarks/layout_identity.py [--baseline a890a03] [-B 16] [--steps 3]
        [--tts-baseline 3385eba]

Vocoder step graphs (both formulations) against ``--baseline``; with ``--tts-baseline``, also the
talker's prefill and decode graphs and the code predictor's frame and step graphs, exported from
the reduced custom-voice checkpoint by the same calls at both commits (their API there).

The baseline is checked out into a temporary git worktree and imported from there in a child
process (its own API of that commit); this checkout is exported in another child.  Inputs: a
seeded random code stream, threaded through ``--steps`` steps (cache out -> cache in), so the
whole cache layout is compared, not only the audio.  Exit code 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: formulation -> the name the baseline commit knows it by
FORMULATIONS = {"reference": "seed", "npu": "npu"}

#: How each side exports: the baseline commit's API (a890a03) and this checkout's.
BASELINE_EXPORT = """
import sys, rkspeech
from rkspeech.vocoder_export import export_vocoder
model_dir, B, out, formulation = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
export_vocoder(model_dir, B, output=out, formulation=formulation)
print(rkspeech.__file__)
"""
CURRENT_EXPORT = """
import sys, rkspeech
from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder
model_dir, B, out, formulation = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
export_vocoder(ExportOptions(model_dir=model_dir, codes_length=B, output=out, formulation=formulation))
print(rkspeech.__file__)
"""


#: Talker and code-predictor graphs: the same calls at both commits (3385eba onwards).
TTS_EXPORT = """
import sys, rkspeech
from pathlib import Path
from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
from rkspeech.models.qwen3_tts.generate import TTSModel
from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame
root, out = sys.argv[1], Path(sys.argv[2])
tts = TTSModel.load(root)
pair = export_talker_pair(tts.net.talker.model, out, capacity=96, prefill_B=16)
pair["prefill"].rename(out / "talker_prefill.onnx"); pair["decode"].rename(out / "talker_decode.onnx")
cp = tts.net.talker.code_predictor
export_code_predictor_onnx(CodePredictorFrame(cp, embed="onehot").eval(), out / "code_predictor_frame.onnx")
export_talker_onnx(code_predictor_step(cp), out / "code_predictor_step.onnx")
print(rkspeech.__file__)
"""
TTS_GRAPHS = ("talker_prefill", "talker_decode", "code_predictor_frame", "code_predictor_step")


def run_random(path: Path, calls: int, seed: int) -> list[np.ndarray]:
    """Outputs of ``calls`` calls on seeded random float inputs of the graph's shapes (1 thread)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    outs = []
    for _ in range(calls):
        feed = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
        outs += sess.run(None, feed)
    return outs


def run_export(code: str, pythonpath: Path, *args) -> str:
    env = dict(os.environ, PYTHONPATH=str(pythonpath), RKSPEECH_THREADS="2")
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)],
                         env=env, capture_output=True, text=True, cwd=str(pythonpath))
    if res.returncode != 0:
        sys.exit(f"export failed ({pythonpath}):\n{res.stderr[-3000:]}")
    imported = res.stdout.strip().splitlines()[-1]
    if not imported.startswith(str(pythonpath)):
        sys.exit(f"imported rkspeech from {imported}, not {pythonpath}")
    return imported


def compare(paths: dict[str, Path], outs: dict[str, list[np.ndarray]]) -> dict:
    hist = {side: op_histogram(p) for side, p in paths.items()}
    identical = all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(outs["baseline"], outs["current"]))
    return {"nodes": sum(hist["current"].values()), "bit_identical": identical,
            "same_op_histogram": hist["baseline"] == hist["current"],
            "op_diff": {k: hist["current"][k] - hist["baseline"][k] for k in set(hist["current"]) | set(hist["baseline"])
                        if hist["current"][k] != hist["baseline"][k]}}


def tts_rows(baseline: str, tmp: Path, calls: int, seed: int) -> list[dict]:
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    root = write_tts_checkpoint(tmp / "tts_ckpt", "reduced", "custom-voice", seed)
    base = tmp / "tts_baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), baseline], check=True)
    try:
        for side, where in (("baseline", base), ("current", ROOT)):
            (tmp / side).mkdir(exist_ok=True)
            run_export(TTS_EXPORT, where, root, tmp / side)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    rows = []
    for name in TTS_GRAPHS:
        paths = {side: tmp / side / f"{name}.onnx" for side in ("baseline", "current")}
        outs = {side: run_random(p, calls, seed) for side, p in paths.items()}
        rows.append({"formulation": name, "B": "-", "steps": calls, **compare(paths, outs)})
    return rows


def export(code: str, pythonpath: Path, model_dir: Path, B: int, out: Path, formulation: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(pythonpath), RKSPEECH_THREADS="2")
    res = subprocess.run([sys.executable, "-c", code, str(model_dir), str(B), str(out), formulation],
                         env=env, capture_output=True, text=True, cwd=str(pythonpath))
    if res.returncode != 0:
        sys.exit(f"export failed ({pythonpath}):\n{res.stderr[-3000:]}")
    return res.stdout.strip().splitlines()[-1]


def op_histogram(path: Path) -> Counter:
    import onnx

    return Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


def run_steps(path: Path, steps: int, seed: int) -> list[np.ndarray]:
    """Outputs of ``steps`` consecutive steps on onnxruntime (1 thread: a fixed reduction order)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    specs = {i.name: i for i in sess.get_inputs()}
    rng = np.random.default_rng(seed)
    q, B = specs["audio_codes"].shape[1], specs["audio_codes"].shape[2]
    half = specs["freqs_in"].shape[1]
    codes_dtype = np.float32 if specs["audio_codes"].type == "tensor(float)" else np.int64
    cache = np.zeros(specs["cache_in"].shape, dtype=np.float32)
    outs = []
    for step in range(steps):
        pos = step * B
        feed = {
            "audio_codes": rng.integers(0, 64, size=(1, q, B)).astype(codes_dtype),
            "freqs_in": np.mod(np.arange(pos, pos + B)[:, None] * rng.uniform(0, 1, half)[None], 2 * np.pi)
            .astype(np.float32),
            "cache_valid": np.array([min(pos, 71)], dtype=np.float32),
            "cache_in": cache,
        }
        audio, cache = sess.run(["audio_values", "cache_out"], feed)
        outs += [audio, cache]
    return outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="a890a03", help="git commit to compare against")
    ap.add_argument("-B", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tts-baseline", default=None,
                    help="also compare the talker and code-predictor graphs against this commit (3385eba or later)")
    ap.add_argument("--report", default=None, help="write the JSON result here")
    args = ap.parse_args()

    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="rkspeech-identity-") as tmp:
        tmp = Path(tmp)
        base = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.baseline],
                       check=True)
        try:
            ckpt = write_checkpoint(tmp / "ckpt", "reduced", seed=args.seed)
            for formulation, baseline_name in FORMULATIONS.items():
                paths = {}
                # commits before the pipelines/ layout export with their own API
                old_api = (base / "rkspeech" / "vocoder_export.py").is_file()
                for side, code, where, name in (("baseline", BASELINE_EXPORT if old_api else CURRENT_EXPORT, base,
                                                 baseline_name if old_api else formulation),
                                                ("current", CURRENT_EXPORT, ROOT, formulation)):
                    paths[side] = tmp / f"{side}_{formulation}.onnx"
                    imported = export(code, where, ckpt, args.B, paths[side], name)
                    if not imported.startswith(str(where)):
                        sys.exit(f"{side} imported rkspeech from {imported}, not {where}")
                hist = {side: op_histogram(p) for side, p in paths.items()}
                outs = {side: run_steps(p, args.steps, args.seed) for side, p in paths.items()}
                identical = all(a.shape == b.shape and np.array_equal(a, b)
                                for a, b in zip(outs["baseline"], outs["current"]))
                same_ops = hist["baseline"] == hist["current"]
                ok &= identical and same_ops
                rows.append({"formulation": formulation, "B": args.B, "steps": args.steps,
                             "nodes": sum(hist["current"].values()), "bit_identical": identical,
                             "same_op_histogram": same_ops,
                             "op_diff": {k: hist["current"][k] - hist["baseline"][k]
                                         for k in set(hist["current"]) | set(hist["baseline"])
                                         if hist["current"][k] != hist["baseline"][k]}})
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
        if args.tts_baseline:
            tts = tts_rows(args.tts_baseline, tmp, args.steps, args.seed)
            ok &= all(r["bit_identical"] and r["same_op_histogram"] for r in tts)
            rows += tts
    print(f"{'graph':<20} {'B':>3} {'steps':>5} {'nodes':>6}  bit-identical  same ops  "
          f"(baseline {args.baseline}; TTS graphs {args.tts_baseline})")
    for r in rows:
        print(f"{r['formulation']:<20} {r['B']:>3} {r['steps']:>5} {r['nodes']:>6}  {str(r['bit_identical']):<13}  "
              f"{str(r['same_op_histogram']):<8}  {r['op_diff'] or ''}")
    if args.report:
        Path(args.report).write_text(json.dumps({"baseline": args.baseline, "rows": rows}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
