"""The ``int16-hybrid`` build: ``w16a16i_dfp`` with the layers int16 cannot take kept in fp16.

rknn-toolkit2 2.5.0 on rk3588 accepts ``w8a8`` and ``w16a16i_dfp`` (16-bit dynamic fixed point,
per-tensor power-of-two ranges).  Whole-graph int16 of the code predictor frame graph kills the
compiler (SIGILL after "Lut fuse dtype not support yet!" / "Meet unsupported tensor dtype in
exMatMul"), so this runs the toolkit's two hybrid steps (measured in
benchmarks/bench_code_predictor_int16.py, reduced checkpoint, 720 frames: 99.56 % greedy
agreement, 64.8 dB, 0 CPU ops, 0 REGTASK lines, against fp16's 98.48 %):

1. ``hybrid_quantization_step1`` calibrated on ``dataset`` (the graph must hold no tensor
   beyond +-16384: ``CodePredictorFrame(int16_ready=True)``);
2. the compiled layers ``HybridInt16Options.fp16_layers`` selects (``selected``) set to float16
   in ``custom_quantize_layers``: SiLU and the fused attention (compiler), Abs (LeakyRelu) and the
   one-hot's ``1 - x`` (SIGILL), every Concat (int16: a CPU op);
3. the int16 activation ranges widened x ``margin`` (a range is a power of two from the
   calibration max, and a frame beyond it saturates: no margin, 98.45 % / 31.7 dB; x2 98.94 %;
   x1.5 99.56 %), and the one-hot's ``max - logits`` narrowed to +-``pick_range`` (it spans the
   logits' whole spread, ~12, a 2^-10 grid that makes in-graph near-ties: without it 98.85 %);
4. ``hybrid_quantization_step2`` on a fresh ``RKNN`` with the same config.

Runs inside the conversion child (``convert.converter_child``) and the simulator child
(``runtime.runners.simulator``); the step files land in the current folder (the child's own).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INT16_DTYPE = "w16a16i_dfp"
#: the toolkit refuses an int16 range beyond this ("is too large for 'w16a16i_dfp'"; measured)
INT16_LIMIT = 16384.0


@dataclass(frozen=True)
class HybridInt16Options:
    """``fp16_layers``: ``op=TYPE`` (the compiled layer's op type), ``constop=TYPE`` (that type
    with a constant input) or a substring of the layer's name; ``margin``: int16 activation
    ranges x this; ``pick_range``: the one-hot's ``max - logits`` range (+-; 0: calibrated)."""

    fp16_layers: tuple[str, ...] = ("op=exSwish", "op=exSDPAttention", "op=LeakyRelu", "constop=Sub", "op=Concat")
    margin: float = 1.5
    pick_range: float = 1.0

    def to_dict(self) -> dict:
        return {"fp16_layers": list(self.fp16_layers), "margin": self.margin, "pick_range": self.pick_range}

    @classmethod
    def from_dict(cls, d: dict | None) -> HybridInt16Options:
        if not d:
            return cls()
        return cls(fp16_layers=tuple(d.get("fp16_layers", cls.fp16_layers)), margin=float(d.get("margin", 1.5)),
                   pick_range=float(d.get("pick_range", 1.0)))


def selected(node, pattern: str) -> bool:
    if pattern.startswith("op="):
        return node.op_type == pattern[3:]
    if pattern.startswith("constop="):
        return node.op_type == pattern[8:] and any("/Constant_" in i for i in node.input)
    return pattern in node.name


def fp16_tensors(model_path: Path, patterns) -> list[str]:
    """Output tensors of the compiled layers (step 1's ``.model``, ONNX protobuf) a pattern selects."""
    import onnx

    g = onnx.load(os.fspath(model_path), load_external_data=False).graph
    return [t for n in g.node if any(selected(n, p) for p in patterns) for t in n.output]


def edit_ranges(cfg: dict, model_path: Path, margin: float, pick_range: float) -> tuple[int, int]:
    """Widen / narrow the int16 activation ranges of step 1's cfg in place (min/max only: step 2
    refuses an edited scale and derives it from min/max); returns (widened, narrowed)."""
    import onnx

    nodes = onnx.load(os.fspath(model_path), load_external_data=False).graph.node
    outs = {t for n in nodes for t in n.output}
    # the one-hot's max - logits: a Sub whose first input is the broadcast MaxPool
    gaps = {n.output[0] for n in nodes if n.op_type == "Sub" and n.input[0].endswith("_rs_expand")
            and not any("/Constant_" in i for i in n.input)}
    widened = narrowed = 0
    for name, q in (cfg.get("quantize_parameters") or {}).items():
        if name not in outs or q.get("dtype") != "int16" or not q.get("scale"):
            continue
        if pick_range and name in gaps:
            q["min"], q["max"] = [-pick_range] * len(q["min"]), [pick_range] * len(q["max"])
            narrowed += 1
        elif margin != 1.0 and max(abs(v) for v in q["min"] + q["max"]) * margin <= INT16_LIMIT:
            q["min"], q["max"] = [v * margin for v in q["min"]], [v * margin for v in q["max"]]
            widened += 1
    return widened, narrowed


def hybrid_build(make_rknn, config: dict, onnx_path: str, dataset: str, options: HybridInt16Options,
                 say=print):
    """Load ``onnx_path`` and run the two hybrid steps in the current folder; returns
    ``(rknn, info)``: the built ``RKNN`` (step 2's; export or init_runtime next) and counts.
    ``make_rknn()`` makes a fresh ``RKNN``; ``config`` is ``RKNN.config``'s keywords (the
    quantized dtype is set here).  A toolkit step returning non-zero raises ``RuntimeError``
    naming it (the callers turn it into their one-line error)."""
    import yaml

    config = {**config, "quantized_dtype": INT16_DTYPE, "quantized_algorithm": "normal"}
    stem = Path(onnx_path).stem
    rknn = make_rknn()

    def step(name, fn):
        say(f"[rkspeech child] {name} ...")
        rc = fn()
        if rc not in (0, None):
            raise RuntimeError(f"rknn-toolkit2 {name}() returned {rc}")

    step("config", lambda: rknn.config(**config))
    step("load_onnx", lambda: rknn.load_onnx(model=onnx_path))
    step("hybrid_quantization_step1", lambda: rknn.hybrid_quantization_step1(dataset=dataset))
    model = Path(f"{stem}.model").resolve()
    cfg = yaml.safe_load(Path(f"{stem}.quantization.cfg").read_text())
    fp16 = fp16_tensors(model, options.fp16_layers)
    custom = cfg.get("custom_quantize_layers") or {}
    custom.update({t: "float16" for t in fp16})
    cfg["custom_quantize_layers"] = custom
    widened, narrowed = edit_ranges(cfg, model, options.margin, options.pick_range)
    Path(f"{stem}.hybrid.cfg").write_text(yaml.safe_dump(cfg, sort_keys=False))
    rknn.release()
    rknn = make_rknn()
    step("config", lambda: rknn.config(**config))
    step("hybrid_quantization_step2",
         lambda: rknn.hybrid_quantization_step2(f"{stem}.model", f"{stem}.data", f"{stem}.hybrid.cfg"))
    return rknn, {"fp16_tensors": len(fp16), "widened_ranges": widened, "pick_ranges": narrowed,
                  **options.to_dict()}
