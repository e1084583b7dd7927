"""Does 16-bit integer quantization beat fp16 on the code predictor's greedy codes? (issue #13)

The reduced code predictor frame graph (``CodePredictorFrame(embed="onehot")``, exported as
``pipelines.code_predictor_build`` does) agrees with torch on 98.48 % of greedy codebook entries
over 720 frames in fp16 on the rk3588 simulator (docs/code-predictor-step.md): every first miss
is a sub-ulp near-tie of the random weights' flat logits, so the fp16 activations are the floor.

rknn-toolkit2 2.5.0 on rk3588 accepts two ``quantized_dtype`` values: ``w8a8`` and
``w16a16i_dfp`` (16-bit dynamic fixed point: per-tensor power-of-two ranges); ``w8a16`` and
``w4a16`` are refused for rk3588 ("The quantized_dtype = 'w8a16' not support in 'rk3588'!"),
``w16a16i`` is not in 2.5.0's list at all (measured with ``RKNN.config``).  Variants, each
built and run on the simulator in its own child process (``[GRAPH:]MODE``):

* ``fp16``: ``build(do_quantization=False)``: the shipped conversion;
* ``int16``: every layer ``w16a16i_dfp``, calibrated on ``--calib`` captured frames (texts
  not in the evaluation set);
* ``int16-fp16[-hrM]:PAT+PAT``: hybrid: ``hybrid_quantization_step1`` in w16a16i_dfp, the
  compiled layers a PAT selects (``rkspeech.convert.hybrid_int16.selected``) in float16 (``custom_quantize_layers``), the
  int16 activation ranges widened x M and the one-hot's ``max - logits`` narrowed to
  +-``--pick-range`` (``_edit_ranges``), ``hybrid_quantization_step2``;
* ``GRAPH`` ``i16`` / ``i16sum``: ``int16_frame``, the same graph with int16-legal constants
  (``concat`` / ``sum``-assembled output) instead of the build's.

Frames: as the 720-frame fp16 measurement (the very same inputs): ``--runs`` greedy
``TTSModel`` runs of ``--per-run`` frames on the reduced synthetic custom-voice root (seed 0),
run r taking text r mod 6 (``VERIFY_TEXTS`` + ``EXTRA_TEXTS``) and speaker r mod 7; torch
reference logits from the fp32 frame graph (``torch_frame_logits``), scored with
``compare_frames`` plus the agreement per codebook up to each frame's first miss and each first
miss's torch top-2 gap in fp16 ulps.  Per variant: NPU / CPU ops, REGTASK lines and layer
dtypes (``convert.placement.analyze`` of the verbose build log), .rknn bytes, build seconds
(calibration included) and the child's peak RSS at export, simulator s / frame.

Measured 2026-12-01 05:33:54-05:40:11 UTC, load average 0.97-2.07 (2 shared cores), rk3588,
720 frames (10,800 codebook entries), 240 calibration frames, ``--pick-range 1``:

| variant | agree | ident | logit SNR | worst | NPU / CPU | REGTASK | .rknn | build |
|---|---|---|---|---|---|---|---|---|
| fp16 (build graph) | 98.48 % | 696 | 58.95 dB | 57.12 | 1048 / 0 | 0 | 20.11 MB | 47 s, 0.75 GB |
| int16 (build graph) | - | - | - | - | - | - | - | refused (1) |
| i16sum:fp16 | 98.48 % | 696 | 58.95 dB | 57.12 | 1104 / 0 | 0 | 20.45 MB | 51 s, 0.76 GB |
| i16sum:int16 | - | - | - | - | - | - | - | compiler dies (2) |
| i16sum:int16-fp16-hr1.5:FP16_LAYERS | **99.56 %** | 710 | **64.81 dB** | 62.21 | 1373 / 0 | 0 | 22.62 MB | 65 s, 0.91 GB |

(1) in calibration: "The 'min/max' of '/MatMul_1_2sdpa_q_add' is too large for 'w16a16i_dfp'!
Please try other quantized_dtype" (the same in ``hybrid_quantization_step1``, so no hybrid of
the build graph either; step 2 refuses a config other than step 1's).  (2) exit by SIGILL after
"Lut fuse dtype not support yet!, dtype: 5", "Meet unsupported tensor dtype in exMatMul",
"Meet unsupported tensor dtype in Sub, tensor name is: /Constant_73_output_0".
(agree: fraction of the 10,800 greedy entries equal to torch's; ident: frames of 720 with all 15
codes equal; logit SNR / worst: ``compare_frames``, up to each frame's first miss; build: the
child from ``config`` to ``export_rknn``, peak RSS.)  The hybrid: 1125 int16 + 220 fp16 layers;
10 first misses (fp16: 24), each a torch near-tie of 0.13-0.86 fp16 ulps (fp16's: 0.03-1.68);
99.91 % per codebook up to each first miss (fp16 99.78 %); compiler estimate 1.56 ms a frame
(fp16 1.05 ms; RW 21.9 vs 15.5 MB); simulator 0.050 s a frame (fp16 0.043).

Why each piece (ablations, same frames, 2026-12-01 04:47-05:34 UTC):

* **int16-legal constants** (``int16_frame``): w16a16i_dfp refuses any tensor, constants
  included, beyond +-16384 (a Mul by 16383 builds, 16385 is refused); the build graph has the
  prefill mask (-30000, inside the fused exSDPAttention) and the one-hot's (max - logits) *
  65504 (up to 5.9e5).  Mask -20 and the gain as two clamped stages (1024, 64): same torch
  codes on all 720 frames, logits within 1.4e-6; in fp16 identical figures to the build graph.
* **fp16 layers** (``FP16_LAYERS``): whole-graph int16 of that graph kills the compiler; with
  SiLU, attention, Abs and ``1 - x`` in fp16 it builds, but every int16 Concat is a CPU op (58:
  the input and KV-cache concats and the output; probed with lone Concats on axes 0-3, all
  CPU), so Concats are fp16 too, and the [15, V] output is a sum of ``lg_j * e_j``
  (``i16sum``): an fp16 output Concat would round the logits to fp16 again.
* **range margin x1.5**: calibration max -> power-of-two range, and a frame beyond it saturates
  (48 calibration frames, Concats still int16 on the CPU: 97.51 %, 36.5 dB, one frame's
  talker_hidden at -5.05 against a range of 4; 240 frames, no margin, ``i16``: 98.45 %, 31.7 dB,
  frame 409's input projection at 4.50 clipped to 4.0); with the pick range, ``i16sum``: x2
  98.94 %, 63.1 dB; x1.5 99.56 %, 64.8 dB (the coarser grid of x2 costs more than it saves).
* **pick range +-1**: without it (margin x2) 98.85 %, 29.7 dB: 6 of 26 first misses were the
  graph feeding back a code other than its own output's argmax (max - logits spans ~12, a
  2^-10 grid, coarser than the logits').  +-1 makes the fed-back code follow the output.

Not measured: the published size (its fp16 conversion peaks at 18.9 GB; the hybrid's two
steps were not tried), a trained checkpoint (DFP's per-tensor power-of-two ranges are a risk
with outlier channels), a board.  The library's build option (``build qwen3-tts --code-predictor-dtype int16-hybrid``,
``rkspeech.convert.hybrid_int16``) runs the winning variant; this script keeps the comparison.

Run (prepare is light: the checkpoint, the three ONNX graphs and the captured frames, ~5 min;
the variants, ~7 min, under the heavy-job lock; each child peaks below 1 GB)::

    .venv/bin/python benchmarks/bench_code_predictor_int16.py --work /work/scratch/h13b/run --prepare-only
    flock /tmp/rkspeech-heavy.lock .venv/bin/python benchmarks/bench_code_predictor_int16.py \\
        --work /work/scratch/h13b/run --json /work/scratch/h13b/run/results.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: evaluation texts beyond ``VERIFY_TEXTS`` (the 720-frame fp16 measurement's six)
EXTRA_TEXTS = ("A second voice reads the weather: light rain, then sun by noon.",
               "Please call me back after five, the meeting ran late today.")
#: calibration texts (not in the evaluation set)
CALIB_TEXTS = ("Seven large boxes arrived at the office late on Thursday afternoon.",
               "Turn left at the second traffic light and park behind the blue building.",
               "She played the violin while her brother read the newspaper aloud.")
INT16 = "w16a16i_dfp"
#: layers the rk3588 compiler cannot take in int16 (w16a16i_dfp, toolkit 2.5.0; measured): the
#: SiLU and the fused attention ("Lut fuse dtype not support yet!", "Meet unsupported tensor
#: dtype in exMatMul"), Abs (LeakyRelu), the one-hot's ``1 - x`` ("Meet unsupported tensor
#: dtype in Sub", then the compiler dies with SIGILL) and every Concat (int16: CPU)
FP16_LAYERS = "op=exSwish+op=exSDPAttention+op=LeakyRelu+constop=Sub+op=Concat"


def _stamp() -> str:
    return time.strftime("%H:%M:%S", time.gmtime()) + " load " + " ".join(open("/proc/loadavg").read().split()[:3])


# --- the int16-friendly graph ------------------------------------------------------------------

#: rknn-toolkit2 2.5.0 refuses any tensor (constants included) whose calibrated |value| exceeds
#: 16384 in w16a16i_dfp ("The 'min/max' of 'X' is too large for 'w16a16i_dfp'!"; measured on a
#: Mul by a constant: 16383 builds, 16385 is refused).  The build graph has two kinds: the
#: prefill's additive mask (-30000; inside the fused exSDPAttention, 'sdpa_q_add') and the
#: one-hot's (max - logits) * 65504 (up to ~5.9e5 on the calibration frames).
I16_MASK = -20.0  # exp(-20) = 2e-9: as masked as -30000 for softmax; DFP keeps ~2^-10 on the scores
I16_GAINS = (1024.0, 64.0)  # 65536 in two clamped stages, each product <= 16384


def int16_frame(cp, assemble: str = "concat"):
    """``CodePredictorFrame(embed="onehot")`` with the int16-friendly constants (``I16_MASK``, the
    one-hot gain as two clamped stages ``I16_GAINS``): same codes as the build graph except on a
    top-2 gap below 1/65536 (fp32 torch: none of the 720 frames, checked in ``prepare``).

    ``assemble="sum"``: the ``[G-1, V]`` output as a sum of ``lg_j * e_j`` (one-hot column
    constants) instead of a Concat: every int16 Concat is placed on the rk3588 CPU (measured:
    axis 0-3, 2-D and 4-D; w16a16i_dfp), and an fp16 Concat rounds the logits to fp16."""
    import torch
    from torch.nn import functional as F

    from rkspeech.pipelines.code_predictor_build import EMBED
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    class Int16Frame(CodePredictorFrame):
        def __init__(self, cp):
            super().__init__(cp, embed=EMBED)
            self.prefill_mask = torch.tensor([[0.0, I16_MASK], [0.0, 0.0]])

        def _pick(self, logits, j):  # CodePredictorFrame._pick with the gain in two stages
            table = self.cp.model.codec_embedding[j - 1]
            rows, cols = self._pool
            m = F.max_pool2d(logits.view(1, 1, rows, cols), (rows, cols)).view(1, 1)
            a = torch.clamp((m - logits) * I16_GAINS[0], 0.0, 1.0)
            onehot = 1.0 - torch.clamp(a * I16_GAINS[1], 0.0, 1.0)
            first = onehot * self.rank
            top = F.max_pool2d(first.view(1, 1, rows, cols), (rows, cols)).view(1, 1)
            onehot = torch.relu(1.0 - torch.abs(first - top))
            return None, (onehot @ table.weight).view(1, 1, -1)

        def forward(self, talker_hidden, first_embed):
            if assemble == "concat":
                return super().forward(talker_hidden, first_embed)
            cp = self.cp
            x = cp.small_to_mtp_projection(torch.cat((talker_hidden, first_embed), dim=0).unsqueeze(0))
            h, caches = self._stack(x, 0, None)
            h = h[:, -1:]
            g = self.groups - 1
            eye = torch.eye(g)
            out = None
            for j in range(1, self.groups):
                lg = cp.lm_head[j - 1](h).view(1, self.vocab)
                term = lg * eye[:, j - 1:j]  # [G-1, V], row j-1 only
                out = term if out is None else out + term
                if j == g:
                    break
                _, emb = self._pick(lg, j)
                h, caches = self._stack(cp.small_to_mtp_projection(emb), j + 1, caches)
            return out

    return Int16Frame(cp).eval()


# --- prepare: checkpoint, ONNX, evaluation and calibration frames (light, no lock) -----------------


def _capture(tts, jobs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from rkspeech.stepgraph.code_predictor_step import greedy_frames_with_inputs

    hs, fs, cs = [], [], []
    for text, speaker, frames in jobs:
        got = greedy_frames_with_inputs(tts, text, frames, speaker=speaker, language="english")
        for h, f, c in got:
            hs.append(h.numpy()[0])
            fs.append(f.numpy()[0])
            cs.append(np.asarray(c))
        print(_stamp(), f"captured {len(got)} frames: {speaker}, {text[:30]!r}", flush=True)
    return np.stack(hs), np.stack(fs), np.stack(cs)


def prepare(args, work: Path) -> dict:
    import torch

    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.pipelines.code_predictor_build import EMBED, VERIFY_TEXTS, torch_frame_logits
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    paths = {"onnx": work / f"code_predictor_{EMBED}.onnx", "onnx_i16": work / f"code_predictor_{EMBED}_i16.onnx",
             "onnx_i16sum": work / f"code_predictor_{EMBED}_i16sum.onnx",
             "frames": work / "frames.npz", "dataset": work / f"calib{args.calib}" / "dataset.txt"}
    if all(p.is_file() for p in paths.values()):
        return paths
    root = work / "root"
    if not (root / "config.json").is_file():
        write_tts_checkpoint(root, "reduced", "custom-voice", 0)
    tts = TTSModel.load(root)
    cp = tts.net.talker.code_predictor
    if not paths["onnx"].is_file():
        export_code_predictor_onnx(CodePredictorFrame(cp, embed=EMBED).eval(), paths["onnx"])
    if not paths["onnx_i16"].is_file():
        export_code_predictor_onnx(int16_frame(cp), paths["onnx_i16"])
    if not paths["onnx_i16sum"].is_file():
        export_code_predictor_onnx(int16_frame(cp, "sum"), paths["onnx_i16sum"])
    texts = list(VERIFY_TEXTS) + list(EXTRA_TEXTS)
    spk = tts.speakers
    if not paths["frames"].is_file():
        h, f, c = _capture(tts, [(texts[r % len(texts)], spk[r % len(spk)], args.per_run) for r in range(args.runs)])
        captured = [(torch.from_numpy(h[i:i + 1]), torch.from_numpy(f[i:i + 1]), c[i]) for i in range(len(h))]
        ref = torch_frame_logits(tts, captured).astype(np.float32)
        if not (ref.argmax(-1) == c[:, 1:]).all():
            raise SystemExit("the torch frame graph's codes differ from TTSModel's")
        refs = {}
        for name, step in (("i16", int16_frame(cp)), ("i16sum", int16_frame(cp, "sum"))):
            with torch.no_grad():
                refs[f"torch_logits_{name}"] = np.stack([step(a, b).numpy() for a, b, _ in captured]).astype(np.float32)
        np.savez(paths["frames"], hidden=h, first=f, codes=c, torch_logits=ref, **refs)
    if not paths["dataset"].is_file():
        runs = math.ceil(args.calib / args.per_run)
        h, f, _ = _capture(tts, [(CALIB_TEXTS[r % len(CALIB_TEXTS)], spk[(r + 3) % len(spk)], args.per_run)
                                 for r in range(runs)])
        d = paths["dataset"].parent
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(min(args.calib, len(h))):
            a, b = d / f"h{i}.npy", d / f"f{i}.npy"
            np.save(a, h[i:i + 1])
            np.save(b, f[i:i + 1])
            lines.append(f"{a} {b}")
        paths["dataset"].write_text("\n".join(lines) + "\n")
    return paths


# --- child: one variant built, exported and run on the simulator ---------------------------------


def _fp16_tensors(model_path: Path, patterns) -> list[str]:
    from rkspeech.convert.hybrid_int16 import fp16_tensors

    return fp16_tensors(model_path, patterns)


def _edit_ranges(cfg_text: str, model_path: Path, margin: float, pick_range: float) -> tuple[str, int, int]:
    """The step-1 cfg with (1) every int16 activation's range (a compiled layer's output, not
    a weight) widened to ``margin`` x its calibration max (up to the 16384 the toolkit
    accepts), and (2) the one-hot's ``max - logits`` (a Sub whose first input is the
    broadcast MaxPool) narrowed to +-``pick_range`` (0: unchanged).

    (1): w16a16i_dfp ranges are powers of two from the calibration max, and a value beyond it
    saturates (measured: frame 409's input projection reached 4.50 against a calibrated 3.85,
    clipped to 4.0: codebook 1 at 22 dB).  (2): that Sub spans the logits' whole spread
    (~12, so a 2^-10 grid), which makes sub-grid near-ties inside the graph that the output
    logits resolve: the fed-back code then differs from the host's argmax (measured: 6 of 26
    first misses); a gap beyond the range saturates, harmless before the x1024 clamp."""
    import onnx
    import yaml

    nodes = onnx.load(os.fspath(model_path), load_external_data=False).graph.node
    outs = {t for n in nodes for t in n.output}
    gaps = {n.output[0] for n in nodes if n.op_type == "Sub" and n.input[0].endswith("_rs_expand")
            and not any("/Constant_" in i for i in n.input)}
    cfg = yaml.safe_load(cfg_text)
    widened = narrowed = 0
    for name, q in cfg["quantize_parameters"].items():
        if name not in outs or q.get("dtype") != "int16" or not q.get("scale"):
            continue
        # min/max only: step 2 refuses an edited scale ("is not allowed to be modified") and
        # derives the scale from min/max
        if pick_range and name in gaps:
            q["min"], q["max"] = [-pick_range] * len(q["min"]), [pick_range] * len(q["max"])
            narrowed += 1
        elif margin != 1.0 and max(abs(v) for v in q["min"] + q["max"]) * margin <= 16384:
            q["min"], q["max"] = [v * margin for v in q["min"]], [v * margin for v in q["max"]]
            widened += 1
    return yaml.safe_dump(cfg, sort_keys=False), widened, narrowed


def child(spec: dict) -> int:
    from rkspeech.convert.toolkit import rknn_class
    from rkspeech.core.child import FdCapture

    RKNN = rknn_class()
    variant, work = spec["mode"], Path(spec["work"])
    os.chdir(work)
    info: dict = {"variant": spec["variant"]}
    t0 = time.perf_counter()
    with FdCapture(spec["build_log"]):
        rknn = RKNN(verbose=True)
        cfg = {"target_platform": spec["target"]}
        if variant != "fp16":
            cfg.update(quantized_dtype=INT16, quantized_algorithm=spec["algorithm"])
        assert rknn.config(**cfg) == 0, "config"
        assert rknn.load_onnx(spec["onnx"]) == 0, "load_onnx"
        if variant == "fp16":
            assert rknn.build(do_quantization=False) == 0, "build"
        elif variant == "int16":
            assert rknn.build(do_quantization=True, dataset=spec["dataset"]) == 0, "build"
        else:  # int16-fp16[-hrN]:PAT+PAT
            stem = Path(spec["onnx"]).stem
            assert rknn.hybrid_quantization_step1(dataset=spec["dataset"]) == 0, "step1"
            base, _, pats = variant.partition(":")
            fp16 = _fp16_tensors(work / f"{stem}.model", pats.split("+") if pats else [])
            text = (work / f"{stem}.quantization.cfg").read_text()
            lines = "".join(f"    {t}: float16\n" for t in fp16)
            text = text.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n" + lines, 1)
            margin = float(base.split("-hr")[1]) if "-hr" in base else 1.0
            text, info["headroom_tensors"], info["pick_gap_tensors"] = _edit_ranges(
                text, work / f"{stem}.model", margin, spec["pick_range"])
            (work / f"{stem}.hybrid.cfg").write_text(text)
            info["fp16_tensors"] = len(fp16)
            rknn.release()
            rknn = RKNN(verbose=True)
            assert rknn.config(**cfg) == 0, "config"
            assert rknn.hybrid_quantization_step2(f"{stem}.model", f"{stem}.data", f"{stem}.hybrid.cfg") == 0, "step2"
        assert rknn.export_rknn(spec["rknn"]) == 0, "export_rknn"
        info["build_s"] = round(time.perf_counter() - t0, 1)
        info["build_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    with FdCapture(spec["sim_log"]):
        assert rknn.init_runtime() == 0, "init_runtime"
        d = np.load(spec["frames"])
        h, f = d["hidden"].astype(np.float32), d["first"].astype(np.float32)
        t1 = time.perf_counter()
        logits = [np.asarray(rknn.inference(inputs=[h[i:i + 1], f[i:i + 1]])[0], np.float32).reshape(-1)
                  for i in range(len(h))]
    info["sim_s_per_frame"] = round((time.perf_counter() - t1) / max(1, len(h)), 3)
    info["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    np.save(spec["logits"], np.stack(logits))
    Path(spec["info"]).write_text(json.dumps(info))
    sys.stdout.flush()
    os._exit(0)


# --- parent: score ----------------------------------------------------------------------------


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def score(torch_logits: np.ndarray, codes: np.ndarray, got: np.ndarray) -> dict:
    """``compare_frames`` + agreement per codebook up to each first miss + the first misses'
    torch top-2 gaps in fp16 ulps of the top logit."""
    from rkspeech.pipelines.code_predictor_build import compare_frames

    rep = compare_frames(torch_logits, codes, got)
    gc = got.argmax(-1)
    seen = agree = 0
    gaps = []
    for fr in range(len(codes)):
        bad = np.nonzero(gc[fr] != codes[fr])[0]
        k = int(bad[0]) if bad.size else codes.shape[1]
        seen += k + bool(bad.size)
        agree += k
        if bad.size:
            s = np.sort(torch_logits[fr, k])[::-1]
            gaps.append(round(float(s[0] - s[1]) / float(np.spacing(np.float16(abs(s[0])))), 2))
    rep.update(agreement_up_to_first_miss=round(agree / seen, 5), first_misses=len(gaps),
               first_miss_gap_fp16_ulps=sorted(gaps))
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--variants", default=f"fp16,int16,i16sum:fp16,i16sum:int16,i16sum:int16-fp16-hr1.5:{FP16_LAYERS}",
                    help="comma-separated [GRAPH:]MODE: GRAPH i16 / i16sum (int16_frame, concat / sum output) or "
                         "the build's; MODE fp16, int16 (w16a16i_dfp), int16-fp16[-hrM]:PAT+PAT (hybrid: "
                         "the compiled layers a PAT selects in fp16 (hybrid_int16.selected); activation ranges x M)")
    ap.add_argument("--target", default="rk3588")
    ap.add_argument("--runs", type=int, default=24, help="greedy TTSModel runs of --per-run frames")
    ap.add_argument("--per-run", type=int, default=30)
    ap.add_argument("--calib", type=int, default=240, help="calibration frames")
    ap.add_argument("--algorithm", default="normal", help="quantized_algorithm (normal, mmse, kl_divergence)")
    ap.add_argument("--pick-range", type=float, default=1.0,
                    help="hybrid: the one-hot's max - logits tensors' int16 range (+-; 0: calibrated)")
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(json.loads(Path(args.child).read_text()))

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(_stamp(), "prepare", flush=True)
    paths = prepare(args, work)
    if args.prepare_only:
        return 0
    from rkspeech.convert.placement import analyze
    from rkspeech.core.compare import json_number, snr_db
    from rkspeech.estimate.steptime import estimate_path

    d = np.load(paths["frames"])
    tl, codes = d["torch_logits"], d["codes"][:, 1:]
    results = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "loadavg_start": open("/proc/loadavg").read().split()[:3], "target": args.target,
               "frames": int(len(codes)), "calibration_frames": len(paths["dataset"].read_text().split("\n")) - 1,
               "algorithm": args.algorithm, "pick_range": args.pick_range,
               "i16_graphs": {"mask": I16_MASK, "gains": list(I16_GAINS), **{
                   g: {"torch_fp32_code_agreement": float((d[f"torch_logits_{g}"].argmax(-1) == codes).mean()),
                       "torch_fp32_logit_max_abs_diff": float(np.abs(d[f"torch_logits_{g}"] - tl).max())}
                   for g in ("i16", "i16sum")}},
               "variants": {}}
    for variant in args.variants.split(","):
        graph, _, mode = variant.partition(":") if variant.split(":")[0] in ("i16", "i16sum") else ("build", "", variant)
        if mode.split(":")[0].split("-hr")[0] not in ("fp16", "int16", "int16-fp16"):
            raise SystemExit(f"unknown variant {variant!r}")
        onnx_path = paths["onnx" if graph == "build" else f"onnx_{graph}"]
        tag = variant.replace(":", "_").replace("+", "_").replace("/", "_")
        vdir = work / tag
        vdir.mkdir(exist_ok=True)
        spec = {"variant": variant, "mode": mode, "work": str(vdir), "onnx": str(onnx_path), "target": args.target,
                "dataset": str(paths["dataset"]), "frames": str(paths["frames"]), "algorithm": args.algorithm,
                "pick_range": args.pick_range,
                "rknn": str(vdir / f"{onnx_path.stem}_{tag}_{args.target}.rknn"),
                "sim_log": str(vdir / "sim.log"),
                "logits": str(vdir / "logits.npy"), "info": str(vdir / "info.json")}
        spec["build_log"] = spec["rknn"] + ".build.log"  # where rkspeech.estimate looks for it
        for k in ("build_log", "sim_log", "info"):
            Path(spec[k]).unlink(missing_ok=True)
        (vdir / "spec.json").write_text(json.dumps(spec))
        print(_stamp(), "variant", variant, flush=True)
        t0 = time.perf_counter()
        with open(vdir / "child.log", "w") as f:
            rc = subprocess.run([sys.executable, __file__, "--work", str(work), "--child", str(vdir / "spec.json")],
                                stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0 or not Path(spec["info"]).is_file():
            tail = []
            for k in ("sim_log", "build_log"):
                if Path(spec[k]).is_file():
                    tail = [ln for ln in Path(spec[k]).read_text(errors="replace").splitlines()
                            if ln.strip() and ("E " in ln[:6] or "Error" in ln or "rror:" in ln)][-3:] or tail
                    if tail:
                        break
            child_tail = (vdir / "child.log").read_text(errors="replace").strip().splitlines()[-2:]
            results["variants"][variant] = {"error": f"child exit {rc}: {' | '.join(tail + child_tail)[-600:]}"}
            print(variant, results["variants"][variant], flush=True)
            continue
        info = json.loads(Path(spec["info"]).read_text())
        p = analyze(spec["build_log"], spec["rknn"], spec["onnx"])
        got = np.load(spec["logits"]).reshape(tl.shape)
        try:
            est = estimate_path(spec["rknn"]).to_report()
            cost = {k: est.get(k) for k in ("npu_cycles", "total_cycles", "rw_mb", "est_step_ms")}
        except Exception as exc:  # noqa: BLE001 - a missing table is a result too
            cost = {"error": str(exc)[:200]}
        r = {**info, "wall_s": round(time.perf_counter() - t0, 1), "rknn_bytes": Path(spec["rknn"]).stat().st_size,
             "graph": graph, "layer_dtypes": _count(la.dtype for la in p.compute),
             "npu_ops": len(p.npu_layers), "cpu_ops": len(p.cpu_layers), "cpu_op_types": p.cpu_op_types(),
             "regtask_overflow_lines": p.regtask_overflow_lines, **score(tl, codes, got),
             "logit_snr_all_db": json_number(snr_db(tl, got)),
             "cost": cost}
        results["variants"][variant] = r
        print(_stamp(), variant, json.dumps({k: v for k, v in r.items() if k != "first_miss_gap_fp16_ulps"}),
              flush=True)
    results["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    results["date_end_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
