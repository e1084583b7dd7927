"""The NPU formulation (``formulation="npu"``): each block against the module it replaces, the
Snake approximation's error bound, the whole step against the full decode, and (rknn) its
placement and REGTASK count."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from rkspeech.runtime.runners.torch_step import TorchStepRunner
from rkspeech.runtime.tts.streaming import Engine
from rkspeech.stepgraph import npu_ops
from rkspeech.stepgraph.step import VocoderStep
from rkspeech.stepgraph.step_npu import NpuVocoderStep, make_step, npu_cache_segments
from rkspeech.core.compare import snr_db
from rkspeech.verify.stepwise import (
    check_tokens,
    full_decode,
    random_codes,
    stepwise_check,
)

#: Stepwise threshold for the npu formulation in fp32.  Snake is approximated, so the target is
#: 60 dB; measured on the reduced synthetic checkpoint, B=16, torch: 72.3 dB with the default
#: phase Snake (the fp32 sum ``a x + n`` at magnitude 1536 keeps 2^-13), 113.7 dB with the
#: reflection Snake (degree 5; degree 6: 115.1 dB torch, 112.4 dB onnxruntime).
NPU_MIN_SNR_DB = 60.0


def _snr(ref, got) -> float:
    ref, got = np.asarray(ref, np.float64).ravel(), np.asarray(got, np.float64).ravel()
    return snr_db(ref, got)


@pytest.fixture(scope="module")
def npu_step(reduced_model):
    return NpuVocoderStep(reduced_model, 16)


# ---- blocks ----------------------------------------------------------------------------------
def test_sin2_error_bound():
    coeffs = npu_ops.sin2_coefficients()
    t = torch.linspace(-64.0, 64.0, 400_001, dtype=torch.float64)
    got = npu_ops.snake_sin2(t, 6, coeffs)
    want = torch.sin(math.pi / 2 * t) ** 2
    assert float((got - want).abs().max()) < 1e-6  # polynomial error 4.6e-7 in float64
    got32 = npu_ops.snake_sin2(t.float(), 6, coeffs).double()
    want32 = torch.sin(math.pi / 2 * t.float().double()) ** 2  # same (fp32-rounded) argument
    assert float((got32 - want32).abs().max()) < 3e-6
    # beyond the bound the error stays bounded (clipped), it does not blow up
    far = torch.linspace(70.0, 300.0, 1001, dtype=torch.float64)
    assert float(npu_ops.snake_sin2(far, 6, coeffs).abs().max()) <= 1.0 + 1e-6
    # too few reflections breaks it: the check can fail
    assert float((npu_ops.snake_sin2(t, 3, coeffs) - want).abs().max()) > 0.5


@pytest.mark.parametrize("form,floor", [("reflect", 100.0), ("phase", 60.0)])
def test_npu_snake_per_layer(reduced_model, form, floor):
    """Each Snake on the activations it sees in a full decode (fp32), the Snake term alone:
    reflection form >= 100 dB; phase form >= 60 dB (measured worst layer 66 dB: its phase sum
    runs at magnitude 1536 in fp32)."""
    from rkspeech.models.qwen3_tts.vocoder import snake_modules

    npu_step = NpuVocoderStep(reduced_model, 16, snake_form=form)
    seen = {}

    def keep(k):
        def hook(mod, inputs, output):
            seen.setdefault(k, (inputs[0], output))
        return hook

    hooks = [m.register_forward_hook(keep(k)) for k, m in enumerate(snake_modules(reduced_model))]
    codes = torch.from_numpy(random_codes(6, 16, reduced_model.cfg.codebook_size, seed=3).T[None].copy())
    with torch.no_grad():
        reduced_model(codes)
        for h in hooks:
            h.remove()
        worst = min(_snr(o - x, npu_step.snakes[f"s{k}"](x) - x) for k, (x, o) in seen.items())
    assert len(seen) == len(npu_step.snakes)
    assert worst >= floor  # of the Snake term gain*sin^2 itself


def test_phase_snake_reduction():
    """The phase form's reduced phase equals ``u - round(u)`` up to fp32 (ties may land on either
    end: compare ``sin^2``); it needs the fp16 rounding (without it the phase is ~0), and far
    outside the range the Snake term stays bounded by its gain."""
    from rkspeech.stepgraph.phase_snake import PhaseSnake, sin2pi_coefficients

    class Params:
        freq = torch.tensor([[0.3], [1.0], [2.7], [7.5]])
        gain = torch.tensor([[0.5], [1.0], [2.0], [0.25]])

    snake = PhaseSnake(Params)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 20000, generator=g) * 6.0
    u = (x.double() * Params.freq.double() / math.pi)
    with torch.no_grad():
        v = snake.reduced_phase(x).double()
        y = snake(x).double()
    assert float(((torch.sin(math.pi * v) ** 2 - torch.sin(math.pi * u) ** 2).abs()).max()) < 1e-3
    want = x.double() + Params.gain.double() * torch.sin(x.double() * Params.freq.double()) ** 2
    assert _snr(want - x.double(), y - x.double()) >= 60.0
    s = torch.linspace(0, 0.25, 1001, dtype=torch.float64)
    poly = sum(c * s ** (i + 1) for i, c in enumerate(sin2pi_coefficients(4)))
    assert float((poly - torch.sin(math.pi * s.sqrt()) ** 2).abs().max()) < 3e-5
    # without fp16 storage the reduction does nothing: the check can fail
    with torch.no_grad():
        n = snake.rounder(x)
        flat = snake.phase(torch.cat([x.unsqueeze(2), n.unsqueeze(2)], 2)).squeeze(2).double()
    assert float(((torch.sin(math.pi * flat) ** 2 - torch.sin(math.pi * u) ** 2).abs()).max()) > 0.5
    with torch.no_grad():
        far = snake(torch.full((1, 4, 3), 3.0e4)) - 3.0e4
    assert bool(torch.isfinite(far).all()) and float(far.abs().max()) <= 2.0 * 1.001


@pytest.mark.parametrize("stride, frames", [(3, 2048), (4, 1536), (5, 7)])
def test_zero_stuffed_transconv_rows_exact(stride, frames):
    """Rows of <= 2048 output samples, each with the frame before it: the model's ConvTranspose."""
    from rkspeech.models.qwen3_tts.vocoder import CausalTransConv

    torch.manual_seed(stride)
    t = CausalTransConv(6, 5, 2 * stride, stride)
    x, tail = torch.randn(1, 6, frames), torch.randn(1, 6, 1)
    with torch.no_grad():
        y = t.conv(torch.cat([tail, x], -1))  # the step's context handling (VocoderStep._trans_conv)
        want = y[..., stride: stride + frames * stride]
        got = npu_ops.ZeroStuffTransConv(t).rows(x, tail)
    assert got.shape == want.shape and _snr(want, got) >= 120.0


