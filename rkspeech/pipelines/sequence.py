"""The one build sequence every model's build runs its graphs through: lint or fail, convert with
the contract as the custom string, check the .rknn carries it, each a resumable stage.

A build exports its graphs its own way and checks them on the simulator its own way (a vocoder
steps a signal, a talker generates codes, an encoder compares a window); between the two, every
graph takes the same path, with one report format per stage:

* ``lint``: ``LintReport.to_dict()`` per role; any error stops the build with one line.
* ``convert_<role>``: ``ConversionResult.to_report()``.
* ``inspect``: per role the .rknn's bytes, format, target, toolkit version, node counts and its
  custom string parsed (``contract``); a custom string that did not survive conversion verbatim
  stops the build.
* ``golden`` (``golden="sim"`` or ``"ort"``): per role a golden replay beside the .rknn
  (``runtime.golden``: a few consecutive calls' inputs and the simulator's outputs, onnxruntime's
  when the build skips the simulator), which ``rkspeech check-board`` replays on a board; the
  graphs run in order, so a piece's input is the previous piece's output.  A build whose verify
  stage builds the graph on the simulator anyway records it there (``record_sim_golden``).

Stage names take the build's ``prefix`` (``talker_``, ``code_predictor_``, ``whisper_``; none for
the vocoder), so one output folder holds several models' stages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.pipelines.resumable import StageRunner


@dataclass(frozen=True)
class Graph:
    """One graph of a build: its ONNX, the .rknn it becomes and how it is converted."""

    role: str
    onnx: Path
    rknn: Path
    #: the .rknn's custom string: the graph's contract JSON (or the encoder's description)
    custom_string: str | None
    dtype: str = "fp16"
    dataset: Path | None = None
    #: a ``convert.hybrid_int16.HybridInt16Options`` for ``dtype="int16-hybrid"``
    hybrid: object | None = None
    #: extra inputs of the conversion (a calibration list's files change the result)
    inputs: tuple[Path, ...] = field(default_factory=tuple)


def lint_graphs(stages: StageRunner, graphs: list[Graph], *, target: str, prefix: str = "") -> dict[str, dict]:
    def work():
        from rkspeech.lint.checker import lint_model

        rep = {}
        for g in graphs:
            lr = lint_model(g.onnx, target)
            if lr.errors:
                raise RkspeechError(f"lint: {g.onnx} has {len(lr.errors)} error(s): "
                                    + "; ".join(f.message for f in lr.errors[:3]))
            rep[g.role] = lr.to_dict()
        return rep

    return stages.run(f"{prefix}lint", {"target": target}, [g.onnx for g in graphs], lambda: [], work)


def convert_graphs(stages: StageRunner, graphs: list[Graph], *, target: str, timeout: float | None,
                   prefix: str = "") -> dict[str, dict]:
    out = {}
    for g in graphs:
        def work(g=g):
            from rkspeech.convert.conversion import convert

            g.rknn.parent.mkdir(parents=True, exist_ok=True)
            return convert(g.onnx, g.rknn, target=target, dtype=g.dtype, timeout=timeout,
                           custom_string=g.custom_string, dataset=str(g.dataset) if g.dataset else None,
                           hybrid=g.hybrid).to_report()

        key = {"target": target, "timeout": timeout, "dtype": g.dtype, "custom_string": g.custom_string,
               **({"hybrid": g.hybrid.to_dict()} if g.hybrid is not None else {})}
        inputs = [g.onnx, *([g.dataset] if g.dataset else []), *g.inputs]
        out[g.role] = stages.run(f"{prefix}convert_{g.role}", key, inputs, lambda g=g: [g.rknn], work)
    return out


def inspect_graphs(stages: StageRunner, graphs: list[Graph], *, target: str, prefix: str = "") -> dict[str, dict]:
    def work():
        from rkspeech.contracts.rknn_file import read_container

        rep = {}
        for g in graphs:
            info = read_container(g.rknn, expect_target=target)
            if (info.custom_string or None) != (g.custom_string or None):
                raise RkspeechError(f"{g.rknn}: its custom string did not survive conversion (expected "
                                    f"{len(g.custom_string or '')} characters, found {len(info.custom_string or '')})")
            rep[g.role] = {"bytes": info.file_size, "format": info.format, "target": info.target,
                           "toolkit_version": info.toolkit_version, "node_counts": info.node_counts(),
                           "contract": info.contract.to_dict() if info.contract is not None
                           else _json_or_none(info.custom_string)}
        return rep

    return stages.run(f"{prefix}inspect", {"target": target}, [g.rknn for g in graphs], lambda: [], work)


def golden_graphs(stages: StageRunner, graphs: list[Graph], *, target: str, source: str, prefix: str = "",
                  given: dict[str, Path] | None = None) -> dict[str, dict]:
    """Write each graph's golden replay (``plan.integrity.golden_path`` of its .rknn) from
    ``source`` ("sim": the simulator built as the .rknn was; "ort": onnxruntime); ``given``:
    input name -> .npy of a one-call graph's input (the graphs' outputs join them in order)."""
    from rkspeech.plan.integrity import golden_path

    def work():
        import numpy as np

        from rkspeech.runtime.golden import golden_inputs, record_golden
        from rkspeech.contracts.read import read_contract
        from rkspeech.core import progress
        from rkspeech.runtime.runners import open_runner

        env = {n: np.load(p) for n, p in (given or {}).items()}
        rep = {}
        for g in graphs:
            try:
                contract = read_contract(g.onnx)
            except RkspeechError:
                contract = None  # an encoder (its custom string is not a step contract)
            with progress.stage(f"golden replay of {g.role} ({source})"):
                opts = ({"target": target, "dtype": g.dtype, "log_path": None,
                         "dataset": str(g.dataset) if g.dataset else None,
                         "hybrid": g.hybrid.to_dict() if g.hybrid is not None else None} if source == "sim" else {})
                with open_runner(source, g.onnx, **opts) as runner:
                    golden = golden_inputs(g.role, contract, runner.input_specs(), given=env)
                    rep[g.role] = record_golden(golden_path(g.rknn), golden, runner, source=source,
                                                target=target, dtype=g.dtype)
                    env.update(golden.outputs[-1])
        return rep

    inputs = [*(g.onnx for g in graphs), *(g.rknn for g in graphs if g.rknn.is_file()), *(given or {}).values(),
              *(g.dataset for g in graphs if g.dataset)]
    return stages.run(f"{prefix}golden", {"target": target, "source": source, "format": 1}, inputs,
                      lambda: [golden_path(g.rknn) for g in graphs], work)


def record_sim_golden(g: Graph, runner, *, target: str) -> dict:
    """``g``'s golden replay (as ``golden_graphs`` writes it, ``source="sim"``) on ``runner``, a
    simulator the caller already built as the .rknn was: a build whose verify stage builds its
    graph on the simulator records the golden there instead of building it a second time (the
    int16-hybrid code predictor frame graph, reduced: 89 s of a 276 s build, 2026-12-02)."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.integrity import golden_path
    from rkspeech.runtime.golden import golden_inputs, record_golden

    golden = golden_inputs(g.role, read_contract(g.onnx), runner.input_specs())
    return record_golden(golden_path(g.rknn), golden, runner, source="sim", target=target, dtype=g.dtype)


def run_sequence(stages: StageRunner, graphs: list[Graph], *, target: str, timeout: float | None,
                 prefix: str = "", convert: bool = True, golden: str | None = None,
                 golden_given: dict[str, Path] | None = None) -> dict[str, dict]:
    """Lint, then (``convert``) convert and inspect ``graphs``, then (``golden``: "sim" or "ort")
    write their golden replays; ``{"lint", "convert", "inspect", "golden"}``."""
    rep = {"lint": lint_graphs(stages, graphs, target=target, prefix=prefix), "convert": {}, "inspect": {},
           "golden": {}}
    if convert:
        rep["convert"] = convert_graphs(stages, graphs, target=target, timeout=timeout, prefix=prefix)
        rep["inspect"] = inspect_graphs(stages, graphs, target=target, prefix=prefix)
    if golden:
        rep["golden"] = golden_graphs(stages, graphs, target=target, source=golden, prefix=prefix,
                                      given=golden_given)
    return rep


def _json_or_none(text: str | None):
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
