"""What the preflight lint knows, as data: one entry per rule, each with where the fact came from.

``severity``: "error" = the converter crashes/refuses or the graph cannot be static on the NPU
(lint exits non-zero); "warning" = builds, but runs on the CPU or loses accuracy.
``targets``: chips the entry applies to ("*" = all).  ``ops``: ONNX op types a placement entry
matches.  Edit this list, not the checker, when a new fact is measured.
"""

from __future__ import annotations

from rkspeech.core.targets import IO_WIDTH_ALIGN

ALL = ("*",)
FIELD_NOTES = "shared/docs/field-notes.md"

RULES: list[dict] = [
    {
        "id": "dynamic-dim",
        "severity": "error",
        "targets": ALL,
        "description": "graph input/output has a dynamic or symbolic dim; the RKNN compiler needs "
                       "static shapes (export with fixed shapes)",
        "source": "seed 003 (static shapes); rknn-toolkit2 docs: dynamic_input is experimental",
    },
    {
        "id": "layernorm-no-epsilon",
        "severity": "error",
        "targets": ALL,
        "description": "LayerNormalization without an explicit epsilon attribute breaks the "
                       "rknn-toolkit2 2.5.0 build (set epsilon explicitly when exporting)",
        "source": f"{FIELD_NOTES}: reproduced build failure, rknn-toolkit2 2.5.0, measured here 2026-11",
    },
    {
        "id": "single-head-3d-attention",
        "severity": "error",
        "targets": ALL,
        "description": "3-D single-head attention from MatMuls (MatMul->Softmax->MatMul on rank-3 "
                       "tensors) crashes the build with KeyError: 'q_mm'; use the 4-D multi-head "
                       "form [B, H, T, D], which fuses",
        "source": f"{FIELD_NOTES}: reproduced build failure (KeyError 'q_mm'), rknn-toolkit2 2.5.0",
    },
    {
        "id": "skip-layernorm",
        "severity": "error",
        "targets": ALL,
        "description": "onnxruntime-fused SkipLayerNormalization (com.microsoft) is not converted; "
                       "export the unfused graph (no onnxruntime transformer optimizer)",
        "source": f"{FIELD_NOTES}: reproduced build failure, rknn-toolkit2 2.5.0",
    },
    {
        "id": "cpu-op",
        "severity": "warning",
        "targets": ("rk3588",),
        "ops": ("Sin", "Cos", "Floor", "Round", "Mod"),
        "description": "op lands on the CPU (silent fallback; an NPU->CPU->NPU round trip mid-graph)",
        "source": f"{FIELD_NOTES}: single-op graphs, rk3588 fp16, measured here 2026-11 (Sin, Floor, "
                  "Round, Mod); vocoder step graph placement (Cos); this module's test (Sin, Cos)",
    },
    {
        "id": "cpu-op-unverified",
        "severity": "warning",
        "targets": ALL,
        "ops": ("Erf", "TopK", "NonZero", "ScatterND", "Einsum", "CumSum", "Range"),
        "description": "op is expected to land on the CPU (not in the NPU op tables or measured "
                       "elsewhere); verify with `rkspeech convert` placement",
        "source": "rknn-toolkit2 doc/RKNNToolKit2_OP_Support (op tables per chip); not measured here",
    },
    {
        "id": "cpu-op-other-chips",
        "severity": "warning",
        "targets": ("rk3576", "rk3562", "rk3566", "rk3568"),
        "ops": ("Sin", "Cos", "Floor", "Round", "Mod"),
        "description": "op lands on the CPU on rk3588; assumed the same on this chip (not measured)",
        "source": f"{FIELD_NOTES} (rk3588 measurement), extrapolated",
    },
    {
        "id": "float-to-int-cast",
        "severity": "warning",
        "targets": ALL,
        "description": "Cast from float to an integer type lands on the CPU",
        "source": f"{FIELD_NOTES}: single-op graph, rk3588 fp16, measured here 2026-11",
    },
    {
        "id": "runtime-gather",
        "severity": "warning",
        "targets": ALL,
        "description": "Gather with runtime (non-initializer) indices lands on the CPU "
                       "(e.g. codebook lookups)",
        "source": f"{FIELD_NOTES}: vocoder step graph, 16 codebook Gathers on the CPU, rk3588",
    },
    {
        "id": "convtranspose-stride",
        "severity": "warning",
        "targets": ALL,
        "allowed_strides": (1, 2, 4, 8),
        "description": "ConvTranspose with a stride outside 1/2/4/8 is padded on the CPU "
                       "(exConvTransposePad)",
        "source": f"{FIELD_NOTES}: vocoder step graph placement (strides 3 and 5), rk3588",
    },
    {
        "id": "dilated-conv-regtask",
        "severity": "warning",
        "targets": ("rk3588",),
        "min_dilation": 3,
        "description": "dilated Conv (dilation >= 3) over a long axis makes the compiler log REGTASK "
                       "'bit width exceeds the limit' lines; such layers are known to fail on a board; "
                       "fold time to [T/d, d] and use an undilated (k,1) Conv2d",
        "source": f"{FIELD_NOTES}: single Conv1d C=96 k=7 rk3588 fp16 (d=3: 24 lines, d=9: 645,120); "
                  "rknn-toolkit2 #419, rknn_model_zoo #360",
    },
    {
        "id": "unaligned-3d-io",
        "severity": "warning",
        "targets": ("rk3588",),
        "align": IO_WIDTH_ALIGN,
        "description": "3-D graph input or output [1, C, W] (C > 1) with W not a multiple of 8: the "
                       "compiler moves it between (1, C, W) and its 4-D layout (1, C, 1, W) with a "
                       "Reshape that runs on the CPU; view it as one channel of C rows instead "
                       "(a Reshape to (1, 1, C, W) as its only reader / from one as its writer), "
                       "which the NPU runs",
        "source": "measured here 2026-12-01, rknn-toolkit2 2.5.0, rk3588 fp16: single graphs "
                  "[1,16,W] -> Conv1d or Relu (W = 2-6, 12: a CPU Reshape at the input and at the "
                  "output; 8, 16, 24, 32: NPU; a (1,1,16,W) view: NPU); the vocoder's B=4 first "
                  "step (audio_codes [1,16,4], 903 NPU / 1 CPU published); docs/npu-formulation.md",
    },
    {
        "id": "fp16-overflow",
        "severity": "warning",
        "targets": ALL,
        "limit": 65504.0,
        "description": "activation exceeds the fp16 range (|x| > 65504) on a sample input: "
                       "inf/NaN on the NPU in fp16 (e.g. sums of squares); rescale before it",
        "source": f"{FIELD_NOTES}: fp16 sums of squares above 65504 become NaN (measured here)",
    },
]


def rule(rule_id: str) -> dict:
    for r in RULES:
        if r["id"] == rule_id:
            return r
    raise KeyError(rule_id)


def applies(entry: dict, target: str) -> bool:
    return "*" in entry["targets"] or target in entry["targets"]