@pytest.mark.parametrize("stride", [2, 3, 4, 5, 8])
def test_polyphase_transconv_exact(stride):
    from rkspeech.models.qwen3_tts.vocoder import CausalTransConv

    torch.manual_seed(stride)
    t = CausalTransConv(12, 7, 2 * stride, stride)
    x = torch.randn(1, 12, 20)
    with torch.no_grad():
        want = t(x)  # [1, 7, 20*s]
        got = npu_ops.PolyphaseTransConv(t)(torch.cat([torch.zeros(1, 12, 1), x], -1))
    assert got.shape == want.shape
    assert _snr(want, got) >= 120.0


@pytest.mark.parametrize("d, T", [(3, 64), (9, 64), (9, 81), (3, 100)])
def test_folded_dilated_conv_exact(d, T):
    torch.manual_seed(d + T)
    conv = torch.nn.Conv1d(8, 6, 7, dilation=d)
    xin = torch.randn(1, 8, T + 6 * d)
    with torch.no_grad():
        assert _snr(conv(xin), npu_ops.FoldedDilatedConv(conv)(xin)) >= 120.0


@pytest.mark.parametrize("d, T", [(3, 30720), (9, 30720), (9, 10240), (1, 8192 + 2048)])
def test_row_form_of_long_convs_exact(d, T):
    """Long axes are cut into rows before any Slice (REGTASK field): same numbers as the plain form."""
    torch.manual_seed(d)
    conv = torch.nn.Conv1d(4, 3, 7, dilation=d)
    x, tail = torch.randn(1, 4, T), torch.randn(1, 4, 6 * d)
    with torch.no_grad():
        want = conv(torch.cat([tail, x], dim=-1))
        got = npu_ops.FoldedDilatedConv(conv).rows(x, tail)
        assert got.shape == want.shape and _snr(want, got) >= 120.0
    assert torch.equal(npu_ops.last_samples(x, 54), x[..., -54:])
    assert npu_ops.row_width(30720) == 2048 and npu_ops.row_width(122880) == 2048


