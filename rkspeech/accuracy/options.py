"""Typed options of the accuracy map (the CLI builds them from argparse)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.targets import DEFAULT_TARGET


@dataclass
class AccuracyOptions:
    """What to map and how.

    ``pieces``: consecutive pieces the graph is cut into (``export.split.split_onnx``); each is
    one simulator build, so more pieces give a finer map and cost more builds (1: the whole
    graph is one block).  ``inputs``: an npz whose names and shapes match the graph inputs
    (None: seeded random normal floats, zero integers - real inputs give the real map).
    ``stepwise``: for a vocoder step graph, the feed of that step (1-based) of a stepwise
    onnxruntime decode of seeded random codes, cache threaded (``step_feed``).
    ``whole_graph``: also simulate the whole graph, the figure the pieces are checked against.
    ``simulate``: False skips the simulator (fp32 and the fp16 model only).
    ``layer_budget_mb``: fp32 intermediates one onnxruntime run exposes for the per-layer figures
    (the piece runs again for each group).  ``plan``: see ``held_out``.
    """

    model: Path
    target: str = DEFAULT_TARGET
    inputs: Path | None = None
    stepwise: int | None = None
    pieces: int = 4
    seed: int = 0
    threads: int = 2
    whole_graph: bool = True
    simulate: bool = True
    memory_limit_mb: float | None | str = "auto"
    layer_budget_mb: float = 256.0
    sim_log: str | None = None
    #: the build whose fp16 headroom over held-out inputs the map shows (``held_out``; None: the
    #: plan.json beside the graph, if any)
    plan: Path | None = None
    work_dir: Path | None = None
