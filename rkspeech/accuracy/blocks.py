"""The accuracy map's measurements: the graph in consecutive pieces, each run four ways.

How: ``export.split.split_onnx`` cuts the graph into K pieces of about equal activation volume
that chain back to the whole graph.  Each piece runs

* in fp32 (onnxruntime, every intermediate exposed): the reference, and the largest
  |activation| of every layer against fp16's range;
* in the fp16 storage model (``fp16_model``), per layer: every intermediate compared with fp32;
* on the simulator (one child build per piece), twice from one build: fed the exact fp32
  outputs of the pieces before it (local: this block's own error) and fed the simulator's own
  outputs of those pieces (cumulative: the error so far, what the whole graph would show).

The pieces meet in fp16 at the cuts (the simulator's graph boundary is fp16), so a local figure
includes rounding its inputs to fp16, as the NPU stores them anyway.  A cut loses the compiler's
fusions across it, so the cumulative figure of the last block is checked against the whole
graph on the simulator (``whole``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from rkspeech.accuracy import metrics
from rkspeech.accuracy.fp16_model import OrtGraph, batches, float_outputs, fp16_storage, with_outputs
from rkspeech.accuracy.options import AccuracyOptions
from rkspeech.accuracy.pieces import cut
from rkspeech.core import progress
from rkspeech.export.split import FLAT_SUFFIX


def _display(name: str) -> str:
    return name[: -len(FLAT_SUFFIX)] if name.endswith(FLAT_SUFFIX) else name


def _helper(node) -> bool:
    """A Reshape / Constant that split_onnx added at a cut (not a layer of the model)."""
    return (any(i.endswith(FLAT_SUFFIX) for i in node.input) or any(o.endswith(FLAT_SUFFIX) for o in node.output)
            or any(o.endswith(FLAT_SUFFIX + "__shape") for o in node.output))


def label(names: list[str], drop: int = 0) -> str:
    """A block's name from its torch-exported node names: the module path they share and the
    modules under it ('/blocks.0/attn_ln/..', '/blocks.0/attn/..', '/blocks.0/Add' ->
    'blocks.0: attn_ln, attn'), ``drop`` leading components left out; unnamed nodes are skipped."""
    paths = [[p for p in n.split("/") if p][drop:-1] for n in names]
    paths = [p for p in paths if p]
    if not paths:
        return names[0] if names else ""
    common = []
    for parts in zip(*paths):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    nexts = list(dict.fromkeys(p[len(common)] for p in paths if len(p) > len(common)))
    tail = ", ".join(nexts) if len(nexts) <= 3 else f"{nexts[0]} .. {nexts[-1]}"
    head = "/".join(common)
    return f"{head}: {tail}" if head and tail else head or tail


def common_depth(names: list[str]) -> int:
    """How many leading path components every node name shares (dropped from labels)."""
    paths = [[p for p in n.split("/") if p][:-1] for n in names if n.startswith("/")]
    if not paths:
        return 0
    k = 0
    while all(len(p) > k + 1 for p in paths) and len({p[k] for p in paths}) == 1:
        k += 1
    return k


def _open_sim(path: Path, o: AccuracyOptions):
    from rkspeech.runtime.runners import open_runner

    return open_runner("sim", path, target=o.target, dtype="fp16", memory_limit_mb=o.memory_limit_mb,
                       log_path=o.sim_log)


def _worst(per_output: dict, key: str) -> dict:
    """The output with the lowest SNR (non-finite values first: fp16 overflow)."""
    def rank(d):
        d = d[key]
        if d.get("nonfinite"):
            return -1e9
        return 1e9 if d.get("snr_db") is None else d["snr_db"]

    name = min(per_output, key=lambda n: rank(per_output[n]))
    return {**per_output[name][key], "output": name}


def map_pieces(o: AccuracyOptions, feed: dict[str, np.ndarray]) -> dict:
    """Run every piece four ways; return {"blocks": [...], "layers": [...], "graph_outputs": ...}."""
    import onnx

    owned_tmp = None
    work = o.work_dir
    if work is None:
        from rkspeech.core.child import own

        from rkspeech.core.workdirs import make_workdir

        # owner-locked: one a SIGKILLed run left is swept by the next (core.workdirs.make_workdir)
        work, lock = make_workdir(tempfile.gettempdir(), prefix="rkspeech-accuracy-")
        owned_tmp = own(paths=[work])
    try:
        with progress.stage(f"cut the graph into {o.pieces} piece(s)"):
            paths = cut(Path(o.model), o.pieces, Path(work))
        all_names = [n.name for p in paths for n in onnx.load(os.fspath(p)).graph.node if not _helper(n)]
        drop = common_depth(all_names)
        env32 = dict(feed)
        env16 = dict(feed)
        envsim = dict(feed)
        blocks, layers = [], []
        for k, path in enumerate(paths):
            model = onnx.load(os.fspath(path))
            blocks.append(_one_piece(o, k, len(paths), path, model, env32, env16, envsim, layers, drop))
        graph_outputs = [vi.name for vi in onnx.load(os.fspath(o.model), load_external_data=False).graph.output]
        return {"blocks": blocks, "layers": layers, "env32": {n: env32[n] for n in graph_outputs},
                "env16": {n: env16[n] for n in graph_outputs},
                "envsim": {n: envsim[n] for n in graph_outputs if n in envsim}}
    finally:
        if owned_tmp is not None:
            from rkspeech.core.child import release

            shutil.rmtree(work, ignore_errors=True)
            lock.close()
            release(owned_tmp)


def _one_piece(o, k, total, path, model, env32, env16, envsim, layers, drop) -> dict:
    label_nodes = [n for n in model.graph.node if n.op_type != "Constant" and not _helper(n)]
    outs = [vi.name for vi in model.graph.output]
    inter = float_outputs(model)
    half_model = fp16_storage(model, list(inter))
    with progress.stage(f"block {k + 1}/{total}: fp32 and fp16 model (onnxruntime)"):
        ref = OrtGraph(model, o.threads).run(env32)
        half = OrtGraph(half_model, o.threads, fp16_inputs=True)
        f16_cum = half.run(env16)
        f16_loc = half.run(env32)
        del half
        stats: dict[str, dict] = {}
        # the intermediates in groups that fit the budget: all of a published-size vocoder
        # piece's at once took onnxruntime past 18 GB (measured, killed by the kernel)
        for group in batches(inter, int(o.layer_budget_mb * 2**20 / 4)):
            r32 = OrtGraph(with_outputs(model, group), o.threads).run(env32)
            r16 = OrtGraph(with_outputs(half_model, group), o.threads, fp16_inputs=True).run(env16)
            for t in group:
                stats[t] = {**metrics.activation(r32[t]), "fp16_model": metrics.compare(r32[t], r16[t])}
            del r32, r16
    first_layer = len(layers)
    peak = {"max_abs": 0.0}
    for n in label_nodes:
        t = next((x for x in n.output if x in stats), None)
        if t is None:
            continue
        entry = {"index": len(layers), "block": k, "node": n.name or t, "op": n.op_type, "tensor": t, **stats[t]}
        layers.append(entry)
        if entry["max_abs"] >= peak["max_abs"]:
            peak = {k2: entry[k2] for k2 in ("max_abs", "headroom_db", "subnormal_fraction", "tensor", "node")}
    float_outs = [n for n in outs if ref[n].dtype == np.float32]
    sim_loc = sim_cum = None
    if o.simulate:
        with progress.stage(f"block {k + 1}/{total}: simulator build and two runs (local, cumulative)"), \
                _open_sim(path, o) as sim:
            names = list(sim.input_specs())
            sim_loc = sim.infer({n: env32[n] for n in names})
            sim_cum = sim.infer({n: envsim[n] for n in names})
    per_output = {}
    for n in float_outs:
        d = {"fp16_model_local": metrics.compare(ref[n], f16_loc[n]),
             "fp16_model_cumulative": metrics.compare(ref[n], f16_cum[n])}
        if sim_loc is not None:
            d["sim_local"] = metrics.compare(ref[n], sim_loc[n])
            d["sim_cumulative"] = metrics.compare(ref[n], sim_cum[n])
            a, b = d["sim_local"]["snr_db"], d["fp16_model_local"]["snr_db"]
            d["sim_minus_fp16_local_db"] = None if a is None or b is None else round(a - b, 2)
        per_output[_display(n)] = d
    for n in outs:
        env32[n] = ref[n]
        env16[n] = f16_cum[n]
        if sim_cum is not None:
            envsim[n] = sim_cum[n]
    ops = Counter(n.op_type for n in label_nodes)
    name = label([n.name for n in label_nodes], drop)
    block = {
        "index": k,
        "label": name,
        "first_node": label_nodes[0].name if label_nodes else None,
        "last_node": label_nodes[-1].name if label_nodes else None,
        "nodes": len(label_nodes),
        "layers": [first_layer, len(layers)],
        "ops": dict(ops.most_common(6)),
        "outputs": list(per_output),
        "max_activation": peak,
        "overflow": [e["tensor"] for e in layers[first_layer:] if e["headroom_db"] is not None and e["headroom_db"] < 0],
        "per_output": per_output,
    }
    if per_output:
        for key in ("fp16_model_local", "fp16_model_cumulative", "sim_local", "sim_cumulative"):
            if key in next(iter(per_output.values())):
                block[key] = _worst(per_output, key)
        gaps = [d["sim_minus_fp16_local_db"] for d in per_output.values() if d.get("sim_minus_fp16_local_db") is not None]
        # where the simulator loses more than fp16 storage alone (most negative output)
        block["sim_minus_fp16_local_db"] = min(gaps) if gaps else None
    return block
