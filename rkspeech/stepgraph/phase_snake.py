"""SnakeBeta ``x + gain * sin(freq x)^2`` with the phase reduced by fp16 rounding (NPU ops only).

The reflection form (``npu_ops.NpuSnake``) folds ``t = freq x * 2/pi`` into [0, 1] with 4-6
reflections of 3 elementwise passes each; on rk3588 every pass goes through DDR, and its 29
Snakes were 71 % of the published B=16 step's planned traffic (docs/estimate.md).  Here the
phase is reduced by two grouped 1x1 convs instead:

1. ``rounder``: ``n = -(a x) - R`` per channel (``a = freq/pi``, ``R = 1536 = 1.5 * 2^10``).
   Stored in fp16 - what every NPU activation is - it becomes ``-(q + R)`` with
   ``q = round(a x)``: fp16 values in [1024, 2048) are integers.
2. ``phase``: ``x`` and ``n`` stacked on a new axis (a Concat), a ``(2, 1)`` depthwise conv
   computes ``a x + n + R = a x - q`` in one accumulator, so the reduced phase
   ``v in [-0.5, 0.5]`` is exact up to its own fp16 rounding (the reflection form stores
   ``t`` first and keeps its absolute error, ulp(t) up to 2^-6, through every fold).  A Clip to
   [-0.5, 0.5] fuses into that conv (ConvClip) and bounds the error for ``|a x| > 512``.
3. ``sin(pi v)^2`` is a polynomial in ``s = v^2`` with ``gain`` folded into its coefficients,
   then ``x +``.

The exported graph writes step 1's rounding as ``Cast(float16)``/``Cast(float32)``, so
onnxruntime and torch round ``n`` as the NPU does and keep ``x`` exact; rknn-toolkit2 drops the
casts (the NPU stores fp16 anyway).  The fp32 graph is still approximate: ``a x + n`` runs at
magnitude 1536 (steps of 2^-13), 72 dB stepwise against the full decode (the reflection form:
113 dB), ``thresholds.PHASE_SNAKE_FP32_MIN_SNR_DB``.

Per Snake in the published B=16 step (rk3588 fp16 layer table, docs/npu-formulation.md; "A": one read or
write of the Snake's activation):

==============================  ======  ===================  ==============================
form                            layers  traffic              step simulator vs full decode
==============================  ======  ===================  ==============================
reflections, degree 5 (before)  32      69 A (median)        47.22 dB
phase convs, degree 4           11      30 A                 47.34 dB
==============================  ======  ===================  ==============================

Measured traps: with the two convs both reading ``x`` (``a x + M`` and ``-(a x) - M`` summed
by an Add) the optimizer cancelled them and folded the Snake to ``y = x`` (the Cast pair is
removed, the rest is linear); with the Add kept, both convs' outputs were stored in fp16 and
the Add gave 0 (a fused ConvAdd too).  A conv reading ``x`` and ``n`` together keeps ``a x``
inside the accumulator.  A grouped 1x1 conv ``x -> [x, n]`` followed by a grouped 2-in conv
instead of the Concat saved 3 activation passes per Snake on the reduced step (traffic 0.47x
instead of 0.50x) but rounds ``x`` in the fp32 graph too (64 dB stepwise), and at the published
size its conversion passed 20 GB during the build: not used.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rkspeech.stepgraph.npu_ops import sin2_coefficients

#: ``1.5 * 2^10``: ``R + u`` lands in [1024, 2048) for ``|u| <= 512``, where fp16's step is 1.
ROUNDER = 1536.0
PHASE_DEGREE = 4


def sin2pi_coefficients(degree: int = PHASE_DEGREE) -> list[float]:
    """``c`` with ``sin(pi v)^2 ~= sum_i c[i] * s^(i+1)``, ``s = v^2``, on ``|v| <= 0.5``.

    ``npu_ops.sin2_coefficients`` fits ``sin(pi/2 t)^2`` in ``t^2`` on [0, 1]; ``t = 2 v``, so
    ``c[i] = c_t[i] * 4^(i+1)``.  Max abs error: degree 3 8.7e-4, 4 2.4e-5, 5 4.6e-7.
    """
    return [c * 4.0 ** (i + 1) for i, c in enumerate(sin2_coefficients(degree))]


class PhaseSnake(nn.Module):
    """``SnakeBeta`` (its folded ``freq``/``gain`` ``[C, 1]``) with NPU-only ops; see the module
    docstring."""

    def __init__(self, snake, degree: int = PHASE_DEGREE):
        super().__init__()
        a = (snake.freq.detach().reshape(-1) / math.pi).float()
        c = a.numel()
        self.rounder = nn.Conv1d(c, c, 1, groups=c)
        self.phase = nn.Conv2d(c, c, (2, 1), groups=c)
        with torch.no_grad():
            self.rounder.weight.copy_(-a.view(c, 1, 1))
            self.rounder.bias.fill_(-ROUNDER)
            self.phase.weight.copy_(torch.stack([a, torch.ones_like(a)], 1).view(c, 1, 2, 1))
            self.phase.bias.fill_(ROUNDER)
        gain = snake.gain.detach().reshape(1, c, 1).float()
        coeffs = torch.stack([gain * k for k in sin2pi_coefficients(degree)])  # [degree, 1, C, 1]
        self.register_buffer("coeffs", coeffs, persistent=False)

    def reduced_phase(self, x: torch.Tensor) -> torch.Tensor:
        """``v = freq x / pi - round(freq x / pi)`` in [-0.5, 0.5] (``[1, C, T]``)."""
        n = self.rounder(x).half().float()  # fp16 storage rounds -(a x) - R to an integer
        xn = torch.cat([x.unsqueeze(2), n.unsqueeze(2)], 2)  # [1, C, 2, T]
        return torch.clamp(self.phase(xn).squeeze(2), -0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.reduced_phase(x)
        s = v * v
        k = self.coeffs
        acc = s * k[-1] + k[-2]
        for i in range(len(k) - 3, -1, -1):
            acc = acc * s + k[i]
        return x + acc * s
