"""The accuracy map as an optional stage: ``rkspeech build qwen3-tts-vocoder --accuracy-pieces N``
records its headline in the build report, ``rkspeech verify --plot R.png`` draws it.

A vocoder step is mapped on the feed of step ``STEP`` of a stepwise onnxruntime decode (cache
threaded, a state the model reaches; ``step_feed``), the input of the published map in
docs/accuracy-map.md.  The map's own whole-graph simulator check is left out here
(``whole_graph=False``): the build's verify stage and ``rkspeech verify`` already run the whole
graph on the simulator, and that extra build is the expensive one (published B=16: 146 s and
8.55 GB of the map's 8 min 46 s; B=64's does not fit in 24 GB).  On the published B=16 step the
12 pieces chained gave the whole graph's figure bit for bit (47.53 dB, measured; docs/accuracy-map.md), so
the chained pieces stand for it.

Every mistake is a one-line RkspeechError before any build starts: a piece count below 1, a
plot path that is not a writable .png, matplotlib missing, an accuracy report that is not one.
"""

from __future__ import annotations

import json
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: The full map a build writes beside its build report.
ACCURACY_REPORT = "accuracy-report.json"
#: Which step of a stepwise decode feeds the map (1-based).
STEP = 3


def check_pieces(pieces: int, flag: str = "--accuracy-pieces", off_allowed: bool = True) -> None:
    """``pieces``: 0 means off where ``off_allowed``; otherwise >= 1."""
    low = 0 if off_allowed else 1
    if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces < low:
        what = ">= 0 (0: no accuracy map)" if off_allowed else ">= 1"
        raise RkspeechError(f"{flag} must be {what}, got {pieces!r}")


def check_plot_path(path) -> None:
    """A plot path must be a writable .png and matplotlib importable."""
    from rkspeech.accuracy.plot import require_matplotlib
    from rkspeech.core.atomic import check_writable

    if not str(path).lower().endswith(".png"):
        raise RkspeechError(f"--plot writes a PNG: give a .png path, got {path}")
    check_writable(path, what="plot")
    require_matplotlib()


def map_step(onnx_path, report_path, *, target: str, pieces: int, simulate: bool = True,
             sim_log: str | None = None, threads: int = 2) -> dict:
    """Map the vocoder step ``onnx_path`` in ``pieces`` blocks, write the full report (JSON, the
    summary first) to ``report_path``; returns ``{"report": path, **report.headline(...)}``."""
    from rkspeech.accuracy.analyse import analyse
    from rkspeech.accuracy.options import AccuracyOptions
    from rkspeech.accuracy.report import headline, to_json
    from rkspeech.core.atomic import write_json

    check_pieces(pieces, off_allowed=False)
    rep = analyse(AccuracyOptions(model=Path(onnx_path), target=target, stepwise=STEP, pieces=pieces,
                                  whole_graph=False, simulate=simulate, sim_log=sim_log, threads=threads))
    write_json(report_path, to_json(rep))
    return {"report": str(report_path), **headline(rep)}


def load_report(path) -> dict:
    """An accuracy report JSON (``rkspeech accuracy --report``, or the build's
    ``ACCURACY_REPORT``), checked to hold what the plot draws."""
    p = Path(path)
    if not p.is_file():
        raise RkspeechError(f"{p}: no such file (--accuracy-report takes the JSON of rkspeech accuracy "
                            f"--report or a build's {ACCURACY_REPORT})")
    try:
        rep = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"{p}: cannot read it as JSON ({type(exc).__name__})") from None
    need = ("model", "target", "pieces", "blocks", "layers", "graph_outputs")
    if not isinstance(rep, dict) or any(k not in rep for k in need) or not rep["blocks"]:
        raise RkspeechError(f"{p}: not an accuracy report (it needs {', '.join(need)}; write one with "
                            f"rkspeech accuracy --report or rkspeech build --accuracy-pieces N)")
    return rep