@pytest.mark.parametrize("L", [16, 4, 5])
def test_onehot_codebook_exact(reduced_model, monkeypatch, L):
    q = reduced_model.quantizer
    codes = torch.from_numpy(random_codes(L, 16, q.codebook_size, seed=5).T[None].copy())
    codes[0, 0, 0], codes[0, 1, 1] = 0, q.codebook_size - 1  # both ends of the table
    book = npu_ops.OneHotCodebook(q)
    with torch.no_grad():
        got = book(codes.float())
        assert _snr(q(codes), got) >= 120.0
        # widths off the 8-grid take the one-channel rows form: bit-identical to the plain form
        monkeypatch.setattr(npu_ops, "IO_WIDTH_ALIGN", 1)
        assert torch.equal(got, book(codes.float()))


def test_first_step_codes_read_as_one_channel(reduced_model, tmp_path):
    """B=4: the codes input's only reader is a Reshape to (1, 1, Q, 4) (its (1, Q, 1, 4) lift ran
    on the CPU); B=16: the graph reads it with the plain 1x1 conv, as before."""
    import onnx

    from rkspeech.export.vocoder_onnx import export_step_onnx

    for B, first in ((4, "Reshape"), (16, "Conv")):
        g = onnx.load(str(export_step_onnx(NpuVocoderStep(reduced_model, B), tmp_path / f"b{B}.onnx"))).graph
        readers = [n for n in g.node if "audio_codes" in n.input]
        while readers and readers[0].op_type == "Cast":  # x.to(float32) of a float32 input
            readers = [n for n in g.node if readers[0].output[0] in n.input]
        assert [n.op_type for n in readers] == [first], B


def test_rope_cos_sin():
    a = torch.rand(16, 32) * (2 * math.pi)
    cos, sin = npu_ops.rope_cos_sin(a)
    assert float((cos - a.cos()).abs().max()) < 2e-6 and float((sin - a.sin()).abs().max()) < 2e-6  # 2 x 4.6e-7 + fp32


# ---- the step --------------------------------------------------------------------------------
def test_cache_layout(reduced_model, npu_step):
    cfg = reduced_model.cfg
    ref = VocoderStep(reduced_model, 16).contract
    assert npu_step.contract.formulation == "npu" and npu_step.contract.codes_dtype == "float32"
    tm = npu_cache_segments(cfg)
    assert npu_step.contract.segments == tm  # default: time-major tails
    assert npu_cache_segments(reduced_model) == tm  # from the model or its config
    assert [s.name for s in tm] == [s.name for s in ref.segments] and tm[-1].end == ref.cache_numel
    for a, b in zip(ref.segments, tm):
        assert b.shape == (a.shape if a.name == "kv" else a.shape[::-1])
    assert not npu_step.contract.compatible_cache(ref)
    # tails="channel" keeps the reference layout: its caches are interchangeable with a reference graph's
    assert NpuVocoderStep(reduced_model, 16, tails="channel").contract.compatible_cache(ref)


class ZeroConvTails:
    """Broken cache: every conv tail wiped before each step (only the KV history survives)."""

    def __init__(self, runner, contract):
        self.runner, self.segs = runner, [s for s in contract.segments if s.name != "kv"]

    def infer(self, feed):
        cache = feed["cache_in"].copy()
        for s in self.segs:
            cache[s.offset:s.end] = 0.0
        return self.runner.infer({**feed, "cache_in": cache})


