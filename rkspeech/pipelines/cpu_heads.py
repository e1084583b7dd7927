"""The code predictor's heads as CPU graphs beside a CPU-placed, step-form code predictor.

The step graph holds the stack; its 15 heads (``lm_head[j - 1]``, ``[V, H]`` each) are applied
by the host between steps.  Left in fp32 numpy they are 126 of the 1.30 GB an int4 frame reads at
the published size (docs/estimate.md: 0.83 vs 0.72 real-time factor with and without them), so a
quantized code predictor gets its heads quantized alike: each exported as its own graph
(``export.head_onnx``, a ``HeadContract``) and written with the stage's ``CpuQuantOptions`` by
``convert.cpu_quant.quantize_step_graph``, one resumable stage.  The accuracy gate measures the
code predictor with these heads (they are part of its variant).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rkspeech.core.placement import cpu_variant
from rkspeech.pipelines.cpu_stages import SHARED_KEYS, stage_options


def quantize_heads(stages, placement: str, files, folder: Path, *, int4: dict | None = None) -> dict:
    """``{"heads": {"1": path, ...}, "record": {...}}`` for a code predictor placed ``placement``
    (``cpu-int8`` / ``cpu-int4``; ``{}`` for any other: fp32 heads stay on the host as they are);
    ``files``: the model root's ``ModelFiles``; ``int4`` as ``cpu_stages.quantize_stage``."""
    import onnxruntime

    from rkspeech.contracts.head import HeadContract
    from rkspeech.convert.cpu_quant import quantize_step_graph
    from rkspeech.export.head_onnx import export_head_onnx
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config

    variant = cpu_variant(placement)
    if variant not in ("int8", "int4"):
        return {}
    options = stage_options(placement, int4)
    cfg = read_tts_config(files)
    cp = cfg.code_predictor
    folder = Path(folder)
    dst = {str(j): folder / f"head{j}.{variant}.onnx" for j in range(1, cp.num_code_groups)}

    def work():
        from rkspeech.runtime.tts.host_weights import HostWeights

        w = HostWeights(files.weights, cfg)
        folder.mkdir(parents=True, exist_ok=True)
        out = {}
        from rkspeech.core.child import scratch

        with scratch(folder, prefix=".heads.") as tmp:  # owner-locked: swept if a SIGKILL leaves it
            for key, path in dst.items():
                j = int(key)
                contract = HeadContract(index=j, hidden=cp.hidden_size, vocab_size=cp.vocab_size,
                                        fingerprint=w.cp_fingerprint)
                src = export_head_onnx(w.cp_head[j - 1], contract, Path(tmp) / f"head{j}.onnx")
                out[key] = {**quantize_step_graph(src, path, options),
                            "source": f"talker.code_predictor.lm_head.{j - 1}.weight"}
        return out

    per_head = stages.run(f"code_predictor_heads_{variant}",
                          {"options": asdict(options), "ort": onnxruntime.__version__},
                          [Path(files.config), Path(files.weights)], lambda: list(dst.values()), work)
    first = per_head[next(iter(per_head))]
    record = {k: first[k] for k in SHARED_KEYS if k in first}
    record.update(heads=len(per_head), bytes_before=sum(r["bytes_before"] for r in per_head.values()),
                  bytes_after=sum(r["bytes_after"] for r in per_head.values()))
    return {"heads": dst, "record": record}


def host_heads_record(files) -> dict:
    """What the numpy host loop reads a frame beside the graphs (fp32 numpy matrices): the talker's
    codec head, the code predictor's heads, and its input projection (once per step) when the two
    hidden sizes differ; ``estimate --plan`` prices it as a CPU stage."""
    from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config

    cfg = read_tts_config(files)
    t, c = cfg.talker, cfg.code_predictor
    rec = {"codec_head": [t.vocab_size, t.hidden_size],
           "code_predictor_heads": [c.num_code_groups - 1, c.vocab_size, c.hidden_size]}
    n = t.vocab_size * t.hidden_size + (c.num_code_groups - 1) * c.vocab_size * c.hidden_size
    if c.hidden_size != t.hidden_size:
        rec["code_predictor_projection"] = [c.num_code_groups, c.hidden_size, t.hidden_size]
        n += c.num_code_groups * c.hidden_size * t.hidden_size
    return {**rec, "dtype": "float32", "bytes_per_frame": 4 * n}
