"""The code predictor's start graph beside a CPU-placed, step-form code predictor.

Each frame the code predictor's stack runs 16 positions: the talker's hidden state, codebook 0's
embedding, then one position per codebook.  The first two are known together, so one call of the
same stack at B = 2 (``stepgraph.code_predictor_codebook.code_predictor_step(B=2)``, the CPU
export) replaces two B = 1 calls: 15 calls a frame instead of 16.  A step call reads all the
stack's weights whatever B is (published int4 block 128: B = 1 2.04 ms, B = 2 2.23 ms alone on one
x86 thread, docs/cpu-stages.md), so the frame saves nearly one call.  The graph is exported from
the checkpoint and written with the stage's ``CpuQuantOptions`` (fp32: a copy), one
resumable stage; the runtime runs it as the stack's prefill (``runtime.tts.talker_backend``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rkspeech.contracts.talker import CODE_PREDICTOR_START_B
from rkspeech.core.placement import cpu_variant


def build_start(stages, placement: str, files, model, folder: Path, *, int4: dict | None = None,
                keep_fp32=()) -> dict:
    """``{"start": path, "record": {...}}`` for a step-form code predictor placed
    ``placement`` (``cpu-fp32`` / ``cpu-int8`` / ``cpu-int4``; ``{}`` for any other); ``model``:
    the build's ``LazyTTSModel`` (loaded only when the stage runs); ``int4`` and ``keep_fp32`` as
    ``cpu_stages.quantize_stage`` (the start graph is the same stack: the same MatMuls stay fp32)."""
    import onnxruntime

    from rkspeech.convert.cpu_quant import quantize_step_graph
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, stage_options

    variant = cpu_variant(placement)
    if variant is None:
        return {}
    options = stage_options(placement, int4, keep_fp32)
    folder = Path(folder)
    dst = folder / f"code_predictor_start_B{CODE_PREDICTOR_START_B}.{variant}.onnx"

    def work():
        from rkspeech.export.talker_onnx import export_talker_onnx
        from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step

        folder.mkdir(parents=True, exist_ok=True)
        cp = model.get().net.talker.code_predictor
        from rkspeech.core.child import scratch

        with scratch(folder, prefix=".start.") as tmp:  # owner-locked: swept if a SIGKILL leaves it
            step = code_predictor_step(cp, B=CODE_PREDICTOR_START_B, **CPU_EXPORT)
            src = export_talker_onnx(step, Path(tmp) / "start.onnx")
            return quantize_step_graph(src, dst, options)  # fp32: a byte copy

    args = {"export": CPU_EXPORT, "options": asdict(options), "ort": onnxruntime.__version__}
    record = stages.run(f"code_predictor_start_{variant}", args, [Path(files.config), Path(files.weights)],
                        lambda: [dst], work)
    return {"start": dst, "record": record}
