"""The accuracy map for people: a summary, the worst blocks and layers as tables, the JSON."""

from __future__ import annotations

from rkspeech.accuracy.metrics import snr_of


def _db(d: dict | None) -> str:
    if not d:
        return "-"
    if d.get("nonfinite"):
        return f"inf/NaN x{d['nonfinite']}"
    if d.get("identical"):
        return "exact"
    return f"{d['snr_db']:.1f}" if d.get("snr_db") is not None else "-"


def summary(rep: dict) -> dict:
    """Headline figures: per graph output the simulator (whole, pieces) and fp16-model SNR,
    the blocks with the lowest local simulator SNR, the layers nearest fp16's largest value."""
    blocks = rep["blocks"]
    key = "sim_local" if rep["simulated"] else "fp16_model_local"

    def rank(b):
        d = b.get(key) or {}
        return -1e9 if d.get("nonfinite") else (1e9 if d.get("snr_db") is None else d["snr_db"])

    layers = sorted(rep["layers"], key=lambda e: -e["max_abs"])
    return {
        "outputs": {n: {k: snr_of(d.get(k)) for k in ("sim_whole", "sim_pieces", "fp16_model")}
                    for n, d in rep["graph_outputs"].items()},
        "worst_blocks": [b["index"] for b in sorted(blocks, key=rank)[:3]],
        "largest_activations": [{"tensor": e["tensor"], "op": e["op"], "max_abs": e["max_abs"],
                                 "headroom_db": e["headroom_db"]} for e in layers[:5]],
        "overflow": [t for b in blocks for t in b["overflow"]],
        # blocks where the simulator's local SNR is > 3 dB below fp16 storage alone: the
        # compiler's implementation, not fp16 storage, loses accuracy there
        "sim_worse_than_fp16": [b["index"] for b in blocks
                                if (b.get("sim_minus_fp16_local_db") or 0.0) < -3.0],
        "held_out_headroom": _held_out_summary(rep.get("held_out_headroom")),
    }


def _held_out_summary(h: dict | None) -> dict | None:
    """The build's held-out peaks in brief: the largest before and after its rescale, what is over."""
    if not h or h.get("not_measured"):
        return h

    def largest(rows):
        return max(rows, key=lambda r: r["peak"]) if rows else None

    return {"graph": h["graph"], "texts": h["texts"], "frames": h["frames"], "largest": largest(h.get("top") or []),
            "largest_after_rescale": largest(h.get("top_after") or []), "rescale": h.get("rescale"),
            "over": h.get("over")}


def headline(rep: dict, worst: int = 3, layers: int = 5) -> dict:
    """The map in a few lines, for a build report: per graph output the final SNR (simulator
    whole graph / pieces chained, fp16 storage model), the ``worst`` blocks by local SNR with
    their labels, the ``layers`` layers with the lowest fp16-storage-model SNR (cumulative: the
    only per-layer figure the map has), the largest activations, fp16 overflow."""
    s = summary(rep)
    by_index = {b["index"]: b for b in rep["blocks"]}
    finite = [e for e in rep["layers"] if snr_of(e.get("fp16_model")) is not None
              or (e.get("fp16_model") or {}).get("nonfinite")]
    finite.sort(key=lambda e: -1e9 if e["fp16_model"].get("nonfinite") else e["fp16_model"]["snr_db"])
    return {
        "pieces": rep["pieces"],
        "simulated": rep["simulated"],
        "inputs": rep["inputs"],
        "final_snr_db": {n: {k: v for k, v in d.items() if v is not None} for n, d in s["outputs"].items()},
        "worst_blocks": [{"index": i, "label": by_index[i]["label"],
                          **{k: snr_of(by_index[i].get(k)) for k in
                             ("sim_local", "sim_cumulative", "fp16_model_local", "fp16_model_cumulative")}}
                         for i in s["worst_blocks"][:worst]],
        "worst_layers": [{"node": e["node"], "op": e["op"], "block": e["block"],
                          "fp16_model_snr_db": snr_of(e["fp16_model"]),
                          "nonfinite": e["fp16_model"].get("nonfinite", 0)} for e in finite[:layers]],
        "largest_activations": s["largest_activations"][:3],
        "overflow": s["overflow"],
        "sim_worse_than_fp16": s["sim_worse_than_fp16"],
    }


