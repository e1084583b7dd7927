"""Export one code predictor head (``lm_head[j - 1]``, a ``[V, H]`` matrix) as an ONNX graph of
its own: ``logits = hidden @ W.T`` (one ``MatMul`` with a constant weight, which onnxruntime's
quantizers turn into ``MatMulNBits`` / ``MatMulInteger``), the ``HeadContract`` in the metadata.
Built with ``onnx.helper`` from the numpy weight (no torch)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rkspeech.contracts.base import CONTRACT_KEY
from rkspeech.contracts.head import HeadContract
from rkspeech.core.errors import RkspeechError
from rkspeech.export.opset import OPSET


def export_head_onnx(weight: np.ndarray, contract: HeadContract, output: str | os.PathLike) -> Path:
    """Write ``weight`` (``[V, H]``, as ``nn.Linear`` stores it) as the head graph of ``contract``
    to ``output`` (atomically); returns the path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from rkspeech.core.atomic import atomic_path

    w = np.asarray(weight, dtype=np.float32)
    if w.shape != (contract.vocab_size, contract.hidden):
        raise RkspeechError(f"head {contract.index}: weight {w.shape}, the contract says "
                            f"[{contract.vocab_size}, {contract.hidden}]")
    (name_in, shape_in), = contract.input_shapes().items()
    (name_out, shape_out), = contract.output_shapes().items()
    graph = helper.make_graph(
        [helper.make_node("MatMul", [name_in, "weight_t"], [name_out])], f"head{contract.index}",
        [helper.make_tensor_value_info(name_in, TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info(name_out, TensorProto.FLOAT, shape_out)],
        [numpy_helper.from_array(np.ascontiguousarray(w.T), "weight_t")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    helper.set_model_props(model, {CONTRACT_KEY: contract.to_json()})
    out = Path(output)
    with atomic_path(out, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
    return out
