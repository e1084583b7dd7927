"""Export the code-predictor frame graph (``stepgraph.code_predictor_step``) to ONNX.

As ``export.vocoder_onnx``: static shapes, ``OPSET``, the TorchScript exporter (``dynamo=False``),
output shapes declared, the contract in the metadata under ``rkspeech.contract`` (format
``rkspeech-code-predictor/1``; ``rkspeech convert`` copies it into the .rknn custom string).
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.export.vocoder_onnx import export_traced
from rkspeech.contracts.code_predictor import INPUT_NAMES


def export_code_predictor_onnx(step, output: str | os.PathLike) -> Path:
    """Trace ``step`` (a ``CodePredictorFrame``) to ``output`` (``vocoder_onnx.export_traced``)."""
    import torch

    contract = step.contract()
    out = Path(output)
    ht = contract.talker_hidden
    gen = torch.Generator().manual_seed(0)
    dummy = (torch.randn(1, ht, generator=gen), torch.randn(1, ht, generator=gen))
    return export_traced(step, dummy, out, input_names=INPUT_NAMES, output_names=contract.output_names,
                         contract=contract)
