"""The exact rewrites of ``rkspeech.accuracy.transforms`` (issue 15, part 3) are exact in fp32,
and the exactness check catches a rewrite that is not (onnxruntime only, a small synthetic
Whisper encoder: 80 mels, 2 layers, width 64, 16 frames)."""

from __future__ import annotations

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

EXACT_DB = 100.0


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    import onnx
    import torch

    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.encoder import WhisperEncoder, WhisperEncoderDims

    torch.manual_seed(0)
    dims = WhisperEncoderDims(n_mels=80, n_audio_ctx=16, n_audio_state=64, n_audio_head=2, n_audio_layer=2)
    model = WhisperEncoder(dims).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name:  # trained LayerNorms are not the identity
                p.add_(0.3 * torch.randn_like(p))
        # an outlier channel in the last fc2 output, as in tiny.en's blocks.3 (639 vs ~10)
        model.blocks[-1].mlp[2].weight[5].mul_(40.0)
    path = tmp_path_factory.mktemp("p3") / "encoder.onnx"
    export_encoder(model, path, n_frames=32)
    mel = np.random.default_rng(0).standard_normal((1, 80, 32)).astype(np.float32)
    return onnx.load(str(path)), {"mel": mel}


@pytest.mark.parametrize("scale", [0.125, 8.0, 0.3, 1 / 1024])
def test_residual_scale_is_exact(encoder, scale):
    from rkspeech.accuracy.transforms import ResidualScale, exactness_db, scale_residual_stream

    model, feed = encoder
    out = scale_residual_stream(model, ResidualScale(scale=scale))
    assert exactness_db(model, out, feed) >= EXACT_DB
    # it really scaled the stream: every LayerNorm's epsilon moved by scale^2
    eps = [a.f for n in out.graph.node if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon"]
    assert len(eps) == 5 and all(e == pytest.approx(1e-5 * scale ** 2, rel=1e-6) for e in eps)
    assert len(out.graph.node) == len(model.graph.node) + 1  # one Mul after the stem, nothing else
    # the input model is untouched
    assert all(a.f == pytest.approx(1e-5) for n in model.graph.node if n.op_type == "LayerNormalization"
               for a in n.attribute if a.name == "epsilon")


def test_residual_scale_folded_into_the_stem_is_exact(encoder):
    from rkspeech.accuracy.transforms import ResidualScale, exactness_db, scale_residual_stream

    model, feed = encoder
    out = scale_residual_stream(model, ResidualScale(scale=0.125, stem="fold"))
    assert exactness_db(model, out, feed) >= EXACT_DB
    assert len(out.graph.node) == len(model.graph.node)  # folded: no op added
    with pytest.raises(RkspeechError, match="stem"):
        scale_residual_stream(model, ResidualScale(stem="bogus"))


def test_layernorm_decompose_is_exact(encoder):
    from rkspeech.accuracy.transforms import LayerNormDecompose, decompose_layernorm, exactness_db

    model, feed = encoder
    out = decompose_layernorm(model, LayerNormDecompose())
    assert not any(n.op_type == "LayerNormalization" for n in out.graph.node)
    assert exactness_db(model, out, feed) >= EXACT_DB
    post = decompose_layernorm(model, LayerNormDecompose(match="ln_post"))
    assert sum(n.op_type == "LayerNormalization" for n in post.graph.node) == 4
    assert exactness_db(model, post, feed) >= EXACT_DB


def test_the_check_catches_wrong_rewrites(encoder):
    from onnx import numpy_helper

    from rkspeech.accuracy.transforms import ResidualScale, exactness_db, scale_residual_stream

    model, feed = encoder
    # epsilon not adjusted: LN(s x; eps) != LN(x; eps)
    no_eps = scale_residual_stream(model, ResidualScale(scale=1 / 1024, adjust_eps=False))
    assert exactness_db(model, no_eps, feed) < 60.0
    # one writer of the stream scaled by a wrong factor (1 % off)
    wrong = scale_residual_stream(model, ResidualScale(scale=0.125))
    fc2 = next(n for n in wrong.graph.node if n.op_type == "MatMul" and "/mlp/mlp.2/" in n.name)
    t = next(t for t in wrong.graph.initializer if t.name == fc2.input[1])
    assert "__scaled" in t.name
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.01), t.name))
    assert exactness_db(model, wrong, feed) < 60.0


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan")])
def test_bad_scale_is_one_line_error(encoder, scale):
    from rkspeech.accuracy.transforms import ResidualScale, scale_residual_stream

    with pytest.raises(RkspeechError, match="positive"):
        scale_residual_stream(encoder[0], ResidualScale(scale=scale))


@pytest.mark.parametrize("into", ["query", "split"])
def test_attention_scale_fold_is_exact(encoder, into):
    from onnx import numpy_helper

    from rkspeech.accuracy.transforms import AttentionScaleFold, exactness_db, fold_attention_scale

    model, feed = encoder
    out = fold_attention_scale(model, AttentionScaleFold(into=into))
    assert exactness_db(model, out, feed) >= EXACT_DB
    # the two scalar Muls in front of each attention's first MatMul are gone (2 layers)
    assert len(out.graph.node) == len(model.graph.node) - 4
    prod = {o: n for n in out.graph.node for o in n.output}
    for sm in (n for n in out.graph.node if n.op_type == "Softmax"):
        assert all(prod[t].op_type != "Mul" for t in prod[sm.input[0]].input)
    # "query": the query weight took both factors, Dh**-0.5 (Dh = 64 / 2 heads = 32), the key weight none
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    orig = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q = next(n for n in out.graph.node if n.op_type == "MatMul" and "/attn/query/" in n.name)
    k = next(n for n in out.graph.node if n.op_type == "MatMul" and "/attn/key/" in n.name)
    q0 = next(n for n in model.graph.node if n.name == q.name).input[1]
    if into == "query":
        assert np.allclose(inits[q.input[1]], orig[q0] * 32 ** -0.5, rtol=1e-6, atol=0)
        assert k.input[1] in orig
    else:
        assert k.input[1] not in orig
    with pytest.raises(RkspeechError, match="into"):
        fold_attention_scale(model, AttentionScaleFold(into="bogus"))
