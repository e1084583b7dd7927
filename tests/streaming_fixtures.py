"""Step graphs of the reduced synthetic checkpoint, exported once per test session (helper module).

Exported with ``export_step_onnx`` directly (no built-in stepwise checks: the tests that use
these graphs compare against the full decode themselves).  Measured here (2 cores): ~6-8 s per
reduced graph, ~37 MB each.
"""

from __future__ import annotations

from pathlib import Path

_CACHE: dict[str, object] = {}


def _export(model, B: int, out: Path) -> Path:
    from rkspeech.export.vocoder_onnx import export_step_onnx
    from rkspeech.stepgraph.step import VocoderStep

    if not out.exists():
        export_step_onnx(VocoderStep(model, B), out)
    return out


def step_graphs(tmp_path_factory, reduced_model) -> dict[str, Path]:
    """``{"first": B=4, "main": B=16}`` ONNX step graphs of the reduced checkpoint."""
    if "steps" not in _CACHE:
        d = tmp_path_factory.mktemp("steps_reduced")
        _CACHE["steps"] = {"first": _export(reduced_model, 4, d / "step_B4.onnx"),
                           "main": _export(reduced_model, 16, d / "step_B16.onnx")}
    return _CACHE["steps"]  # type: ignore[return-value]


def step_graph_b64(tmp_path_factory, reduced_model) -> Path:
    if "b64" not in _CACHE:
        d = tmp_path_factory.mktemp("steps_reduced_b64")
        _CACHE["b64"] = _export(reduced_model, 64, d / "step_B64.onnx")
    return _CACHE["b64"]  # type: ignore[return-value]


def ort_engines(paths: dict[str, Path], threads: int = 2):
    """(main Engine, first Engine) over onnxruntime for ``step_graphs`` output."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
    from rkspeech.runtime.tts.streaming import Engine

    main = Engine(OnnxRuntimeRunner(paths["main"], threads=threads), read_contract(paths["main"]))
    first = None
    if "first" in paths:
        first = Engine(OnnxRuntimeRunner(paths["first"], threads=threads), read_contract(paths["first"]))
    return main, first


def write_ort_plan(folder: Path, paths: dict[str, Path]) -> Path:
    """A plan.json (impl onnx) next to copies-by-reference of the graphs."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.plan import write_plan

    contracts = {role: read_contract(p) for role, p in paths.items()}
    return write_plan(Path(folder) / "plan.json", placement="cpu-fp32", target=None, contracts=contracts, onnx=paths)