def test_npu_step_matches_full_decode(reduced_model, npu_step):
    codes = random_codes(check_tokens(16, 4), 16, reduced_model.cfg.codebook_size, seed=1)
    ref = full_decode(reduced_model, codes)
    first = make_step(reduced_model, 4, "npu")
    res = stepwise_check(ref, codes, Engine(TorchStepRunner(npu_step), npu_step.contract),
                         Engine(TorchStepRunner(first), first.contract))
    assert res.samples == ref.size
    assert res.snr_db >= NPU_MIN_SNR_DB and min(res.per_step_snr_db) >= NPU_MIN_SNR_DB
    bad = stepwise_check(ref, codes, Engine(ZeroConvTails(TorchStepRunner(npu_step), npu_step.contract),
                                            npu_step.contract))
    assert bad.snr_db < 40.0  # the check can fail


def test_channel_tails_match(reduced_model):
    """The reference cache layout (``tails="channel"``), at B=8 (15,360 samples: the row forms)."""
    step = NpuVocoderStep(reduced_model, 8, tails="channel")
    codes = random_codes(20, 16, reduced_model.cfg.codebook_size, seed=4)
    res = stepwise_check(full_decode(reduced_model, codes), codes, Engine(TorchStepRunner(step), step.contract))
    assert res.snr_db >= NPU_MIN_SNR_DB


def test_npu_step_onnxruntime(reduced_model, npu_step, tmp_path):
    from rkspeech.export.vocoder_onnx import export_step_onnx, graph_summary
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner

    path = export_step_onnx(npu_step, tmp_path / "npu.onnx")
    ops = graph_summary(path)["op_histogram"]
    for op in ("Sin", "Cos", "Floor", "Round", "Mod", "Shape", "ConstantOfShape", "Pad"):
        assert op not in ops, op
    assert ops.get("ConvTranspose", 0) == len(reduced_model.cfg.upsampling_ratios)  # only the k=s=2 ones
    codes = random_codes(check_tokens(16, None), 16, reduced_model.cfg.codebook_size, seed=2)
    ref = full_decode(reduced_model, codes)
    res = stepwise_check(ref, codes, Engine(OnnxRuntimeRunner(path, threads=2), npu_step.contract))
    assert res.snr_db >= NPU_MIN_SNR_DB


# ---- rknn ------------------------------------------------------------------------------------
@pytest.mark.rknn
@pytest.mark.slow
@pytest.mark.parametrize("role, B", [("main", 16), ("first", 4)])
def test_npu_step_placement_rk3588(reduced_model, reduced_vocoder_build, role, B):
    """The rk3588 fp16 conversion of the npu step at B=16 and B=4, read from the session's
    reduced vocoder build (``reduced_vocoder_build``: ``make_step(.., "npu")`` at B=16, first B=4,
    converted by the build's convert stage), which converts exactly these two graphs: converting
    them again here cost 38 + 36 s of CI."""
    from rkfixtures import have_rknn

    from rkspeech.contracts.read import read_contract

    if not have_rknn():
        pytest.skip("rknn-toolkit2 not installed")
    out, summary = reduced_vocoder_build
    plan = json.loads((out / "plan.json").read_text())["vocoder"]
    assert read_contract(out / plan["artifacts"][role]["onnx"]) == NpuVocoderStep(reduced_model, B).contract
    rep = summary["convert"][role]
    # Measured (reduced config, B=16, rk3588 fp16): phase Snake 699 NPU / 0 CPU ops (2026-12-01),
    # reflection Snake 1228 / 0 (2026-11-29), 0 REGTASK lines.  The reference graph of the same
    # size: 316 / 69 (30 Sin, 1 Cos, 2 exConvTransposePad, Gather, Add, 34 Reshape) and 35,884.
    # B=4 (the first step): 667 / 0, 0 REGTASK (2026-12-01); before the one-channel codes read
    # 665 / 1, the compiler's (1,16,4) -> (1,16,1,4) Reshape of audio_codes on the CPU.
    assert rep["build"]["regtask_overflow_lines"] == 0
    assert rep["placement"]["cpu_op_types"] == {}
    assert rep["placement"]["npu_ops"] > 500
