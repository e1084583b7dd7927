"""Export the code-predictor frame graph (``stepgraph.code_predictor_step``) to ONNX.

As ``export.vocoder_onnx``: static shapes, ``OPSET``, the TorchScript exporter (``dynamo=False``),
output shapes declared, the contract in the metadata under ``rkspeech.contract`` (format
``rkspeech-code-predictor/1``; ``rkspeech convert`` copies it into the .rknn custom string).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from rkspeech.core.atomic import atomic_path
from rkspeech.export.opset import OPSET
from rkspeech.stepgraph.code_predictor_step import INPUT_NAMES, CodePredictorContract
from rkspeech.stepgraph.contract import CONTRACT_KEY


def export_code_predictor_onnx(step, output: str | os.PathLike) -> Path:
    """Trace ``step`` (a ``CodePredictorFrame``) to ``output``; written under a temporary name first."""
    import onnx
    import torch

    contract = step.contract()
    out = Path(output)
    ht = contract.talker_hidden
    gen = torch.Generator().manual_seed(0)
    dummy = (torch.randn(1, ht, generator=gen), torch.randn(1, ht, generator=gen))
    with atomic_path(out, suffix=".onnx") as tmp:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(step, dummy, str(tmp), input_names=list(INPUT_NAMES),
                              output_names=list(contract.output_names), opset_version=OPSET,
                              do_constant_folding=True, dynamo=False)
        model = onnx.load(str(tmp))
        shapes = contract.output_shapes()
        for o in model.graph.output:
            dims = o.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[o.name]:
                dims.add().dim_value = d
        meta = model.metadata_props.add()
        meta.key, meta.value = CONTRACT_KEY, contract.to_json()
        model.producer_name = "rkspeech"
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
    return out


def read_code_predictor_contract(path) -> CodePredictorContract:
    """The contract in ``path``'s metadata (refuses a vocoder step or a foreign file)."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.export.onnx_contract import read_onnx_metadata

    meta = read_onnx_metadata(path)
    if CONTRACT_KEY not in meta:
        raise RkspeechError(f"{path}: no {CONTRACT_KEY} metadata; export it with export_code_predictor_onnx")
    return CodePredictorContract.from_json(meta[CONTRACT_KEY])
