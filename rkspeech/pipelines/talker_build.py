"""The talker stage of ``rkspeech build qwen3-tts``: step graphs -> lint -> .rknn -> verify.

``build_talker(stages, files, out, ...)`` writes under ``out/talker/``: ``onnx/`` (prefill B and
decode B=1 graphs, ``export.talker_onnx``), ``rknn/`` (``convert.conversion.convert``, the
vocoder build's conversion path, contract in the custom string), and returns a JSON-able report
(``artifacts``, ``placement``, ``build``, ``rknn``, ``verify``; per graph under ``graphs``).
Each stage is resumable through the caller's ``StageRunner``.

Verification (``verify_talker``): greedy ``TTSModel`` codes with the talker on onnxruntime must
equal torch's (``codes_identical_ort``; a mismatch fails the build); with .rknn graphs the same
talker inputs replayed through the simulator give the codec_head logit SNR against torch
(``logit_snr_db``, teacher forced) and a free-running greedy run's code agreement.
The built graphs open through the runtime's ``open_talker(artifacts, backend)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rkspeech.contracts.read import read_contract
from rkspeech.contracts.talker import TalkerContract
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET
from rkspeech.pipelines.sequence import Graph, run_sequence
from rkspeech.runtime.tts.open_stages import TALKER_ROLES as ROLES
from rkspeech.runtime.tts.open_stages import open_talker

VERIFY_TEXT = "Hello there, this is a check of the talker step graph."


def onnx_vs_torch(step, path, *, start: int | None = None) -> dict:
    """Max abs difference of ``hidden`` and ``kv_new`` between the exported graph on onnxruntime
    and the torch ``step`` on ``step.dummy_inputs(start)``."""
    import numpy as np
    import torch

    from rkspeech.runtime.runners import open_runner

    contract = step.contract()
    inputs = step.dummy_inputs(start)
    with torch.no_grad():
        want = [t.numpy() for t in step.eval()(*inputs)]
    with open_runner("ort", path, threads=1) as r:
        got = r.infer({n: t.numpy() for n, t in zip(contract.input_names, inputs)})
    return {name: float(np.abs(got[name] - w).max()) for name, w in zip(contract.output_names, want)}

def build_talker(stages, files, out: Path, *, target: str, capacity: int, prefill_B: int, skip_rknn: bool,
                 skip_sim: bool, timeout: float | None, verify_frames: int = 24,
                 kv_layout: str = "heads", cache_io: str = "flat", model=None, fp16_rescale: list | None = None) -> dict:
    """Export, lint, convert (unless ``skip_rknn``) and verify (unless ``skip_sim``) the talker.
    ``model``: a ``LazyTTSModel`` shared with the build's other stages (default: one of its own);
    ``fp16_rescale``: the exact rescale it carries (``pipelines.fp16_headroom``; in the export's key)."""
    if model is None:
        from rkspeech.models.qwen3_tts.generate import LazyTTSModel

        model = LazyTTSModel(files)
    if capacity < 2 or prefill_B < 2 or prefill_B > capacity:
        raise RkspeechError(f"talker capacity must be >= 2 and 2 <= prefill B <= capacity, got capacity={capacity}, "
                            f"B={prefill_B}")
    root = Path(out) / "talker"
    onnx_dir, rknn_dir = root / "onnx", root / "rknn"
    onnx_paths = {"prefill": onnx_dir / f"talker_prefill_B{prefill_B}_cap{capacity}.onnx",
                  "decode": onnx_dir / f"talker_decode_B1_cap{capacity}.onnx"}
    ckpt = [files.config, files.weights]
    export_args = {"capacity": capacity, "B": prefill_B, "kv_layout": kv_layout, "cache_io": cache_io,
                   **({"fp16_rescale": fp16_rescale} if fp16_rescale else {})}

    def do_export():
        from rkspeech.export.talker_onnx import export_talker_pair
        from rkspeech.export.vocoder_onnx import graph_summary
        from rkspeech.stepgraph.talker_step import TalkerStep

        stack = model.get().net.talker.model
        paths = export_talker_pair(stack, onnx_dir, capacity=capacity, prefill_B=prefill_B, kv_layout=kv_layout,
                                   cache_io=cache_io)
        rep = {}
        for role, path in paths.items():
            step = TalkerStep(stack, capacity=capacity, B=prefill_B if role == "prefill" else 1,
                              kv_layout=kv_layout, cache_io=cache_io)
            diff = onnx_vs_torch(step, path)
            if max(diff.values()) > 1e-3:
                raise RkspeechError(f"talker {role} graph: onnxruntime differs from torch by {diff}")
            s = graph_summary(path)
            rep[role] = {"onnx": str(path), "nodes": s["nodes"], "bytes": s["bytes"], "ort_max_abs_diff": diff,
                         "contract": json.loads(step.contract().to_json())}
        return rep

    export_rep = stages.run("talker_export", export_args, ckpt, lambda: list(onnx_paths.values()), do_export)

    rknn_paths = {role: rknn_dir / f"{p.stem}_{target}.rknn" for role, p in onnx_paths.items()}
    graphs = [Graph(role, path, rknn_paths[role], read_contract(path, TalkerContract).to_json())
              for role, path in onnx_paths.items()]
    # the golden replays: onnxruntime's when the simulator is skipped, else recorded by the verify
    # stage's own simulator build (no separate one)
    seq = run_sequence(stages, graphs, target=target, timeout=timeout, prefix="talker_", convert=not skip_rknn,
                       golden=None if skip_rknn else ("ort" if skip_sim else None))
    lint_rep, convert_reps = seq["lint"], seq["convert"]

    artifacts = {role: {"onnx": str(onnx_paths[role]), "rknn": None if skip_rknn else str(rknn_paths[role])}
                 for role in ROLES}
    verify_rep = None
    if not skip_sim:
        def do_verify():
            return verify_talker(model.get(), artifacts, sim=not skip_rknn, frames=verify_frames, target=target,
                                 sim_log=str(root / "simulator.log"), goldens=None if skip_rknn else graphs)

        from rkspeech.plan.integrity import golden_path

        inputs = ckpt + list(onnx_paths.values()) + ([] if skip_rknn else list(rknn_paths.values()))
        verify_rep = stages.run("talker_verify", {"frames": verify_frames, "sim": not skip_rknn, "target": target,
                                                  "golden": 1}, inputs,
                                lambda: [] if skip_rknn else [golden_path(p) for p in rknn_paths.values()], do_verify)
        if not verify_rep.get("codes_identical_ort"):
            raise RkspeechError(f"talker verify: greedy codes through onnxruntime differ from torch "
                                f"({verify_rep.get('ort_frames_equal')} frames equal); see {root}")
    return _report(artifacts, export_rep, lint_rep, convert_reps, verify_rep, capacity, prefill_B)


def _report(artifacts, export_rep, lint_rep, convert_reps, verify_rep, capacity, prefill_B) -> dict:
    graphs = {}
    for role in ROLES:
        g = {"onnx": export_rep[role], "lint": {k: lint_rep[role][k] for k in ("errors", "warnings")}}
        c = convert_reps.get(role)
        if c:
            p = c["placement"]
            g["placement"] = {"npu_ops": p.get("npu_ops"), "cpu_ops": p.get("cpu_ops"),
                              "cpu_op_types": p.get("cpu_op_types", {}), "estimate": p.get("estimate")}
            g["build"] = {k: c["build"][k] for k in ("regtask_overflow_lines", "seconds", "peak_rss_mb")}
            g["rknn"] = {"bytes": c["rknn"]["bytes"], "has_contract": c["rknn"]["has_contract"]}
        graphs[role] = g
    rep = {"capacity": capacity, "prefill_B": prefill_B, "artifacts": artifacts, "graphs": graphs,
           "verify": verify_rep}
    if convert_reps:
        conv = [graphs[r] for r in ROLES if "placement" in graphs[r]]
        types: dict[str, int] = {}
        for g in conv:
            for k, v in g["placement"]["cpu_op_types"].items():
                types[k] = types.get(k, 0) + v
        rep["placement"] = {"npu_ops": sum(g["placement"]["npu_ops"] or 0 for g in conv),
                            "cpu_ops": sum(g["placement"]["cpu_ops"] or 0 for g in conv), "cpu_op_types": types,
                            **{r: graphs[r]["placement"] for r in ROLES if "placement" in graphs[r]}}
        rep["build"] = {"regtask_overflow_lines": sum(g["build"]["regtask_overflow_lines"] or 0 for g in conv),
                        "seconds": round(sum(g["build"]["seconds"] or 0 for g in conv), 1),
                        "peak_rss_mb": max((g["build"]["peak_rss_mb"] or 0 for g in conv), default=None),
                        **{r: graphs[r]["build"] for r in ROLES if "build" in graphs[r]}}
        rep["rknn"] = {"bytes": sum(g["rknn"]["bytes"] for g in conv),
                       **{r: graphs[r]["rknn"] for r in ROLES if "rknn" in graphs[r]}}
    return rep


def verify_talker(tts, artifacts: dict, *, sim: bool, frames: int, target: str = DEFAULT_TARGET,
                  sim_log: str | None = None, text: str = VERIFY_TEXT, goldens=None) -> dict:
    """``tts``: the loaded ``TTSModel`` (its talker backend is torch again on return).
    Greedy codes torch vs onnxruntime (identical?); with ``sim``: the torch run's talker inputs
    replayed through the simulator (codec_head logit SNR, teacher forced) and a free-running
    simulator run (fraction of code entries equal to torch's over the common frames), both on one
    simulator build of each graph, which also records ``goldens`` (``sequence.Graph`` per role)."""
    import torch

    from rkspeech.core.capture import RecordingTalker, sample_request, step_sine_clip
    from rkspeech.core.compare import json_number, snr_db
    from rkspeech.models.qwen3_tts.backends import TorchTalker
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    model = tts.net.talker.model
    kw = dict(sample_request(tts, language=None, ref_audio=step_sine_clip()),
              options=GenerationOptions.greedy(max_new_tokens=frames + 1))
    rec = RecordingTalker(TorchTalker(tts.net.talker))
    tts.use_backends(talker=rec)
    ref = tts.generate_codes(text, **kw)
    rep: dict = {"frames": int(ref.shape[0]), "text": text}

    def run(talker):
        tts.use_backends(talker=talker)
        try:
            return tts.generate_codes(text, **kw)
        finally:
            tts.use_backends(talker=TorchTalker(tts.net.talker))
            talker.close()

    got = run(open_talker(artifacts, "ort", model=model, threads=1))
    same = min(len(got), len(ref))
    rep["codes_identical_ort"] = bool(got.shape == ref.shape and np.array_equal(got, ref))
    rep["ort_frames_equal"] = int(np.sum(np.all(got[:same] == ref[:same], axis=1)))
    if not sim:
        return rep
    head = tts.net.talker.codec_head
    g = open_talker(artifacts, "sim", model=model, target=target, log_path=sim_log)
    try:
        g.start(0)
        refs, outs = [], []
        for embeds, hidden in rec.calls:
            outs.append(g.forward(embeds))
            refs.append(hidden)
        if goldens:
            from rkspeech.pipelines.sequence import record_sim_golden

            runners = {"decode": g.decode[0], **({"prefill": g.prefill[0]} if g.prefill else {})}
            rep["golden"] = {x.role: record_sim_golden(x, runners[x.role], target=target) for x in goldens}
    except BaseException:
        g.close()
        raise
    free = run(g)  # the same simulator builds, run free (run() closes them)
    with torch.no_grad():
        lr = head(torch.from_numpy(np.stack(refs))).numpy()
        lg = head(torch.from_numpy(np.stack(outs))).numpy()
    rep["logit_snr_db"] = json_number(snr_db(lr, lg))
    rep["hidden_snr_db"] = json_number(snr_db(np.stack(refs), np.stack(outs)))
    rep["greedy_argmax_agreement"] = float(np.mean(lr.argmax(-1) == lg.argmax(-1)))
    n = min(len(free), len(ref))
    rep["sim_frames"] = int(len(free))
    rep["code_agreement_sim"] = float(np.mean(free[:n] == ref[:n])) if n else 0.0
    rep["codes_identical_sim"] = bool(free.shape == ref.shape and np.array_equal(free, ref))
    return rep
