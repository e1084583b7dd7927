"""The accuracy gate's figures for CPU variants of the talker and code predictor, on one root.

    .venv/bin/python benchmarks/bench_accuracy_gate.py --model-dir ROOT [--variants int8,int4,int4-b128,int4-b128s]
        [--frames 48] [--texts 20] [--damage] [--fp32-heads] [--no-start] [--out R.json]

Exports the talker's step graphs (capacity 128, prefill 16) and the code predictor's step graph
(fp32, as ``build qwen3-tts`` exports them: the CPU export unless an NPU variant is asked for),
writes each variant with ``convert.cpu_quant`` (or,
``fp16-storage``, the host emulation of the NPU's fp16 storage; ``npu-sim``: the fp32 graphs on the
rknn-toolkit2 simulator, fp16, rk3588: minutes at the reduced size), and
runs ``accuracy.gate.run_gate`` per variant: both stages judged, each against the fp32 graphs on
onnxruntime (the other stage kept at fp32 while one runs free).  ``--damage`` adds two
deliberately broken int8 variants: the talker decode and prefill graphs' weight scales multiplied
by 1.3 and by 3 (the test's damage), and one code predictor MatMul weight zeroed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

CAPACITY, PREFILL = 128, 16


def export(tts, out: Path, cpu: bool = True) -> dict:
    """The fp32 graphs; ``cpu``: in the CPU export (``pipelines.cpu_stages.CPU_EXPORT``, as the
    build exports CPU-placed stages), else the NPU's layout (for the NPU variants)."""
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step

    kw = CPU_EXPORT if cpu else {}
    g = export_talker_pair(tts.net.talker.model, out, capacity=CAPACITY, prefill_B=PREFILL, **kw)
    g["cp_step"] = export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor, **kw), out / "cp_step.onnx")
    return g


def fp16_storage_graph(src: Path, dst: Path) -> Path:
    """The NPU's fp16 storage emulated on the host (``accuracy.fp16_model.fp16_storage``: weights
    and every float node output rounded to fp16, fp32 compute): a proxy for an NPU fp16 stage,
    not the compiler's numerics."""
    import onnx

    from rkspeech.accuracy.fp16_model import float_outputs, fp16_storage

    m = onnx.load(str(src))
    onnx.save(fp16_storage(m, list(float_outputs(m))), str(dst))
    return dst


class _Loaded:
    """A loaded ``TTSModel`` where ``pipelines.cpu_start`` expects a ``LazyTTSModel``."""

    def __init__(self, tts):
        self.tts = tts

    def get(self):
        return self.tts


def variant_graphs(graphs: dict, variant: str, out: Path, model_dir=None, tts=None) -> dict:
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph

    if variant == "fp16-storage":
        return {role: fp16_storage_graph(src, out / f"{role}.fp16s.onnx") for role, src in graphs.items()}
    v, _, block = variant.partition("-b")  # int4-b128 (block 128), int4-b128s (symmetric too)
    sym = block.endswith("s")
    block = block.rstrip("s")
    opts = CpuQuantOptions(variant=v, **({"block_size": int(block)} if block else {}),
                           **({"symmetric": True} if sym else {}))
    res = {}
    for role, src in graphs.items():
        dst = out / f"{role}.{variant}.onnx"
        quantize_step_graph(src, dst, opts)
        res[role] = dst
    if model_dir is not None:  # the code predictor's heads quantized alike, as the build does
        from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
        from rkspeech.pipelines.cpu_heads import quantize_heads
        from rkspeech.pipelines.resumable import RunEveryStage

        int4 = {"block_size": opts.block_size, "symmetric": opts.symmetric} if v == "int4" else None
        res["heads"] = quantize_heads(RunEveryStage(), f"cpu-{v}", resolve_model_root(model_dir),
                                      out / f"heads.{variant}", int4=int4).get("heads")
        if tts is not None:  # and its start graph (pipelines.cpu_start)
            from rkspeech.pipelines.cpu_start import build_start

            res["start"] = build_start(RunEveryStage(), f"cpu-{v}", resolve_model_root(model_dir), _Loaded(tts),
                                       out / f"start.{variant}", int4=int4)["start"]
    return res


