"""The accuracy map as a PNG: SNR along the graph (top) and the largest |activation| per layer
against fp16's range (bottom), blocks shaded and labelled.  matplotlib (Agg), imported here only."""

from __future__ import annotations

import math

from rkspeech.accuracy.fp16_model import FP16_MAX
from rkspeech.accuracy.metrics import FP16_MIN_NORMAL, snr_of


def require_matplotlib() -> None:
    """Refuse ``--plot`` in one line, before any work, where matplotlib is missing."""
    import importlib.util

    from rkspeech.core.errors import RkspeechError

    if importlib.util.find_spec("matplotlib") is None:
        raise RkspeechError("--plot needs matplotlib: pip install matplotlib==3.11.2 (requirements/host.txt)")


def write_plot(rep: dict, path) -> None:
    """Draw ``rep`` (``analyse.analyse``) into the PNG at ``path`` (atomic write)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rkspeech.core.atomic import atomic_path

    layers, blocks = rep["layers"], rep["blocks"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    x = list(range(len(layers)))
    top.plot(x, [snr_of(e["fp16_model"], math.nan) for e in layers], color="0.6", lw=0.8,
             label="fp16 storage model, each layer (cumulative)")
    ends = [b["layers"][1] - 1 for b in blocks]
    for key, style, label in (("sim_cumulative", dict(color="tab:red", marker="o"), "simulator, cumulative"),
                              ("sim_local", dict(color="tab:orange", marker="s", ls="--"), "simulator, local"),
                              ("fp16_model_cumulative", dict(color="tab:blue", marker="^"), "fp16 model, cumulative"),
                              ("fp16_model_local", dict(color="tab:cyan", marker="v", ls="--"), "fp16 model, local")):
        ys = [snr_of(b.get(key), math.nan) for b in blocks]
        if any(not math.isnan(y) for y in ys):
            top.plot(ends, ys, label=label, **style)
    whole = [snr_of(d.get("sim_whole"), math.nan) for d in rep["graph_outputs"].values()]
    whole = [w for w in whole if not math.isnan(w)]
    if whole:
        top.axhline(min(whole), color="k", ls=":", lw=1, label=f"whole graph on the simulator ({min(whole):.1f} dB)")
    top.set_ylabel("SNR vs fp32 (dB)")
    top.grid(alpha=0.3)
    top.legend(fontsize=8, loc="lower left")
    top.set_title(f"{rep['model']} - {rep['target']} fp16, {rep['pieces']} blocks; "
                  f"block points: the block's worst output", fontsize=9)
    bottom.semilogy(x, [max(e["max_abs"], 1e-12) for e in layers], color="tab:green", lw=0.8,
                    label="largest |activation| (fp32)")
    bottom.axhline(FP16_MAX, color="tab:red", ls="--", lw=1, label="fp16 max (65504)")
    bottom.axhline(FP16_MIN_NORMAL, color="tab:purple", ls=":", lw=1, label="fp16 smallest normal")
    bottom.set_ylabel("max |x|")
    bottom.set_xlabel("layer (node order)")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=8, loc="lower left")
    for b in blocks:
        a, z = b["layers"]
        for ax in (top, bottom):
            if b["index"] % 2:
                ax.axvspan(a - 0.5, z - 0.5, color="0.93", zorder=0)
        top.annotate(f"{b['index']}: {b['label']}"[:40], ((a + z - 1) / 2, 1.0), xycoords=("data", "axes fraction"),
                     rotation=90, fontsize=7, ha="center", va="top", color="0.3")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=72, format="png")
    plt.close(fig)
