"""The compiler's layer table read for the estimate: each layer's class (conv, matmul, elementwise,
data movement, cpu), its write traffic (the table's RW column counts reads only), the cycles of a
fused attention op (printed as 0), and the model block it belongs to (``steptime`` prices them).
"""

from __future__ import annotations

import math
import re

CLASSES = ("conv", "matmul", "elementwise", "data movement", "cpu", "other")

_ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Clip", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Abs", "Max",
    "Min", "Pow", "Sqrt", "Exp", "Log", "Erf", "Neg", "Reciprocal", "Sin", "Cos", "Where", "Equal",
    "Greater", "Less", "Not", "And", "Or", "BatchNormalization", "InstanceNormalization", "exNorm",
    "LayerNormalization", "exLayerNorm", "RMSNorm", "exRMSNorm", "Softmax", "exSoftmax", "exSoftmax13",
    "exGelu", "Gelu", "exSwish", "Swish", "HardSwish", "exHardSwish", "HardSigmoid", "Mish", "Elu",
    "Floor", "Round", "Ceil", "Mod", "Sign", "ReduceMean", "ReduceSum", "ReduceMax", "GlobalAveragePool",
}
_DATA_MOVEMENT = {
    "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "Resize", "Pad", "Flatten", "Squeeze",
    "Unsqueeze", "Tile", "Expand", "DataConvert", "exDataConvert", "Permute", "Cast", "DepthToSpace",
    "SpaceToDepth", "ScatterND", "Identity", "Upsample", "exConvTransposePad",
}
_MATMUL = {"MatMul", "exMatMul", "Gemm", "FullyConnected", "exSDPAttention", "Attention"}

#: The Qwen3-TTS 12 Hz vocoder's rates (published config: upsampling_ratios [2, 2], upsample_rates
#: [8, 5, 4, 3]); a step graph's layers are put in the stage whose rate their output has.
_VOCODER_STAGES = (
    (1, "token rate: codebook, pre_transformer"),
    (2, "upsample.0 (x2)"),
    (4, "upsample.1 + decoder in (x4)"),
    (32, "decoder block 1 (x32)"),
    (160, "decoder block 2 (x160)"),
    (640, "decoder block 3 (x640)"),
    (1920, "decoder block 4 + output (x1920)"),
)
_INDEXED = re.compile(r"^(?:layers|blocks|block|decoder|encoder|upsample|resblocks)\.\d+$|\.\d+$")


def classify(op_type: str, target: str = "NPU", full_name: str = "") -> str:
    """conv / matmul / elementwise / data movement / cpu / other (``io`` for Input/OutputOperator)."""
    if op_type in ("InputOperator", "OutputOperator"):
        return "io"
    if target == "CPU":
        return "cpu"
    node = full_name.partition(":")[2] if ":" in full_name else full_name
    if op_type in _MATMUL or (op_type.startswith("Conv") and re.search(r"MatMul|Gemm", node)):
        return "matmul"
    if op_type.startswith(("Conv", "exConv")) or op_type in ("DepthwiseConv", "Deconv"):
        return "conv"
    if op_type in _ELEMENTWISE:
        return "elementwise"
    if op_type in _DATA_MOVEMENT:
        return "data movement"
    return "other"


def _dims(shapes: str) -> list[int]:
    m = re.match(r"\(([\d,]+)\)", shapes.strip())
    return [int(v) for v in m.group(1).split(",") if v] if m else []


def _width(shapes: str) -> int:
    """Time (width) of a layer's first output: everything after (N, C)."""
    d = _dims(shapes)
    if len(d) >= 3:
        return math.prod(d[2:])
    return d[-1] if d else 0


def _write_kb(output_shapes: str, dtype: str, rw_kb: float) -> float:
    """KB a layer writes: its output tensor (fp16 2 bytes, FLOAT 4, INT8 1).  A truncated list of
    outputs (``(1,1536,1,16),...``: Split) writes what it reads."""
    if output_shapes.rstrip().endswith("...") or "),(" in output_shapes:
        return rw_kb
    d = _dims(output_shapes)
    if not d:
        return 0.0
    size = {"INT8": 1, "UINT8": 1, "FLOAT": 4, "FLOAT32": 4, "INT32": 4, "INT64": 8}.get(dtype.upper(), 2)
    return math.prod(d) * size / 1024


#: MACs per NPU cycle the compiler counts for fp16 (int8: twice that): a Whisper base 1x1 conv
#: (512 -> 512 over 1500 frames = 393.2 M MACs) prints 770,048 NPU cycles = 510.6 per cycle.
FP16_MACS_PER_CYCLE = 512


def attention_cycles(op_type: str, input_shapes: str, dtype: str) -> int:
    """NPU cycles of an ``exSDPAttention`` layer, which the table prints as 0/0/0: its two
    matmuls (Q K^T and P V, ``2 * heads * head_dim * Lq * Lk`` MACs) at the fp16 conv rate.
    Softmax and any spill of the score matrix are not counted."""
    if op_type != "exSDPAttention":
        return 0
    shapes = re.findall(r"\(([\d,]+)\)", input_shapes)
    if len(shapes) < 2:
        return 0
    q, k = ([int(v) for v in t.split(",") if v] for t in shapes[:2])
    if len(q) < 3 or len(k) < 3 or q[:2] != k[:2]:
        return 0
    macs = 2 * q[0] * q[1] * math.prod(q[2:]) * math.prod(k[2:])
    rate = FP16_MACS_PER_CYCLE * (2 if dtype.upper() in ("INT8", "UINT8") else 1)
    return int(macs // rate)


def _node_path(full_name: str) -> list[str]:
    node = full_name.partition(":")[2] if ":" in full_name else full_name
    return [p for p in node.split("/") if p][:-1]


def block_of(full_name: str, output_shapes: str, step_B: int | None, vocoder: bool) -> str:
    """Which block a layer belongs to.  Step graphs: the stage of the model whose rate the layer's
    output has (the npu formulation's node names are flat: ``/s22/Sub``, ``/conv_19/Conv``);
    ``layers.N`` nodes (the pre-transformer) go to the token-rate stage.  Other graphs: the first
    indexed module of the node name (``blocks.3``, ``layers.3``), else its first component."""
    path = _node_path(full_name)
    if step_B:
        if any(re.match(r"^layers\.\d+$", p) for p in path) or "pre_transformer" in path:
            return _VOCODER_STAGES[0][1] if vocoder else "x1"
        w = _width(output_shapes)
        if w <= 0:
            return "(no shape)"
        ratio = w / step_B
        if vocoder:
            best = min(_VOCODER_STAGES, key=lambda s: abs(math.log(max(ratio, 1e-9)) - math.log(s[0])))
            return best[1]
        return f"x{2 ** round(math.log2(max(ratio, 1e-9)))}"
    for i, p in enumerate(path):
        if _INDEXED.search(p):
            return "/".join(path[: i + 1])
    return path[0] if path else "(top level)"