def print_report(rep: dict, worst: int = 8) -> None:
    from rkspeech.core.reporting import print_table

    rows = []
    for n, d in rep["graph_outputs"].items():
        rows.append((n, _db(d.get("sim_whole")), _db(d.get("sim_pieces")), _db(d.get("fp16_model")),
                     f"{d['max_abs']:.4g}"))
    sim = f"{rep['target']} simulator" if rep["simulated"] else "no simulator"
    print_table(f"{rep['model']}: SNR (dB) of each graph output against fp32 ({sim}, "
                f"{rep['pieces']} pieces, inputs {rep['inputs']})", rows,
                headers=("output", "sim whole", "sim pieces", "fp16 model", "max |x|"))
    key = "sim_local" if rep["simulated"] else "fp16_model_local"

    def rank(b):
        d = b.get(key) or {}
        return -1e9 if d.get("nonfinite") else (1e9 if d.get("snr_db") is None else d["snr_db"])

    rows = []
    for b in sorted(rep["blocks"], key=rank)[:worst]:
        peak = b["max_activation"]
        gap = b.get("sim_minus_fp16_local_db")
        rows.append((str(b["index"]), b["label"][:22], _db(b.get("sim_local")), _db(b.get("sim_cumulative")),
                     _db(b.get("fp16_model_local")), _db(b.get("fp16_model_cumulative")),
                     "-" if gap is None else f"{gap:+.1f}",
                     f"{peak.get('max_abs', 0):.4g}", "OVER" if b["overflow"] else
                     (f"{peak['headroom_db']:.0f} dB" if peak.get("headroom_db") is not None else "-")))
    headers = ("#", "block", "sim loc", "sim cum", "f16 loc", "f16 cum", "sim-f16", "max|x|", "room")
    if not rep["simulated"]:  # the simulator's columns would be empty
        keep = [0, 1, 4, 5, 7, 8]
        headers = tuple(headers[i] for i in keep)
        rows = [tuple(r[i] for i in keep) for r in rows]
    print_table("worst blocks, lowest local SNR first (dB against fp32, each block's worst output; sim: "
                "simulator, f16: fp16 storage model; loc: exact inputs, cum: error so far; room: fp16 headroom)",
                rows, headers=headers)
    over = summary(rep)["overflow"]
    if over:
        print(f"fp16 overflow: {len(over)} tensor(s) above 65504 in fp32, first {over[:3]}")
    print_held_out(rep.get("held_out_headroom"))


def print_held_out(h: dict | None, rows: int = 5) -> None:
    """The build's fp16 headroom over held-out inputs (``held_out``), when the graph has a build."""
    from rkspeech.core.reporting import print_table

    if not h:
        return
    if h.get("not_measured"):
        print(f"fp16 headroom over held-out inputs ({h['graph']}): not measured: {h['not_measured']}")
        return
    after = {r["tensor"]: r for r in h.get("top_after") or []}
    table = [(r["tensor"], f"{r['peak']:.6g}", f"{r['ratio']:.3g}",
              f"{after[r['tensor']]['ratio']:.3g}" if r["tensor"] in after else "-")
             for r in (h.get("top") or [])[:rows]]
    print_table(f"fp16 headroom of the {h['graph'].replace('_', ' ')} over the build's held-out inputs "
                f"({h['texts']} texts x {h['frames']} frames, fp32 peaks; {h['build_report']})", table,
                headers=("tensor (torch)", "peak", "x 65504", "after rescale"))
    shifts = "; ".join(f"layer {r['layer']} channels {r['channels']} / 2^{r['shift']}" for r in h.get("rescale") or [])
    over = h.get("over") or []
    print(f"rescale folded into the graph: {shifts or 'none needed'}; above 65504 after it: "
          + (", ".join(f"{n} {v:g}" for n, v in over) if over else "nothing"))


def to_json(rep: dict) -> dict:
    """The report as written: the summary first."""
    return {"summary": summary(rep), **rep}
