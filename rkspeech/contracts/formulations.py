"""The step-graph formulations and the default (standard library only: the CLI imports it).

* ``reference`` - ``rkspeech.stepgraph.step.VocoderStep``: the model's own ops (Sin, Gather,
  ConvTranspose, dilated convs); int64 codes, channel-major cache tails.
* ``npu`` - ``rkspeech.stepgraph.step_npu.NpuVocoderStep``: the same I/O names and shapes,
  every op on the NPU (float32 codes, time-major tails; see docs/npu-formulation.md).

``npu`` is the default: at the published size on rk3588 (B=16, fp16) it has 0 CPU ops and
0 REGTASK lines against the reference graph's 69 and 931,920 (REGTASK-overflow layers are a
known board failure), the same simulator SNR (47.34 vs 47.3 dB), less than half the conversion
memory (3.0 vs 7.4 GB) and a smaller .rknn (265 vs 360 MB).  Against it: the compiler plans
1.9x the reference graph's read traffic (2.35 vs 1.26 GB per step; 3.5x before the phase Snake,
docs/estimate.md), which only a board can weigh.

Contracts, plans and build states written before the reference formulation had its name say
``seed``; :func:`canonical` maps it, so those artifacts and ``--formulation seed`` keep working.
"""

from __future__ import annotations

REFERENCE = "reference"
NPU = "npu"
FORMULATIONS = (REFERENCE, NPU)
DEFAULT_FORMULATION = NPU
#: Names recorded by earlier artifacts -> the formulation they mean.
ALIASES = {"seed": REFERENCE}
#: What the CLI accepts for ``--formulation``.
CHOICES = FORMULATIONS + tuple(ALIASES)


def canonical(name: str) -> str:
    """The formulation ``name`` means (aliases resolved); unknown names are returned as they are."""
    return ALIASES.get(name, name)


def file_tag(name: str) -> str:
    """Infix of artifact names: none for the reference graph, ``_npu`` for the npu graph."""
    name = canonical(name)
    return "" if name == REFERENCE else f"_{name}"
