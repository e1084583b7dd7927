"""A traced graph's weights, put in by us rather than by torch's exporter.

The TorchScript exporter, given the weights, held about four times their size at its peak (a
2.36 GB Linear: 9.47 GB; the published 1.7B talker pair could not be exported on a 24 GB host):
it folds the weight transposes into new tensors, serializes the whole proto, and we loaded it back
to edit it.  So the graph leaves torch without them (``export_params=False``: each weight is a
graph input named by its state-dict key), and here:

* :func:`fold_constants` evaluates every node whose inputs are all known (the weights, as numpy
  views of the module's own storage, and ``Constant`` nodes), as torch's constant folding would; a
  transpose or an unsqueeze of a weight stays a view, so nothing is copied yet;
* :func:`write_weights` puts each weight that a remaining node reads into the graph: inline when
  they are small, else one at a time into one external data file beside the graph
  (``<graph>.onnx.data``, which ``plan.linking.companions`` carries), each tensor at a 64 KiB
  boundary so onnxruntime can map it rather than read it.

The peak is the module plus one tensor.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: above this many weight bytes a graph keeps them in ``<graph>.onnx.data`` (protobuf stops at 2 GiB)
INLINE_LIMIT = 1 << 30
#: offset alignment of each tensor in the data file: onnxruntime maps a tensor whose offset is a
#: multiple of the allocation granularity (the page on Linux, 64 KiB on Windows) instead of reading it
ALIGN = 1 << 16
#: ops never folded: their value is not a function of their inputs, or (Identity) torch's folding
#: keeps them, where one weight serves two modules
_NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
               "Bernoulli", "Dropout", "Identity"}


def module_weights(module, input_names) -> dict[str, np.ndarray]:
    """The graph inputs torch named after ``module``'s state (all but ``input_names``), as fp32
    numpy views of the tensors themselves."""
    state = module.state_dict(keep_vars=True)
    return {k: v.detach().numpy() for k, v in state.items() if k not in set(input_names)}


def fold_constants(model, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Fold ``model``'s graph in place over ``weights`` (graph inputs of those names become
    constants); returns the initializers the graph now needs, name -> array (views where the
    folding only moved axes).  A node the reference evaluator cannot run stays in the graph."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    derived = set(weights)  # the weights and what was folded from them: initializers
    known: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        known[init.name] = numpy_helper.to_array(init)
        derived.add(init.name)
    del graph.initializer[:]
    for inp in graph.input:
        if inp.name in weights:
            known[inp.name] = weights[inp.name]
    kept = []
    for node in graph.node:
        if node.op_type == "Constant":
            known[node.output[0]] = numpy_helper.to_array(node.attribute[0].t) if node.attribute[0].name == "value" \
                else ReferenceEvaluator(node).run(None, {})[0]
            kept.append(node)
            continue
        inputs = [i for i in node.input if i]
        if node.op_type in _NOT_FOLDED or node.domain not in ("", "ai.onnx") or \
                not all(i in known for i in inputs) or any(a.type == a.GRAPH for a in node.attribute):
            kept.append(node)
            continue
        try:
            outs = ReferenceEvaluator(node).run(None, {i: known[i] for i in inputs})
        except Exception:  # noqa: BLE001 - an op it lacks stays a node; the graph is still right
            kept.append(node)
            continue
        for name, value in zip(node.output, outs):
            known[name] = np.asarray(value)
        if derived.intersection(inputs):
            derived.update(node.output)
        else:  # shape arithmetic of constants: a Constant node, as torch's folding leaves it
            kept.extend(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(known[name]))
                        for name in node.output)
    read = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    const_out = {n.output[0] for n in kept if n.op_type == "Constant"}
    del graph.node[:]
    graph.node.extend(n for n in kept if n.op_type != "Constant" or n.output[0] in read)
    needed = {name: known[name] for name in known if name in read and name not in const_out}
    inputs = [i for i in graph.input if i.name not in weights and i.name not in needed]
    del graph.input[:]
    graph.input.extend(inputs)
    return needed


def write_weights(model, weights: dict[str, np.ndarray], onnx_path: str | os.PathLike,
                  data_tmp: str | os.PathLike | None = None) -> Path | None:
    """Put ``weights`` into ``model`` as initializers: inline under :data:`INLINE_LIMIT` bytes in
    all (returns None), else written one by one to ``data_tmp`` and referenced as
    ``<onnx_path's name>.data``, the name the caller renames ``data_tmp`` to (returns it)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    total = sum(v.nbytes for v in weights.values())
    if total <= INLINE_LIMIT or data_tmp is None:
        graph.initializer.extend(numpy_helper.from_array(np.ascontiguousarray(v), name)
                                 for name, v in weights.items())
        return None
    location = Path(onnx_path).name + ".data"
    with open(data_tmp, "wb") as f:
        for name, v in weights.items():
            offset = -f.tell() % ALIGN
            if offset:
                f.write(b"\0" * offset)
            start = f.tell()
            np.ascontiguousarray(v).tofile(f)
            t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(v.dtype), dims=v.shape)
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(start)), ("length", str(v.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            graph.initializer.append(t)
    return Path(onnx_path).with_name(location)


def graph_bytes(path) -> int:
    """A graph's bytes with its external weights (``<graph>.data``, :func:`write_weights`)."""
    p = Path(path)
    data = p.with_name(p.name + ".data")
    return p.stat().st_size + (data.stat().st_size if data.is_file() else 0)