def damage(path: Path, dst: Path, *, scale: float | None = None, zero_one: bool = False) -> Path:
    """A copy of a quantized graph with its int8 weights scaled (their scales multiplied) or one
    MatMul's weight zeroed."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    done = 0
    for init in m.graph.initializer:
        a = numpy_helper.to_array(init)
        if scale is not None and a.dtype == np.float32 and init.name.endswith("_scale"):
            init.CopyFrom(numpy_helper.from_array((a * scale).astype(np.float32), init.name))
            done += 1
        elif zero_one and not done and a.dtype == np.int8 and a.ndim == 2:
            init.CopyFrom(numpy_helper.from_array(np.zeros_like(a), init.name))
            done += 1
    assert done, f"nothing to damage in {path}"
    onnx.save(m, str(dst))
    return dst


def main(argv=None) -> int:
    import torch

    from rkspeech.accuracy.gate import GATE_TEXTS, run_gate
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
    from rkspeech.runtime.tts.open_stages import open_code_predictor, open_talker_for

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--variants", default="int8,int4,int4-b128,fp16-storage")
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--texts", type=int, default=len(GATE_TEXTS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--damage", action="store_true")
    p.add_argument("--fp32-heads", action="store_true", help="the code predictor's heads in fp32 (before issue 26's "
                   "quantized heads)")
    p.add_argument("--no-start", action="store_true", help="the code predictor without its start graph (positions "
                   "0-1 in two step calls)")
    p.add_argument("--out")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    tts = TTSModel.load(args.model_dir)  # the exports; the gate runs the loop speak runs (numpy), as the build's
    host = NumpyTTSModel.load(args.model_dir)
    report = {"model_dir": args.model_dir, "prompt_form": tts.cfg.prompt_form, "host_loop": host.host, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="gate-bench-") as tmp:
        tmp = Path(tmp)
        variants = [v for v in args.variants.split(",") if v]
        fp32 = export(tts, tmp, cpu=not {"npu-sim", "fp16-storage"} & set(variants))

        def talker(g, backend="ort"):
            kw = {"threads": args.threads} if backend == "ort" else {}
            return open_talker_for(host, {r: {"onnx": g[r]} for r in ("decode", "prefill")}, backend, **kw)

        def cp(g, backend="ort"):
            kw = {"threads": args.threads} if backend == "ort" else {}
            return open_code_predictor("step", g["cp_step"], backend, model=host, heads=g.get("heads"),
                                       start=g.get("start"), **kw)

        ref = {"talker": talker(fp32), "code_predictor": cp(fp32)}
        todo = {v: fp32 if v == "npu-sim" else variant_graphs(fp32, v, tmp, None if args.fp32_heads else args.model_dir,
                                                              None if args.no_start else tts)
                for v in variants}
        if args.damage:
            base = todo.get("int8") or variant_graphs(fp32, "int8", tmp)
            for k in (1.3, 3.0):
                todo[f"int8-talker-scaled-{k}"] = {**base, **{r: damage(base[r], tmp / f"{r}.scaled{k}.onnx", scale=k)
                                                             for r in ("decode", "prefill")}}
            todo["int8-cp-one-weight-zeroed"] = {**base, "cp_step": damage(base["cp_step"], tmp / "cp.zero.onnx",
                                                                           zero_one=True)}
        for name, g in todo.items():
            t0 = time.perf_counter()
            backend = "sim" if name == "npu-sim" else "ort"
            v = {"talker": talker(g, backend), "code_predictor": cp(g, backend)}
            r = run_gate(host, reference=ref, variants=v, texts=GATE_TEXTS[:args.texts], frames=args.frames)
            for b in v.values():
                b.close()
            report["runs"][name] = r
            s = r["stages"]
            print(f"{name}: {r['reference_frames']} frames, {r['stopped_reference']}/{r['texts']} stopped; "
                  + "; ".join(f"{k}: tf {100 * x['teacher_forced']['agreement']:.2f} % "
                              f"{x['teacher_forced']['logit_snr_db']} dB, free same stop "
                              f"{x['free_running']['same_stop']}/{x['free_running']['utterances']}, codes "
                              f"{100 * x['free_running']['codes_equal']:.1f} %, 1st div "
                              f"{x['free_running']['first_diverging_frame']}" for k, x in s.items())
                  + f"; passed {r['passed']} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        for b in ref.values():
            b.close()
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
