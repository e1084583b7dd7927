"""The accuracy map's fp16 headroom over held-out inputs: for an NPU-placed talker / code
predictor graph, the peaks the build measured over the accuracy gate's held-out texts
(``pipelines.fp16_headroom``, in the build's ``build-report.json``), beside the map's own
figures from its one input.  One input can miss a peak: the published code predictor's
``ffn_down`` input was measured from 1.9x to 2.4x 65504 across ordinary texts
(docs/fp16-headroom.md).

The build is found from the graph: the ``plan.json`` of its folder or the folder above (where
``build qwen3-tts`` puts it), or the one given; a graph that plan does not list has nothing here.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.atomic import read_json_object
from rkspeech.core.errors import RkspeechError
from rkspeech.plan.paths import BUILD_REPORT, PLAN_FILE

#: the plan sections the build's headroom stage measures
GRAPHS = ("talker", "code_predictor")


def _names(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _names(v)
    elif isinstance(node, list):
        for v in node:
            yield from _names(v)


def graph_in_plan(plan: dict, plan_dir: Path, model: Path) -> str | None:
    """The plan section (``GRAPHS``) one of whose artifacts is ``model``, or None."""
    target = os.path.realpath(model)
    for section in GRAPHS:
        for name in _names((plan.get(section) or {}).get("artifacts", {})):
            if os.path.realpath(plan_dir / name) == target:
                return section
    return None


def held_out_headroom(model: str | os.PathLike, plan: str | os.PathLike | None = None) -> dict | None:
    """The build's headroom record of ``model`` (JSON-able): ``graph``, ``build_report``, the
    ``texts`` x ``frames`` it covered, ``top`` tensors (peak and ratio to 65504), the ``rescale``
    applied and ``top_after`` it, ``over`` (still above 65504); ``not_measured`` with the reason
    when the build has none.  None when no plan lists the graph (``plan`` None: looked for);
    a ``plan`` given that does not list it is refused in one line."""
    model = Path(model)
    if plan is None:
        found = [d / PLAN_FILE for d in (model.parent, model.parent.parent) if (d / PLAN_FILE).is_file()]
        candidates = [(p, read_json_object(p, "plan")) for p in found]
    else:
        p = Path(plan)
        if p.is_dir():
            p = p / PLAN_FILE
        candidates = [(p, read_json_object(p, "plan"))]
    for path, data in candidates:
        graph = graph_in_plan(data, path.parent, model)
        if graph is None:
            continue
        report_path = path.parent / BUILD_REPORT
        rep = read_json_object(report_path, "build report") if report_path.is_file() else {}
        record = ((rep.get("fp16_headroom") or {}).get("graphs") or {}).get(graph)
        out = {"graph": graph, "build_report": os.fspath(report_path)}
        if record is None:
            return {**out, "not_measured": "the build has no fp16 headroom record of this graph (built with "
                                           "--skip-fp16-headroom, or by a release before the stage)"}
        h = rep["fp16_headroom"]
        return {**out, "texts": h.get("texts"), "frames": h.get("frames"), "fp16_max": h.get("fp16_max"),
                **{k: record.get(k) for k in ("placement", "top", "rescale", "top_after", "over")}}
    if plan is not None:
        raise RkspeechError(f"plan {candidates[0][0]} lists no talker or code predictor graph {model}: "
                            "the fp16 headroom over held-out inputs is measured for those")
    return None
