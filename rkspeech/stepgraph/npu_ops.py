"""NPU-native building blocks for the vocoder step graph (``formulation="npu"``).

Each block replaces a piece of the reference step that rknn-toolkit2 2.5.0 places on the CPU
or compiles into REGTASK-overflowing register fields.  Placement below was measured here with
single-block graphs (rk3588 fp16, ``rkspeech.convert.conversion``; see ``docs/npu-formulation.md``):

* ``snake_sin2`` - ``sin(pi/2 * t)^2`` from Abs / Add / Relu / Mul / Clip only.  ``Sin`` runs on
  the CPU, and so do Floor, Round, Mod and float->int Cast (field notes), so the range reduction
  is a chain of *reflections*: ``t -> 2*min(t, c) - t`` (Clip, Mul, Sub) reflects ``t > c``
  about ``c`` and leaves ``t < c`` bit-exact (``2t - t``).  ``sin(pi/2 t)^2`` is even
  and symmetric about every integer, so reflecting about c = 2^(k-1), ..., 2, 1 maps
  ``[0, 2^k]`` onto ``[0, 1]`` without changing the value; a degree-5 polynomial in ``t^2``
  (least squares on Chebyshev nodes, max error 4.6e-7 in float64; degree 6: 6.3e-9) finishes
  it.  Unlike ``c - |t - c|`` the relu form never rounds a small ``t`` against a large ``c``
  (which in fp16 would cost ulp(c), e.g. 0.06 at c = 64).  Abs compiles to an NPU LeakyRelu,
  Clip/Relu/Add/Mul stay on the NPU, Min does not (measured: Min on the CPU), hence Clip for
  ``min(t, c)``.  Inputs beyond ``2^k`` are clipped, so an out-of-range activation gives a
  bounded error instead of a polynomial blow-up.
* ``polyphase_weight`` / ``PolyphaseTransConv`` - a stride-s ConvTranspose (k = s or 2s) as a
  k=2 (or 1) Conv1d with ``s*cout`` output channels and a reshape/transpose interleave.  The
  compiler turns the interleave into an NPU Gather; ConvTranspose with stride 3 or 5 pads on the
  CPU (``exConvTransposePad``).  Above ``MAX_WIDTH`` output samples the Gather logs REGTASK
  lines, so ``upsampler`` switches to ``ZeroStuffTransConv`` (nearest Resize + 0/1 mask + conv).
* ``FoldedDilatedConv`` - a dilated k-tap conv as an undilated ``(k, 1)`` Conv2d over time folded
  to ``[T/d, d]`` (zero right-pad to a multiple of d, slice back): 0 REGTASK lines; the
  reference graph's dilation-9 convs log tens of thousands.
* ``OneHotCodebook`` - float codes -> 1x1 conv to ``code - k`` on Q*K channels -> one-hot
  ``relu(1 - |.|)`` -> 1x1 conv with the folded tables (sums over Q).  Exact (codes < 2048 are
  exact in fp16), and no Reshape or Cast, given a float32 codes input.  For B not a multiple of
  ``IO_WIDTH_ALIGN`` the codes are read as one channel of Q rows and a ``(Q, 1)`` identity conv
  moves them to channels: the compiler's ``(1, Q, B) -> (1, Q, 1, B)`` Reshape of the input runs
  on the CPU there.
* ``rope_cos_sin`` - RoPE cos/sin of host-reduced angles in ``[0, 2*pi)`` from ``snake_sin2``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from rkspeech.core.targets import IO_WIDTH_ALIGN

SIN2_DEGREE = 5
#: Widest output (samples) of a polyphase interleave (wider ones use ``ZeroStuffTransConv``), and
#: most folded rows per dilated-conv piece; both well under the 0x1fff register fields.
MAX_WIDTH = 4096
MAX_ROWS = 2048
#: The register field a Slice's width difference lands in (REGTASK "limit: 0x1fff").  Measured
#: with single-op graphs (rk3588 fp16): slicing the last 6 samples of a 30720-wide tensor logs
#: one line (value 0x77fa = 30714), of an 8191- or 8192-wide one none; elementwise ops, k=7
#: convs, Concat and the zero-stuffed upsampler log none at 30720.  Wider time axes are viewed
#: as rows of ``row_width(T)`` samples before anything is sliced out of them.
FIELD_LIMIT = 0x1FFF
ROW_WIDTH = 2048


def sin2_coefficients(degree: int = SIN2_DEGREE) -> list[float]:
    """``c`` with ``sin(pi/2 t)^2 ~= sum_i c[i] * s^(i+1)``, ``s = t^2``, on ``t in [0, 1]``.

    Least squares on 4,000 Chebyshev nodes in s, float64.  Max abs error (measured on 200,001
    points): degree 4 2.4e-5, 5 4.6e-7, 6 6.3e-9, 7 6.5e-11.
    """
    j = np.arange(4000)
    s = 0.5 - 0.5 * np.cos(np.pi * (j + 0.5) / 4000)
    f = np.sin(np.pi * np.sqrt(s) / 2) ** 2
    a = np.stack([s ** (i + 1) for i in range(degree)], axis=1)
    return [float(c) for c in np.linalg.lstsq(a, f, rcond=None)[0]]


def folds_for_bound(bound: float) -> int:
    """Reflections needed so ``|t| <= bound`` lands in ``[0, 1]``: ``ceil(log2(bound))``, >= 0."""
    return max(0, math.ceil(math.log2(max(float(bound), 1.0))))


def snake_sin2(t: torch.Tensor, folds: int, coeffs: list[float]) -> torch.Tensor:
    """``sin(pi/2 * t)^2`` for ``|t| <= 2**folds`` with NPU ops only (see module docstring)."""
    t = torch.abs(t)
    for j in range(folds - 1, -1, -1):
        # reflect about c: t < c is kept bit-exact (2t - t), t > c becomes 2c - t
        t = 2.0 * torch.clamp(t, max=float(2**j)) - t
    t = torch.clamp(t, -1.0, 1.0)
    s = t * t
    acc = s * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * s + c
    return acc * s


class NpuSnake(nn.Module):
    """SnakeBeta ``x + gain * sin(freq x)^2`` with the NPU-only ``sin^2``.

    ``bound`` is the largest ``|freq * x|`` the layer must handle exactly (from calibration,
    with a margin); beyond it the result is still bounded (|error| <= gain).
    """

    def __init__(self, snake, bound: float, degree: int = SIN2_DEGREE):
        super().__init__()
        self.register_buffer("scale", (snake.freq * (2.0 / math.pi)).clone(), persistent=False)
        self.register_buffer("gain", snake.gain.clone(), persistent=False)
        self.bound = float(bound)
        self.folds = folds_for_bound(self.bound * 2.0 / math.pi)
        self.coeffs = sin2_coefficients(degree)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gain * snake_sin2(x * self.scale, self.folds, self.coeffs)


def rope_cos_sin(angles: torch.Tensor, coeffs: list[float] | None = None):
    """cos/sin of angles in ``[0, 2*pi)`` (the host reduces them) with NPU ops only.

    ``cos a = 1 - 2 sin^2(a/2)``, ``sin a = 1 - 2 sin^2(a/2 - pi/4)``; with ``t = a/pi`` both are
    ``snake_sin2`` of ``|t| < 2``, one reflection.
    """
    coeffs = coeffs or sin2_coefficients()
    t = angles * (1.0 / math.pi)
    cos = 1.0 - 2.0 * snake_sin2(t, 1, coeffs)
    sin = 1.0 - 2.0 * snake_sin2(t - 0.5, 1, coeffs)
    return cos, sin


# ---------------------------------------------------------------------------------------------
# ConvTranspose as polyphase conv
# ---------------------------------------------------------------------------------------------
def polyphase_weight(weight: torch.Tensor, stride: int) -> torch.Tensor:
    """ConvTranspose1d weight ``[cin, cout, k]`` (k = s or 2s) -> Conv1d weight
    ``[cout*s, cin, k/s]`` whose output channel ``co*s + p`` is output phase ``p``.

    Output sample ``n*s + p`` of the transposed conv is ``sum_m x[n-m] . W[:, :, m*s + p]``;
    tap ``m`` of the conv looks ``m`` frames back, i.e. conv tap index ``taps-1-m``.
    """
    cin, cout, k = weight.shape
    s = stride
    if k % s:
        raise ValueError(f"polyphase needs kernel % stride == 0, got k={k}, s={s}")
    taps = k // s
    w = weight.reshape(cin, cout, taps, s)          # [cin, cout, m, p]
    w = w.permute(1, 3, 0, 2).reshape(cout * s, cin, taps)  # [(co, p), cin, m]
    return w.flip(-1).contiguous()


class PolyphaseTransConv(nn.Module):
    """A ``CausalTransConv`` (k = s or 2s) as Conv1d + interleave; the tail is the last
    ``taps - 1`` input frames (what the reference step keeps).  ``forward(xin)`` takes the input
    with its tail prepended and returns ``[1, cout, L*s]`` for the L new frames.
    """

    def __init__(self, tconv):
        super().__init__()
        conv = tconv.conv
        s = tconv.stride
        cin, cout, k = conv.weight.shape
        self.stride, self.cout, self.taps = s, cout, k // s
        self.conv = nn.Conv1d(cin, cout * s, self.taps, bias=conv.bias is not None)
        with torch.no_grad():
            self.conv.weight.copy_(polyphase_weight(conv.weight.detach(), s))
            if conv.bias is not None:
                self.conv.bias.copy_(conv.bias.detach().repeat_interleave(s))
        self.context = self.taps - 1

    def forward(self, xin: torch.Tensor) -> torch.Tensor:
        y = self.conv(xin)  # [1, cout*s, L]
        n, L = int(y.shape[0]), int(y.shape[2])  # python ints: no Shape ops in the trace
        return y.reshape(n, self.cout, self.stride, L).transpose(2, 3).reshape(n, self.cout, L * self.stride)


class ZeroStuffTransConv(nn.Module):
    """A ``CausalTransConv`` with k = 2s as nearest ``Resize`` x s -> keep every s-th sample
    (a constant 0/1 mask) -> ordinary stride-1 conv with the flipped kernel, on rows.

    For long outputs, where the polyphase interleave hits the REGTASK limit (a Gather over width
    10240 / 30720 logged 30,720 / 92,160 lines; split into pieces the compiler merged them back
    into one CPU Transpose).  Single block (s=3, 48->24 channels, L=10240, rk3588 fp16): all NPU,
    0 REGTASK lines.  Costs s times the MACs of the polyphase form.

    Rows: the input is cut into P rows of F frames (F*s <= ``ROW_WIDTH``), each preceded by the
    frame before it (the cache tail for row 0), and the upsample + conv run per row as a
    ``(1, k)`` Conv2d.  The whole-width conv (b2: 384->192, k=8, 40964 samples at B=64) logged
    36 REGTASK lines - the compiler tiles >= 256 input channels and slices the width, and the
    field overflows once the width passes ~8176 + 0x1fff; in rows it logs none, and the
    published B=64 step went from 36 lines to 0 (bit-identical output in fp32).
    """

    def __init__(self, tconv):
        super().__init__()
        conv = tconv.conv
        s = tconv.stride
        cin, cout, k = conv.weight.shape
        if k != 2 * s:
            raise ValueError(f"zero-stuffed form written for k = 2s, got k={k}, s={s}")
        self.stride = s
        self.conv = nn.Conv2d(cin, cout, (1, k), padding=(0, s - 1), bias=conv.bias is not None)
        with torch.no_grad():
            self.conv.weight.copy_(conv.weight.detach().permute(1, 0, 2).flip(-1).unsqueeze(2))
            if conv.bias is not None:
                self.conv.bias.copy_(conv.bias.detach())
        self.context = 1

    def rows(self, x: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
        """``x [1, cin, L]`` and its tail frame ``[1, cin, 1]`` -> ``[1, cout, L*s]``."""
        s = self.stride
        _, c, L = (int(v) for v in x.shape)
        f = row_width(L, max(1, ROW_WIDTH // s))          # frames per row
        p = L // f
        x4 = x.reshape(1, c, p, f)
        before = tail.reshape(1, c, 1, 1)
        if p > 1:
            before = torch.cat([before, x4[:, :, : p - 1, f - 1:]], dim=2)  # the frame before each row
        mask = np.zeros((1, 1, 1, (f + 1) * s), dtype=np.float32)
        mask[..., ::s] = 1.0
        up = torch.nn.functional.interpolate(torch.cat([before, x4], dim=3), scale_factor=(1.0, float(s)),
                                             mode="nearest")
        up = up * torch.from_numpy(mask)  # a graph constant: x[n] at n*s, zeros between
        return self.conv(up)[..., : f * s].reshape(1, -1, L * s)

    def forward(self, xin: torch.Tensor) -> torch.Tensor:
        """``xin [1, cin, 1 + L]`` (tail frame first) -> ``[1, cout, L*s]``."""
        return self.rows(xin[..., 1:], xin[..., :1])


def upsampler(tconv, frames: int) -> nn.Module:
    """Polyphase when the output (``frames * s`` samples) fits ``MAX_WIDTH``, else zero-stuffed."""
    if frames * tconv.stride <= MAX_WIDTH:
        return PolyphaseTransConv(tconv)
    return ZeroStuffTransConv(tconv)


# ---------------------------------------------------------------------------------------------
# Dilated conv folded over time
# ---------------------------------------------------------------------------------------------
class FoldedDilatedConv(nn.Module):
    """``Conv1d(k, dilation=d)`` (no padding) as an undilated ``(k, 1)`` Conv2d over ``[T/d, d]``.

    ``forward(xin)``: ``xin [1, C, T + (k-1)d] -> [1, Cout, T]``.  The input is zero-padded on the
    right to a multiple of ``d`` (the padded outputs are sliced off); exact up to fp32 summation
    order.
    """

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        cout, cin, k = conv.weight.shape
        self.d, self.k, self.cin, self.cout = conv.dilation[0], k, cin, cout
        self.conv = nn.Conv2d(cin, cout, (k, 1), bias=conv.bias is not None, groups=conv.groups)
        with torch.no_grad():
            self.conv.weight.copy_(conv.weight.detach().unsqueeze(-1))
            if conv.bias is not None:
                self.conv.bias.copy_(conv.bias.detach())

    def forward(self, xin: torch.Tensor) -> torch.Tensor:
        d, k = self.d, self.k
        tin = int(xin.shape[-1])  # a python int: no Shape/Mod ops in the trace
        T = tin - (k - 1) * d
        # Folded rows per piece stay <= MAX_ROWS: a [1, 24, 10246, 3] fold Reshape was placed on
        # the CPU (T=30720, d=3), a [1, 32, 149, 9] one on the NPU.
        step = max(d, (MAX_ROWS - (k - 1)) * d)
        pieces = []
        for a in range(0, T, step):
            b = min(T, a + step)
            pieces.append(self._piece(xin if (a, b) == (0, T) else xin[..., a:b + (k - 1) * d]))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-1)

    def rows(self, x: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
        """The conv over ``cat(tail, x)`` for a long ``x`` (``[1, C, T]``, T > ``FIELD_LIMIT``;
        ``tail`` ``[1, C, h]``).

        ``x`` is viewed as P rows of S = ``row_width(T)`` samples; each row gets the ``(k-1)d``
        samples before it as a halo (the cache tail for row 0), is zero-padded to a multiple of d
        and folded, one ``(k, 1)`` conv runs over all rows (outputs whose window crosses into the
        next row are cropped).  The pieces of ``forward`` slice a 30720-wide input and logged 7
        (d=3) / 12 (d=9) REGTASK lines in the reduced step; this form logs none (single graphs,
        C=24/48, T=10240/30720, d=3/9) and matches ``forward`` to 1.2e-6 in fp32.
        """
        d, k = self.d, self.k
        h = (k - 1) * d
        _, c, t = (int(v) for v in x.shape)
        s = row_width(t)
        p = t // s
        x4 = x.reshape(1, c, p, s)
        # row 0 joins the cache tail in 3-D, as the short convs do: a [1, C, 1, h] halo read
        # from a time-major tail became a CPU Transpose (4 in the reduced step)
        head = torch.cat([tail, x4[:, :, :1].reshape(1, c, s)], dim=-1).reshape(1, c, 1, h + s)
        if p > 1:
            rest = torch.cat([x4[:, :, : p - 1, s - h:], x4[:, :, 1:]], dim=3)
            head = torch.cat([head, rest], dim=2)              # [1, C, P, h + S]
        r = (-(s + h)) % d
        if r:
            head = torch.cat([head, torch.zeros(1, c, p, r, dtype=x.dtype)], dim=3)
        rows = (s + h + r) // d                           # folded rows per row
        y = self.conv(head.reshape(1, c, p * rows, d))
        y = torch.cat([y, torch.zeros(1, self.cout, k - 1, d, dtype=y.dtype)], dim=2)
        return y.reshape(1, self.cout, p, rows * d)[..., :s].reshape(1, self.cout, t)

    def _piece(self, xin: torch.Tensor) -> torch.Tensor:
        d, k = self.d, self.k
        n, c, tin = (int(v) for v in xin.shape)
        T = tin - (k - 1) * d
        r = (-tin) % d
        if r:
            xin = torch.cat([xin, torch.zeros(n, c, r, dtype=xin.dtype)], dim=-1)
        y = self.conv(xin.reshape(n, c, (tin + r) // d, d))
        y = y.reshape(n, self.cout, (tin + r) // d * d - (k - 1) * d)
        return y[..., :T] if r else y


# ---------------------------------------------------------------------------------------------
# Long time axes as rows: no Slice wider than the 0x1fff field
# ---------------------------------------------------------------------------------------------
def row_width(T: int, limit: int = ROW_WIDTH) -> int:
    """The largest divisor of ``T`` that is ``<= limit`` (B x 1920 samples: 2048 for B = 16, 64)."""
    return max(s for s in range(1, min(T, limit) + 1) if T % s == 0)


def last_samples(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x[..., -n:]`` of ``[1, C, T]``; above ``FIELD_LIMIT`` samples it slices the last of
    ``T / S`` rows instead (0 REGTASK lines where the plain slice of a 30720-wide axis logged one;
    bit-exact)."""
    _, c, t = (int(v) for v in x.shape)
    if t <= FIELD_LIMIT:
        return x[..., t - n:]
    s = row_width(t)
    if n > s:
        raise ValueError(f"tail of {n} samples is longer than a row ({s})")
    return x.reshape(1, c, t // s, s)[:, :, t // s - 1, s - n:]


# ---------------------------------------------------------------------------------------------
class OneHotCodebook(nn.Module):
    """codes ``[1, Q, L]`` (float32, or int64 in torch) -> ``[1, D, L]`` with two 1x1 convs.

    ``conv1`` (weight 1 at ``[q*K + k, q]``, bias ``-k``) gives ``code_q - k`` on ``Q*K``
    channels, ``relu(1 - |.|)`` makes it an exact 0/1 one-hot, and ``conv2`` (weight = the folded
    tables, ``[D, Q*K]``) sums the selected rows over Q.  Exact in fp16: codes and k are integers
    below 2048.  No Gather or Cast: with a float32 ``audio_codes`` input (the contract's
    ``codes_dtype``) a codebook-only graph at the published size (Q=16, K=2048, D=512, B=16) is
    29 NPU / 0 CPU ops on rk3588 (measured); a ``[Q, L, 1]`` view of an int64 input
    leaves a Reshape and a Cast on the CPU.

    When L is not a multiple of ``IO_WIDTH_ALIGN`` (the B=4 first step), the compiler's own
    ``(1, Q, L) -> (1, Q, 1, L)`` Reshape of the graph input runs on the CPU (the first step's
    one CPU op, 903 NPU / 1 CPU at the published size).  There the codes are viewed as one
    channel of Q rows, ``(1, 1, Q, L)`` (a Reshape the NPU runs), and a ``(Q, 1)`` identity
    conv (``Q`` outputs, weight 1 at ``[q, 0, q]``) moves the rows to channels: ``x * 1`` plus
    zeros, so the codes and everything after are bit-identical in fp32.  Folding the selection
    into that conv instead (``[Q*K, 1, Q, 1]``, one conv) costs the one-channel input's padding:
    +7 MB of weights and 5.7x the conv's cycles (reduced B=4, measured).  At multiples of 8 the
    graph is unchanged.
    """

    def __init__(self, quantizer):
        super().__init__()
        q, k = quantizer.num_quantizers, quantizer.codebook_size
        tables = quantizer.table.detach().reshape(q * k, -1)
        select = torch.zeros(q * k, q, 1)
        select[torch.arange(q * k), torch.arange(q).repeat_interleave(k), 0] = 1.0
        self.q = q
        self.register_buffer("select", select, persistent=False)
        self.register_buffer("rows_to_channels", torch.eye(q).reshape(q, 1, q, 1), persistent=False)
        self.register_buffer("offset", -torch.arange(k, dtype=torch.float32).repeat(q), persistent=False)
        self.register_buffer("tables", tables.t().unsqueeze(-1).contiguous(), persistent=False)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        codes = codes.to(torch.float32)
        L = int(codes.shape[-1])  # a python int: the form is fixed at trace time
        if L % IO_WIDTH_ALIGN:
            rows = codes.reshape(1, 1, self.q, L)
            codes = nn.functional.conv2d(rows, self.rows_to_channels).reshape(1, self.q, L)
        d = nn.functional.conv1d(codes, self.select, self.offset)  # [1, Q*K, L]
        return nn.functional.conv1d(torch.relu(1.0 - torch.abs(d)), self.tables)     # [1, D, L]
