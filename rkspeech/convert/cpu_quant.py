"""CPU variants of a step graph: the exported fp32 ONNX with its MatMul weights in fp32, int8 or 4 bits.

:func:`quantize_step_graph` takes an exported step graph (talker prefill / decode, code predictor
frame or step: any ONNX that carries the ``rkspeech.contract`` metadata) and writes the variant
:class:`CpuQuantOptions` asks for, with onnxruntime's own quantizers only:

* ``fp32``: a byte copy (the placement ``cpu-fp32``).
* ``int4``: ``onnxruntime.quantization.matmul_4bits_quantizer.MatMul4BitsQuantizer`` (round to
  nearest, block-wise along K): every MatMul with a 2-D constant weight becomes a
  ``com.microsoft`` ``MatMulNBits`` node; ``block_size`` (a power of two >= 16), ``symmetric``
  and ``accuracy_level`` are recorded.  Defaults, measured (``benchmarks/bench_cpu_quant.py``,
  docs/cpu-stages.md): block 32 (reduced talker logit SNR 26.9 dB vs 25.6 dB at
  block 128; code predictor step 17.1 vs 16.1 dB; at the published size 320 MB vs 268 MB and
  the talker decode step ~8 % slower than at block 128), asymmetric (26.9 vs 26.0 dB symmetric),
  ``accuracy_level`` 4 (the activations quantized to int8 per block inside the kernel: the
  published talker decode step 1.8x and the code predictor step 2.9x faster than with
  ``accuracy_level`` 0, which computes in fp32; the same reduced logit SNR to 0.1 dB).
* ``int8``: ``onnxruntime.quantization.quantize_dynamic`` on MatMul only (``MatMulConstBOnly``):
  int8 weights, activations quantized to uint8 per call (``DynamicQuantizeLinear`` +
  ``MatMulInteger``).  Why dynamic and not weight-only int8: onnxruntime 1.19.2 has no
  weight-only int8 CPU path: its ``MatMulNBits`` kernel refuses ``bits=8`` ("Only 4b quantization
  is supported for MatMulNBits op", measured), and its other int8 route
  (``quantize_static``, QDQ) quantizes the activations too and needs a calibration set.
  Per channel is the default: reduced talker logit SNR 46.1 dB vs 44.2 dB per tensor (code
  predictor step 36.7 vs 34.9 dB) for 4 % more bytes.  Published step time vs fp32 in the same
  run: talker decode int8 0.50x, int4 0.44x; code predictor step int8 0.37x, int4 0.36x.

Every variant keeps the source's metadata (the ``rkspeech.contract`` key is copied back when a
quantizer drops or changes it) and its graph inputs and outputs (names and shapes, checked on
the written file); the file is written atomically (``core.atomic``).  The returned dict
(:func:`quantize_step_graph`) is what a plan records: quantizer, bits, block size, symmetric or
not, onnxruntime version, sizes before and after.

onnx and onnxruntime are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rkspeech.contracts.base import CONTRACT_KEY
from rkspeech.core.errors import RkspeechError

#: Weight variants, as ``core.placement.CPU_VARIANTS`` names them.
VARIANTS = ("fp32", "int8", "int4")
#: The quantizer each variant uses (recorded in the report).
QUANTIZERS = {"fp32": "copy", "int8": "onnxruntime.quantization.quantize_dynamic",
              "int4": "onnxruntime.quantization.matmul_4bits_quantizer.MatMul4BitsQuantizer"}
#: Op types that hold quantized weights in each variant's output.
QUANTIZED_OPS = {"int8": ("MatMulInteger", "DynamicQuantizeMatMul"), "int4": ("MatMulNBits",)}


@dataclass(frozen=True)
class CpuQuantOptions:
    """What :func:`quantize_step_graph` writes.

    ``variant``: one of :data:`VARIANTS`.  int4: ``block_size`` (a power of two >= 16; K is
    padded to whole blocks), ``symmetric`` (no zero point), ``accuracy_level`` (MatMulNBits'
    compute type: 4 = int8, 0 = fp32; None leaves the attribute out, i.e. 0).  int8:
    ``per_channel`` (one weight scale per output column instead of one per matrix).  Options of
    the other variants are ignored and not recorded.  ``keep_fp32``: the MatMuls left out of the
    quantization, by their module's weight (:func:`matmuls_of` finds them in each graph; the
    record lists each with the bytes it costs)."""

    variant: str = "int4"
    block_size: int = 32
    symmetric: bool = False
    accuracy_level: int | None = 4
    per_channel: bool = True
    #: ``(module name, K, N, weight_digest)`` of each MatMul that stays fp32 (names as
    #: ``models.qwen3_tts.fp16_headroom`` gives them): an input carrying an outlier channel, which
    #: a per-tensor (int8) or per-block (int4, accuracy level 4) activation scale would flatten
    keep_fp32: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "keep_fp32", tuple(tuple(k) for k in self.keep_fp32))
        if self.variant not in VARIANTS:
            raise RkspeechError(f"unknown CPU weight variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        if self.variant == "int4":
            b = self.block_size
            if not isinstance(b, int) or b < 16 or b & (b - 1):
                raise RkspeechError(f"int4 block size must be a power of two >= 16, got {b!r}")
            if self.accuracy_level not in (None, 0, 1, 2, 3, 4):
                raise RkspeechError(f"int4 accuracy_level must be 0-4 or None, got {self.accuracy_level!r}")

    @classmethod
    def for_placement(cls, placement: str, **kw) -> CpuQuantOptions:
        """The options of a CPU placement (``core.placement.PLACEMENTS``: ``cpu-int4`` ...);
        ``npu`` or an unknown name is a one-line RkspeechError."""
        from rkspeech.core.placement import cpu_variant

        variant = cpu_variant(placement)
        if variant is None:
            raise RkspeechError(f"placement {placement!r} is not a CPU placement; nothing to quantize")
        return cls(variant=variant, **kw)

    def record(self) -> dict:
        """The options that apply to this variant, as the report records them."""
        d = asdict(self)
        if self.variant == "int4":
            return {"bits": 4, "block_size": d["block_size"], "symmetric": d["symmetric"],
                    "accuracy_level": d["accuracy_level"]}
        if self.variant == "int8":
            return {"bits": 8, "block_size": None, "symmetric": True, "per_channel": d["per_channel"],
                    "activations": "uint8, dynamic per call"}
        return {"bits": 32, "block_size": None, "symmetric": None}


def read_step_graph_metadata(path) -> dict[str, str]:
    """The metadata of an exported step graph; a missing file, a file that is not ONNX or one
    without the contract is a one-line RkspeechError."""
    from rkspeech.contracts.read import check_onnx_file, read_onnx_metadata

    p = check_onnx_file(path)
    meta = read_onnx_metadata(p)
    if CONTRACT_KEY not in meta:
        raise RkspeechError(f"{p}: no {CONTRACT_KEY} metadata: not a step graph exported by rkspeech "
                            "(export it with rkspeech build/export first)")
    return meta


@contextlib.contextmanager
def _quiet_quantizer():
    """onnxruntime's quantizers log a pre-processing hint at WARNING on the root logger."""
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


