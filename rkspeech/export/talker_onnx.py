"""Export the talker step graphs (``stepgraph.talker_step``) to ONNX: prefill (B = chunk) and decode (B = 1).

As ``export.code_predictor_onnx``: ``vocoder_onnx.export_traced`` (static shapes, ``OPSET``, the
TorchScript exporter, output shapes declared), the contract in the metadata under
``rkspeech.contract`` with format ``rkspeech-talker/1`` (``rkspeech convert`` copies it into the
.rknn custom string).
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.export.vocoder_onnx import export_traced
from rkspeech.stepgraph.talker_step import TalkerStep


def export_talker_onnx(step: TalkerStep, output: str | os.PathLike) -> Path:
    """Trace ``step`` to ``output`` (``export_traced``); returns the path."""
    contract = step.contract()
    return export_traced(step.eval(), step.dummy_inputs(), Path(output), input_names=contract.input_names,
                         output_names=contract.output_names, contract=contract)


def export_talker_pair(model, out_dir: str | os.PathLike, *, capacity: int, prefill_B: int,
                       kv_layout: str = "heads", cache_io: str = "flat", name: str | None = None) -> dict[str, Path]:
    """``{"prefill": path, "decode": path}`` under ``out_dir`` for ``model`` (``talker.model``, or
    another Qwen3 stack: ``name`` is then its contract's model name).  ``prefill_B <= 1``: decode graph only."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    roles = {"decode": 1}
    if prefill_B > 1:
        roles = {"prefill": prefill_B, **roles}
    paths = {}
    for role, B in roles.items():
        step = TalkerStep(model, capacity=capacity, B=B, kv_layout=kv_layout, cache_io=cache_io,
                          **({"name": name} if name else {}))
        paths[role] = export_talker_onnx(step, out_dir / f"talker_{role}_B{B}_cap{capacity}.onnx")
    return paths
