"""Exact ONNX-to-ONNX rewrites of a pre-LayerNorm transformer (the Whisper encoder) aimed at the
fp16 simulator figure (measured in docs/accuracy-map.md, part 3).

Each function takes a ``ModelProto`` and typed options and returns a new ``ModelProto`` that
computes the same function in fp32 (:func:`exactness_db`: transformed vs original on onnxruntime,
>= 100 dB; ``tests/accuracy/test_fp16_transforms.py``).  The graph is read by structure, not by name: the
*residual stream* is what feeds each ``LayerNormalization``; walking back from there through the
residual ``Add`` nodes reaches its *writers* (the MatMul + bias of the attention out projection
and of fc2, the positional embedding, the stem).

Measured on Whisper tiny.en (rk3588 fp16, rknn-toolkit2 2.5.0, one espeak-ng speech window):
none raises the simulator figure (56.96 dB vs torch fp32 before).  Scaling the
stream by a power of two stores the same relative roundings (fp16 has the same relative step
from 6.1e-5 to 65504, and the map puts the whole encoder inside that range): x 8 gives 56.96 dB
again, x 1/8 and x 1/64 56.82 / 57.07 dB (subnormals at the small end); x 0.3 adds roundings and
costs 4.9 dB (52.04).  The decomposed LayerNorm is fused back by the compiler
(``replace_torch_layernorm3``): bit-identical figure.  So these are tools for checking that
claim on another graph, not a default of any build.  The massive channel (blocks.3 fc2, channel
354, -643 in 25 zero-padded frames, mean -7.3) is not a constant offset, so no offset-subtraction
rewrite is given.

Measured on Whisper base (same setup, three espeak-ng sentences): 50.68 dB before on
the map's sentence; no rewrite raises it beyond the -1.4 to +0.7 dB the output swings by with any
change of rounding (:func:`fold_attention_scale` into the query: +0.69, +0.25, -1.36 dB on the three;
stream x 1/64: +0.39, -0.55, +0.26); folding the attention scale into query and key, as the
compiler does itself, gives the exported graph's figure to the last digit on all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rkspeech.core.errors import RkspeechError


@dataclass(frozen=True)
class ResidualScale:
    """Multiply the residual stream by ``scale``: the stem's output (see ``stem``), the positional
    embedding, and the weight and bias of every linear layer that writes into the stream; each
    LayerNorm's
    epsilon becomes ``epsilon * scale**2`` so LN(s x; s^2 eps) = LN(x; eps) exactly.
    ``adjust_eps=False`` leaves eps alone: NOT exact (the test's check must catch it).

    ``stem``: how the stem's output (a GELU, not homogeneous) gets the factor.  ``"insert"``
    (default): one Mul by ``scale`` after it.  ``"fold"``: into the constant 0.5 of the exported
    GELU ``x * (1 + erf(x / sqrt 2)) * 0.5``, which adds no op but the compiler then no longer
    recognises the GELU (``replace_torch_gelu``), and the stem's second Erf goes to the CPU:
    measured 79 NPU / 1 CPU ops on tiny.en (75 / 0 unfolded), so it is kept only to show that."""

    scale: float = 0.125
    adjust_eps: bool = True
    stem: str = "insert"


@dataclass(frozen=True)
class LayerNormDecompose:
    """Replace each LayerNormalization (whose name contains ``match``; "" = all) with
    ``d = x - mean(x); y = d / sqrt(mean(d*d) + eps) * gamma + beta`` (mean subtracted first,
    then the variance of the centred values)."""

    match: str = ""


@dataclass(frozen=True)
class AttentionScaleFold:
    """Fold the attention's two scalar Muls (openai's ``q * Dh**-0.25`` and ``k * Dh**-0.25``)
    into the projections that feed them, and drop the Muls.  ``into="query"``: the product of
    both (``Dh**-0.5``: 1/8 for every Whisper size, whose heads are all Dh = 64) into the query
    weight and bias (the first input of ``q @ k``), the key projection untouched;
    ``into="split"``: each factor into its own projection (query weight and bias, key weight),
    which is what rknn-toolkit2 2.5.0 does itself (``fuse_mul_into_conv`` / ``fuse_exmatmul_mul``
    in the build log).  A product within 1e-6
    of a power of two is taken as that power of two (float32's ``64**-0.25`` squared is
    0.1249999957), so ``"query"`` only multiplies weights by an exact 2^-k."""

    into: str = "query"


def _producers(graph) -> dict:
    return {o: n for n in graph.node for o in n.output}


def _constant_value(graph, name: str, producers: dict):
    """The numpy value of an initializer or Constant-node tensor, or None."""
    from onnx import numpy_helper

    for t in graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    n = producers.get(name)
    if n is not None and n.op_type == "Constant":
        for a in n.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
    return None


class _Scaler:
    """Walks back from a residual-stream tensor and scales its linear producers."""

    def __init__(self, model, scale: float, stem: str):
        self.g = model.graph
        self.s = float(scale)
        self.stem = stem
        self.inserted: list = []  # (producer node, the Mul to place right after it)
        self.prod = _producers(self.g)
        self.done: set[str] = set()
        self.count = 0

    def _replace_input(self, node, index: int, value: np.ndarray) -> None:
        from onnx import numpy_helper

        self.count += 1
        name = f"{node.input[index]}__scaled{self.count}"
        self.g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        node.input[index] = name

    def scale(self, tensor: str) -> None:
        if tensor in self.done:
            return
        self.done.add(tensor)
        n = self.prod.get(tensor)
        if n is None:
            raise RkspeechError(f"residual scale: {tensor} is a graph input; nothing to fold the scale into")
        consts = [_constant_value(self.g, i, self.prod) for i in n.input]
        if n.op_type in ("Transpose", "Reshape"):
            self.scale(n.input[0])
        elif n.op_type == "Add":
            for i, (name, c) in enumerate(zip(n.input, consts)):
                if c is not None:
                    self._replace_input(n, i, c * self.s)
                else:
                    self.scale(name)
        elif n.op_type == "MatMul" and consts[1] is not None:
            self._replace_input(n, 1, consts[1] * self.s)
        elif n.op_type == "Mul" and self.stem == "fold" and any(c is not None for c in consts):
            i = next(i for i, c in enumerate(consts) if c is not None)
            self._replace_input(n, i, consts[i] * self.s)
        elif self.stem == "insert" and n.op_type in ("Mul", "Conv", "Div"):
            from onnx import helper, numpy_helper

            self.count += 1
            raw, factor = f"{tensor}__unscaled", f"{tensor}__scale{self.count}"
            self.g.initializer.append(numpy_helper.from_array(np.array(self.s, np.float32), factor))
            n.output[list(n.output).index(tensor)] = raw
            self.inserted.append((n, helper.make_node("Mul", [raw, factor], [tensor], name=f"{n.name}/residual_scale")))
        else:
            raise RkspeechError(f"residual scale: cannot fold a scale into {n.op_type} {n.name!r}")


def scale_residual_stream(model, options: ResidualScale):
    """See :class:`ResidualScale`.  Returns a new model; ``model`` is not changed."""
    from onnx import helper

    if not np.isfinite(options.scale) or options.scale <= 0:
        raise RkspeechError(f"residual scale must be a positive number, got {options.scale}")
    if options.stem not in ("insert", "fold"):
        raise RkspeechError(f"residual scale: stem must be 'insert' or 'fold', got {options.stem!r}")
    m = type(model)()
    m.CopyFrom(model)
    scaler = _Scaler(m, options.scale, options.stem)
    norms = [n for n in m.graph.node if n.op_type == "LayerNormalization"]
    if not norms:
        raise RkspeechError("residual scale: the graph has no LayerNormalization")
    for n in norms:
        scaler.scale(n.input[0])
        if options.adjust_eps:
            eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
            for a in list(n.attribute):
                if a.name == "epsilon":
                    n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("epsilon", float(eps * options.scale ** 2)))
    if scaler.inserted:
        after = {mul.input[0]: mul for _, mul in scaler.inserted}
        nodes = []
        for n in m.graph.node:
            nodes.append(n)
            nodes += [after[o] for o in n.output if o in after]
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    _drop_unused_initializers(m)
    return m


def fold_attention_scale(model, options: AttentionScaleFold = AttentionScaleFold()):
    """See :class:`AttentionScaleFold`.  Each attention is found from its Softmax: the MatMul
    feeding it, whose two inputs must each be a Mul by a scalar constant; walking back from the
    Mul's other input (through Transpose / Reshape / the bias Add) reaches the projection's
    constants, which take the factor.  Returns a new model; ``model`` is not changed."""
    if options.into not in ("query", "split"):
        raise RkspeechError(f"attention scale fold: into must be 'query' or 'split', got {options.into!r}")
    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    prod = _producers(g)
    scaler = _Scaler(m, 1.0, stem="none")  # walks back to a projection's constants; one counter for names
    drop: dict[str, str] = {}  # output of a dropped Mul -> its unscaled input
    softmaxes = [n for n in g.node if n.op_type == "Softmax"]
    if not softmaxes:
        raise RkspeechError("attention scale fold: the graph has no Softmax (no attention)")
    for sm in softmaxes:
        mm = prod.get(sm.input[0])
        if mm is None or mm.op_type != "MatMul":
            raise RkspeechError(f"attention scale fold: {sm.name!r} is not fed by a MatMul")
        muls = []
        for t in mm.input:
            mul = prod.get(t)
            consts = [] if mul is None else [_constant_value(g, i, prod) for i in mul.input]
            if mul is None or mul.op_type != "Mul" or sum(c is not None for c in consts) != 1:
                raise RkspeechError(f"attention scale fold: {mm.name!r} input {t} is not a Mul by a constant")
            c = next(c for c in consts if c is not None)
            if c.size != 1:
                raise RkspeechError(f"attention scale fold: {mul.name!r} multiplies by a tensor, not a scalar")
            other = next(i for i, c in zip(mul.input, consts) if c is None)
            muls.append((mul, float(c.reshape(())), other))
        (_, cq, q_in), (_, ck, k_in) = muls
        if options.into == "query":
            s = cq * ck
            p2 = 2.0 ** round(np.log2(s))
            factors = [(q_in, p2 if abs(s / p2 - 1) < 1e-6 else s)]
        else:
            factors = [(q_in, cq), (k_in, ck)]
        for tensor, f in factors:
            scaler.s = f
            scaler.scale(tensor)
        for mul, _, other in muls:
            drop[mul.output[0]] = other
    keep = [n for n in g.node if not (n.op_type == "Mul" and n.output[0] in drop)]
    for n in keep:
        for i, t in enumerate(n.input):
            if t in drop:
                n.input[i] = drop[t]
    del g.node[:]
    g.node.extend(keep)
    _drop_unused_initializers(m)
    return m


def _drop_unused_initializers(model) -> None:
    """The originals of the scaled weights (new initializers replace them) would otherwise stay
    in the file beside their scaled copies."""
    used = {i for n in model.graph.node for i in n.input} | {i.name for i in model.graph.input}
    keep = [t for t in model.graph.initializer if t.name in used]
    if len(keep) != len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(keep)


def decompose_layernorm(model, options: LayerNormDecompose = LayerNormDecompose()):
    """See :class:`LayerNormDecompose` (last axis only, as the Whisper export writes it)."""
    from onnx import helper, numpy_helper

    if model.opset_import and max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 18:
        raise RkspeechError("layernorm decompose writes ReduceMean with axes as an attribute (opset < 18)")
    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    nodes = []
    for n in g.node:
        if n.op_type != "LayerNormalization" or options.match not in n.name:
            nodes.append(n)
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), -1)
        if axis != -1:
            raise RkspeechError(f"layernorm decompose: {n.name} normalises axis {axis}, not the last")
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        p = n.name + "/dec"
        g.initializer.append(numpy_helper.from_array(np.array(eps, np.float32), p + "/eps"))
        x, out = n.input[0], n.output[0]
        nodes += [
            helper.make_node("ReduceMean", [x], [p + "/mean"], axes=[-1], keepdims=1, name=p + "/mean"),
            helper.make_node("Sub", [x, p + "/mean"], [p + "/d"], name=p + "/sub"),
            helper.make_node("Mul", [p + "/d", p + "/d"], [p + "/d2"], name=p + "/sq"),
            helper.make_node("ReduceMean", [p + "/d2"], [p + "/var"], axes=[-1], keepdims=1, name=p + "/var"),
            helper.make_node("Add", [p + "/var", p + "/eps"], [p + "/vare"], name=p + "/add_eps"),
            helper.make_node("Sqrt", [p + "/vare"], [p + "/std"], name=p + "/sqrt"),
            helper.make_node("Div", [p + "/d", p + "/std"], [p + "/norm"], name=p + "/div"),
            helper.make_node("Mul", [p + "/norm", n.input[1]], [p + "/scaled"], name=p + "/gamma"),
        ]
        if len(n.input) > 2 and n.input[2]:
            nodes.append(helper.make_node("Add", [p + "/scaled", n.input[2]], [out], name=p + "/beta"))
        else:
            nodes.append(helper.make_node("Identity", [p + "/scaled"], [out], name=p + "/beta"))
    del g.node[:]
    g.node.extend(nodes)
    return m


def exactness_db(original, transformed, feed: dict, threads: int = 2) -> float:
    """SNR (dB) of ``transformed`` against ``original`` on onnxruntime (optimisations off),
    worst over the graph outputs: the check that a rewrite is exact in fp32."""
    from rkspeech.accuracy.fp16_model import OrtGraph
    from rkspeech.core.compare import snr_db

    a = OrtGraph(original, threads=threads).run(feed)
    b = OrtGraph(transformed, threads=threads).run(feed)
    return min(snr_db(a[k], b[k]) for k in a)
