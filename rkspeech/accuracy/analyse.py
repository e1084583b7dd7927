"""The accuracy map of one graph: checks, pieces, whole-graph check, one report dict.

The per-block figures come from the graph's pieces (``blocks``); they are checked against the
whole graph: the fp32 pieces chained against onnxruntime on the whole graph (must be ~exact),
and the simulator's cumulative figure of each graph output against the whole graph on the
simulator (they differ only by the fusions a cut loses).
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.accuracy import metrics
from rkspeech.accuracy.options import AccuracyOptions
from rkspeech.core import progress
from rkspeech.core.errors import RkspeechError


def _validate(o: AccuracyOptions) -> None:
    from rkspeech.core.targets import TARGETS

    if o.target not in TARGETS:
        raise RkspeechError(f"unknown target {o.target!r}; choose one of {', '.join(TARGETS)}")
    if o.pieces < 1:
        raise RkspeechError(f"--pieces must be >= 1, got {o.pieces}")


def analyse(o: AccuracyOptions) -> dict:
    """Measure the map; returns the report dict (``report.to_json`` makes it JSON-ready)."""
    import onnx

    from rkspeech.accuracy.blocks import map_pieces
    from rkspeech.accuracy.fp16_model import OrtGraph
    from rkspeech.accuracy.inputs import check_model, default_inputs, load_inputs

    from rkspeech.accuracy.held_out import held_out_headroom

    _validate(o)
    ins, outs = check_model(o.model)
    held_out = held_out_headroom(o.model, o.plan)  # before the map: a --plan that lists no such graph is refused
    if o.inputs and o.stepwise:
        raise RkspeechError("give --inputs or --stepwise, not both")
    if o.inputs:
        feed, source = load_inputs(o.inputs, ins), os.fspath(o.inputs)
    elif o.stepwise:
        from rkspeech.accuracy.step_feed import stepwise_feed

        with progress.stage(f"feed: step {o.stepwise} of a stepwise onnxruntime decode"):
            feed = stepwise_feed(o.model, o.stepwise, ins, o.seed, o.threads)
        source = f"step {o.stepwise} of a stepwise onnxruntime decode of random codes (seed {o.seed})"
    else:
        feed, source = default_inputs(ins, o.seed), f"random (seed {o.seed})"
    res = map_pieces(o, feed)
    with progress.stage("whole graph: fp32 (onnxruntime)"):
        ref = OrtGraph(onnx.load(os.fspath(o.model)), o.threads).run(feed)
    sim_whole = None
    if o.simulate and o.whole_graph:
        from rkspeech.accuracy.blocks import _open_sim

        with progress.stage("whole graph: simulator build and run"), _open_sim(Path(o.model), o) as sim:
            sim_whole = sim.infer(feed)
    per_output = {}
    for name in outs:
        if ref[name].dtype.kind != "f":
            continue
        d = {"pieces_fp32_vs_whole_fp32": metrics.compare(ref[name], res["env32"][name]),
             "fp16_model": metrics.compare(ref[name], res["env16"][name]),
             **metrics.activation(ref[name])}
        if name in res["envsim"]:
            d["sim_pieces"] = metrics.compare(ref[name], res["envsim"][name])
        if sim_whole is not None:
            d["sim_whole"] = metrics.compare(ref[name], sim_whole[name])
            d["sim_pieces_vs_sim_whole"] = metrics.compare(sim_whole[name], res["envsim"][name])
            a, b = d["sim_pieces"]["snr_db"], d["sim_whole"]["snr_db"]
            d["pieces_minus_whole_db"] = None if a is None or b is None else round(a - b, 2)
        per_output[name] = d
    return {
        "model": os.fspath(o.model),
        "target": o.target,
        "inputs": source,
        "pieces": len(res["blocks"]),
        "simulated": o.simulate,
        "graph_outputs": per_output,
        "blocks": res["blocks"],
        "layers": res["layers"],
        "held_out_headroom": held_out,
    }