def weight_digest(matrix) -> str:
    """sha256 of a MatMul weight ``[K, N]`` as float32 (C order): how a module's weight (a torch
    Linear's ``weight.T``) is found among a graph's initializers whatever the exporter named it
    (the step graphs' node names lose the layer: ``/mlp/down_proj_1/MatMul`` is layer 1's)."""
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(matrix, dtype=np.float32).tobytes()).hexdigest()


def matmuls_of(model, keep) -> dict[str, list[dict]]:
    """Module name -> the MatMul nodes of ``model`` (a ModelProto) whose constant 2-D weight is that
    module's: ``keep`` holds ``(module, K, N, weight_digest)`` entries; each node found is
    ``{"node", "K", "N"}``."""
    from onnx import numpy_helper

    wanted: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for module, K, N, digest in keep:
        wanted.setdefault((int(K), int(N)), []).append((module, digest))
    inits = {i.name: i for i in model.graph.initializer if tuple(i.dims) in wanted}
    digests: dict[str, str] = {}
    out: dict[str, list[dict]] = {k[0]: [] for k in keep}
    for node in model.graph.node:
        if node.op_type != "MatMul" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        init = inits[node.input[1]]
        if init.name not in digests:
            digests[init.name] = weight_digest(numpy_helper.to_array(init))
        K, N = (int(d) for d in init.dims)
        for module, digest in wanted[(K, N)]:
            if digests[init.name] == digest:
                out[module].append({"node": node.name, "K": K, "N": N})
    return out


