"""fp16 headroom of the NPU-placed Qwen3-TTS graphs: fp32 activation peaks, and the exact rescale.

The NPU computes in fp16 (max 65504).  The published 0.6B code predictor's ``ffn_down`` input
peaks at about twice that on a few channels (issue 39; ``massive_activations`` reproduces it), so
an fp16 graph turns it into inf, then NaN.  This module measures and fixes it, torch only:

* :func:`measure_peaks`: greedy runs (the caller's texts and requests) with forward hooks on every
  module of each graph's torch stack (``STACKS``: the code predictor, the talker's decoder stack):
  the peak |x| of every module's first input and of its output, per tensor, and per channel for
  each SwiGLU MLP (``down_proj``'s input, ``silu(gate_proj(x)) * up_proj(x)``, and ``up_proj``'s
  output);
* :func:`plan_rescale`: for each MLP channel whose peak exceeds ``FP16_MAX / MARGIN``, the
  smallest ``k`` with ``peak / 2**k <= FP16_MAX / MARGIN``; every other tensor over ``FP16_MAX``
  is a refusal (no exact rescale moves it);
* :func:`apply_rescale`: ``up_proj`` row c divided by ``2**k``, ``down_proj`` column c multiplied
  by it.  A power-of-two factor changes only the exponent of a float, so (no underflow, no overflow,
  checked here) every product and sum in ``up_proj`` is the old one / ``2**k`` exactly, ``silu(g)
  * u`` too, and ``down_proj``'s products ``(x_c / 2**k) * (w_c * 2**k)`` are the old ones bit for
  bit: the fp32 model is the same function, bit-identical (``tests/pipelines/test_fp16_headroom.py``).

``MARGIN`` 4 (two bits): the peak over a handful of texts is not the peak over what a user
types; on the reduced massive-activation roots a held-out text peaked at 0.8-1.5x the median
calibration text (docs/massive-activations.md), and a factor 4 covers that spread with room.  It
costs nothing in fp16: the relative precision of a normal fp16 number does not depend on its
exponent, and 2 bits move a channel's small values only 2 bits nearer fp16's subnormals (6.1e-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FP16_MAX = 65504.0
#: a rescaled channel's peak ends at most at FP16_MAX / MARGIN (module docstring: why 4)
MARGIN = 4
#: graph name -> attribute path of its torch stack under ``tts.net``
STACKS = {"code_predictor": "talker.code_predictor", "talker": "talker.model"}


def stack_module(tts, graph: str):
    module = tts.net
    for part in STACKS[graph].split("."):
        module = getattr(module, part)
    return module


def _mlps(stack):
    """``(layer index, mlp)`` of each SwiGLU MLP (``gate_proj`` / ``up_proj`` / ``down_proj``) in ``stack``."""
    layers = getattr(getattr(stack, "model", stack), "layers", [])
    return [(i, layer.mlp) for i, layer in enumerate(layers)
            if all(hasattr(getattr(layer, "mlp", None), a) for a in ("gate_proj", "up_proj", "down_proj"))]


@dataclass
class Peaks:
    """What :func:`measure_peaks` found: ``tensors``: graph -> tensor name (``<module>:input`` /
    ``<module>:output``, module names relative to the graph's stack) -> peak |x|; ``channels``:
    graph -> layer -> ``{"down_proj:input": [I], "up_proj:output": [I]}`` peaks per channel."""
    tensors: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    frames: int = 0
    #: graph -> Linear module name -> its input's peak per channel ``[in_features]`` (outliers:
    #: a CPU quantizer's per-tensor / per-block activation scale, :func:`outlier_inputs`)
    linear_inputs: dict = field(default_factory=dict)


def measure_peaks(tts, graphs, runs, frames: int) -> Peaks:
    """fp32 peaks of ``graphs`` (names in ``STACKS``) over greedy runs of ``tts``: ``runs`` is a
    list of ``(text, generate_frames keywords)``, each run ``frames`` frames at most."""
    import numpy as np
    import torch

    from rkspeech.models.qwen3_tts.sampling import GenerationOptions

    peaks = Peaks()
    scalar: dict = {}  # (graph, tensor) -> 0-d float64 tensor
    handles = []

    def amax(x):
        return x.detach().abs().amax().to(torch.float64)

    def per_channel(x):
        return x.detach().abs().reshape(-1, x.shape[-1]).amax(0).to(torch.float64)

    def watch(graph, name, module):
        def hook(_m, args, out):
            for kind, t in (("input", args[0] if args else None), ("output", out)):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
                    key = (graph, f"{name}:{kind}")
                    v = amax(t)
                    scalar[key] = torch.maximum(scalar[key], v) if key in scalar else v
        return module.register_forward_hook(hook)

    channel: dict = {}  # (graph, layer, tensor) -> [I] float64

    def watch_channel(graph, layer, module, kind):
        def hook(_m, args, out):
            t = args[0] if kind == "input" else out
            key = (graph, layer, f"{'down_proj' if kind == 'input' else 'up_proj'}:{kind}")
            v = per_channel(t)
            channel[key] = torch.maximum(channel[key], v) if key in channel else v
        return module.register_forward_hook(hook)

    linear: dict = {}  # (graph, module name) -> [in_features] float64

    def watch_linear(graph, name, module):
        def hook(_m, args, _out):
            key = (graph, name)
            v = per_channel(args[0])
            linear[key] = torch.maximum(linear[key], v) if key in linear else v
        return module.register_forward_hook(hook)

    for graph in graphs:
        stack = stack_module(tts, graph)
        for name, module in stack.named_modules():
            if name:
                handles.append(watch(graph, name, module))
                if isinstance(module, torch.nn.Linear):
                    handles.append(watch_linear(graph, name, module))
        for i, mlp in _mlps(stack):
            handles.append(watch_channel(graph, i, mlp.down_proj, "input"))
            handles.append(watch_channel(graph, i, mlp.up_proj, "output"))
    try:
        opts = GenerationOptions.greedy(max_new_tokens=frames)
        with torch.no_grad():
            for text, request in runs:
                for _ in tts.generate_frames(text, options=opts, **request):
                    peaks.frames += 1
    finally:
        for h in handles:
            h.remove()
    for (graph, name), v in scalar.items():
        peaks.tensors.setdefault(graph, {})[name] = float(v)
    for (graph, layer, name), v in channel.items():
        peaks.channels.setdefault(graph, {}).setdefault(layer, {})[name] = np.asarray(v.numpy())
    for (graph, name), v in linear.items():
        peaks.linear_inputs.setdefault(graph, {})[name] = np.asarray(v.numpy())
    return peaks


#: A MatMul whose input's largest channel peak is more than this many times its median channel's
#: is kept in fp32 by the CPU quantizers (``convert.cpu_quant``, ``CpuQuantOptions.keep_fp32``):
#: int8 dynamic quantization scales each activation tensor as a whole to uint8 (step ~ 2 x peak /
#: 255) and MatMulNBits' accuracy level 4 each block of 32 channels to int8 (step = peak / 127),
#: so past 2^7 the median channel is at most one step: its values round to 0 or +-1 step.
#: Measured (docs/fp16-headroom.md): the plain reduced roots' Linear inputs stay far below it, the
#: massive-activation root's code predictor layer-1 ``down_proj`` input is far above it.
OUTLIER_RATIO = 128.0


def outlier_inputs(peaks: Peaks, graph: str, *, ratio: float = OUTLIER_RATIO) -> list[dict]:
    """The Linear modules of ``graph`` whose input carries an outlier channel: ``{"module",
    "peak", "median", "ratio"}`` (peak / median channel peak > ``ratio``), largest ratio first."""
    import numpy as np

    out = []
    for name, v in (peaks.linear_inputs.get(graph) or {}).items():
        med = float(np.median(v))
        r = float(v.max()) / med if med > 0 else math.inf
        if r > ratio:
            out.append({"module": name, "peak": round(float(v.max()), 3), "median": round(med, 6),
                        "ratio": round(r, 1) if math.isfinite(r) else None})
    return sorted(out, key=lambda x: -(x["ratio"] or math.inf))


def largest_outlier_ratio(peaks: Peaks, graph: str) -> dict | None:
    """The Linear input of ``graph`` with the largest peak / median channel ratio (for the report)."""
    import numpy as np

    best = None
    for name, v in (peaks.linear_inputs.get(graph) or {}).items():
        med = float(np.median(v))
        if med > 0 and (best is None or v.max() / med > best[1]):
            best = (name, float(v.max()) / med)
    return None if best is None else {"module": best[0], "ratio": round(best[1], 1)}


def _shift(peak: float, limit: float) -> int:
    """The smallest k >= 0 with peak / 2**k <= limit."""
    k = max(0, math.ceil(math.log2(peak / limit))) if peak > 0 else 0
    while peak / 2 ** k > limit:  # log2's rounding
        k += 1
    return k


def plan_rescale(peaks: Peaks, graph: str, *, margin: float = MARGIN) -> dict:
    """The rescale of ``graph`` and what stays over the fp16 range after it:
    ``{"rescale": [{"layer", "channels", "shift"}], "after": {tensor: peak}, "over": [(tensor, peak)]}``
    (``over``: tensors whose peak, after the rescale, still exceeds ``FP16_MAX``, largest first)."""
    import numpy as np

    limit = FP16_MAX / margin
    prefix = _mlp_prefix_for(graph)
    after = dict(peaks.tensors.get(graph, {}))
    groups: dict[tuple[int, int], list[int]] = {}
    for layer, ch in sorted((peaks.channels.get(graph) or {}).items()):
        both = np.maximum(ch["down_proj:input"], ch["up_proj:output"])
        shifts = np.array([_shift(float(p), limit) for p in both])
        for c in np.nonzero(shifts)[0]:
            groups.setdefault((layer, int(shifts[c])), []).append(int(c))
        scaled = {name: v / 2.0 ** shifts for name, v in ch.items()}
        after[f"{prefix}.{layer}.mlp.down_proj:input"] = float(scaled["down_proj:input"].max())
        after[f"{prefix}.{layer}.mlp.up_proj:output"] = float(scaled["up_proj:output"].max())
    rescale = [{"layer": layer, "channels": chans, "shift": k} for (layer, k), chans in sorted(groups.items())]
    over = sorted(((n, p) for n, p in after.items() if p > FP16_MAX), key=lambda x: -x[1])
    return {"rescale": rescale, "after": after, "over": over}


def _mlp_prefix_for(graph: str) -> str:
    """Module names of the MLP layers relative to ``graph``'s stack (``STACKS``)."""
    return "model.layers" if graph == "code_predictor" else "layers"


def top_tensors(tensors: dict, n: int = 8) -> list[dict]:
    """The ``n`` largest peaks as ``{"tensor", "peak", "ratio"}`` (ratio: peak / FP16_MAX)."""
    rows = sorted(tensors.items(), key=lambda x: -x[1])[:n]
    return [{"tensor": t, "peak": round(p, 3), "ratio": round(p / FP16_MAX, 4)} for t, p in rows]


def apply_rescale(tts, graph: str, rescale: list[dict]) -> None:
    """Fold ``rescale`` (:func:`plan_rescale`'s) into ``tts``' weights in place: ``up_proj`` row c
    (and its bias) / ``2**shift``, ``down_proj`` column c * ``2**shift``.  Refuses (ValueError) a
    factor that would not be exact (a weight that under- or overflows), before changing anything."""
    import torch

    mlps = dict(_mlps(stack_module(tts, graph)))
    changes = []
    for entry in rescale:
        mlp, f = mlps[int(entry["layer"])], 2.0 ** int(entry["shift"])
        idx = torch.as_tensor(entry["channels"], dtype=torch.long)
        parts = [(mlp.up_proj.weight, (idx, slice(None)), 1 / f), (mlp.down_proj.weight, (slice(None), idx), f)]
        if mlp.up_proj.bias is not None:
            parts.append((mlp.up_proj.bias, (idx,), 1 / f))
        for w, at, g in parts:
            old = w.data[at]
            new = old * g
            if not (torch.isfinite(new).all() and torch.equal(new / g, old)):
                raise ValueError(f"{graph} layer {entry['layer']}: a 2**{entry['shift']} rescale is not exact "
                                 "for these weights (under- or overflow)")
            changes.append((w, at, new))
    with torch.no_grad():
        for w, at, new in changes:
            w.data[at] = new