def quantized_bytes(K: int, N: int, options: CpuQuantOptions) -> int:
    """Bytes a ``[K, N]`` weight takes in ``options.variant`` (weights, scales, zero points): what
    keeping it fp32 (``4 K N``) saves against; onnxruntime's layouts (int8: per output column
    fp32 scale and int8 zero point, or one of each; int4: K padded to blocks of ``block_size``,
    two weights a byte, an fp32 scale per block, a 4-bit zero point per block unless symmetric)."""
    if options.variant == "int8":
        n = N if options.per_channel else 1
        return K * N + 5 * n
    if options.variant == "int4":
        blocks = -(-K // options.block_size)
        zp = 0 if options.symmetric else N * (-(-blocks // 2))
        return N * blocks * options.block_size // 2 + 4 * N * blocks + zp
    return 4 * K * N


def _quantize_model(src: Path, options: CpuQuantOptions, scratch: Path):
    """``(the quantized ModelProto of src, the kept MatMuls)``: ``options.keep_fp32``'s MatMuls
    excluded from the quantization, each ``{"module", "node", "K", "N", "bytes"}`` (``bytes``:
    what keeping it fp32 costs against the variant).  A module with no MatMul in ``src`` is a
    one-line RkspeechError."""
    import onnx

    model = onnx.load(str(src))
    kept = []
    for module, nodes in matmuls_of(model, options.keep_fp32).items():
        if not nodes:
            raise RkspeechError(f"{src.name}: no MatMul holds {module}'s weight, which should stay fp32 (its "
                                "outlier input was measured on the torch model; was the graph exported from another?)")
        kept += [{"module": module, **n, "bytes": 4 * n["K"] * n["N"] - quantized_bytes(n["K"], n["N"], options)}
                 for n in nodes]
    exclude = [k["node"] for k in kept]
    with _quiet_quantizer():
        if options.variant == "int4":
            from onnxruntime.quantization.matmul_4bits_quantizer import MatMul4BitsQuantizer

            q = MatMul4BitsQuantizer(model, block_size=options.block_size, is_symmetric=options.symmetric,
                                     accuracy_level=options.accuracy_level, nodes_to_exclude=exclude)
            q.process()
            return q.model.model, kept
        from onnxruntime.quantization import QuantType, quantize_dynamic

        out = scratch / "int8.onnx"
        quantize_dynamic(model, out, op_types_to_quantize=["MatMul"], per_channel=options.per_channel,
                         weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True},
                         nodes_to_exclude=exclude)
        return onnx.load(str(out)), kept


def _restore_metadata(model, meta: dict[str, str]) -> list[str]:
    """Put every source metadata entry back as it was (the quantizers add their own keys, which
    stay); returns the keys that had to be restored."""
    have = {p.key: p for p in model.metadata_props}
    fixed = []
    for key, value in meta.items():
        if key in have:
            if have[key].value != value:
                have[key].value = value
                fixed.append(key)
        else:
            p = model.metadata_props.add()
            p.key, p.value = key, value
            fixed.append(key)
    return fixed


def _op_counts(model) -> dict[str, int]:
    import collections

    return dict(collections.Counter(n.op_type for n in model.graph.node))


def quantize_step_graph(src: str | os.PathLike, dst: str | os.PathLike, options: CpuQuantOptions) -> dict:
    """Write ``options.variant`` of the step graph ``src`` to ``dst``; return the record:
    ``variant``, ``quantizer``, ``bits``, ``block_size``, ``symmetric`` (and the variant's other
    options), ``onnxruntime`` (version), ``bytes_before`` / ``bytes_after`` / ``size_ratio``,
    ``quantized_ops`` (op type -> count in ``dst``), ``fp32_matmuls`` (MatMul nodes left, the
    activation x activation products of attention among them; None for the fp32 copy, which is
    not parsed), ``metadata_restored``,
    ``seconds``.  ``src`` must carry the ``rkspeech.contract`` metadata; ``dst`` gets it, and
    the same input and output names and shapes (checked)."""
    import onnxruntime

    from rkspeech.core.atomic import atomic_path
    from rkspeech.contracts.onnx_file import read_graph_io, read_metadata

    if not isinstance(options, CpuQuantOptions):
        raise RkspeechError(f"options must be a CpuQuantOptions, got {type(options).__name__}")
    src, dst = Path(src), Path(dst)
    meta = read_step_graph_metadata(src)
    if dst.resolve() == src.resolve():
        raise RkspeechError(f"{dst}: the variant must go to another file than its source")
    if dst.suffix.lower() != ".onnx":
        raise RkspeechError(f"{dst}: the variant is an ONNX graph; name it .onnx")
    io_before = read_graph_io(src)
    t0 = time.perf_counter()
    restored: list[str] = []
    kept: list[dict] = []
    ops: dict[str, int] | None = None  # the fp32 copy is not loaded
    with atomic_path(dst, suffix=".onnx") as tmp:
        if options.variant == "fp32":
            shutil.copyfile(src, tmp)
        else:
            import onnx

            from rkspeech.core.child import scratch as work_folder

            with work_folder(dst.parent, prefix=".cpu-quant.") as scratch:  # swept if a SIGKILL leaves it
                try:
                    model, kept = _quantize_model(src, options, Path(scratch))
                except RkspeechError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the quantizers raise what they like
                    raise RkspeechError(f"{src}: onnxruntime's {options.variant} quantizer failed: "
                                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
                restored = _restore_metadata(model, meta)
                ops = _op_counts(model)
                onnx.save(model, str(tmp))
                del model
        got_meta = read_metadata(tmp) or {}
        if got_meta.get(CONTRACT_KEY) != meta[CONTRACT_KEY]:
            raise RkspeechError(f"{dst}: the {options.variant} variant lost its {CONTRACT_KEY} metadata")
        io_after = read_graph_io(tmp)
        if io_after != io_before:
            raise RkspeechError(f"{dst}: the {options.variant} variant changed the graph's inputs/outputs "
                                f"({io_before} -> {io_after})")
    from rkspeech.export.weights import graph_bytes

    before, after = graph_bytes(src), graph_bytes(dst)  # a published fp32 graph's weights are external
    quantized = {op: ops.get(op, 0) for op in QUANTIZED_OPS.get(options.variant, ())} if ops else {}
    return {"variant": options.variant, "quantizer": QUANTIZERS[options.variant], **options.record(),
            "onnxruntime": onnxruntime.__version__, "source": str(src), "bytes_before": before,
            "bytes_after": after, "size_ratio": round(after / before, 4), "quantized_ops": quantized,
            "fp32_matmuls": None if ops is None else ops.get("MatMul", 0), "metadata_restored": restored,
            **({"kept_fp32": kept, "kept_fp32_bytes": sum(k["bytes"] for k in kept)} if options.keep_fp32 else {}),
            "seconds": round(time.perf_counter() - t0, 3)}
