"""Synthetic checkpoints are realistic enough to catch bugs: no clipping, attention matters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
from rkspeech.core.compare import snr_db
from rkspeech.verify.stepwise import full_decode, random_codes


def _stats(ckpt, tokens):
    model, cfg, _ = load_vocoder(ckpt)
    codes = random_codes(tokens, cfg.num_quantizers, cfg.codebook_size, seed=11)
    intact = full_decode(model, codes)
    with torch.no_grad():
        for layer in model.pre_transformer.layers:
            layer.self_attn_layer_scale.scale.zero_()
    no_attention = full_decode(model, codes)
    return intact, no_attention


@pytest.mark.parametrize("which", ["reduced", "published"])
def test_output_realistic_and_attention_matters(which, reduced_ckpt, published_ckpt):
    ckpt = reduced_ckpt if which == "reduced" else published_ckpt
    intact, no_attention = _stats(ckpt, 90 if which == "reduced" else 40)
    clipped = float(np.mean(np.abs(intact) >= 0.999))
    assert clipped < 0.01
    assert 0.05 < float(np.sqrt(np.mean(intact**2))) < 0.5
    assert snr_db(intact, no_attention) < 20.0


def test_seed_changes_weights_deterministically(tmp_path):
    from safetensors.torch import load_file

    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

    a = load_file(str(write_checkpoint(tmp_path / "a", "reduced", 1) / "model.safetensors"))
    b = load_file(str(write_checkpoint(tmp_path / "b", "reduced", 1) / "model.safetensors"))
    c = load_file(str(write_checkpoint(tmp_path / "c", "reduced", 2) / "model.safetensors"))
    k = "decoder.pre_conv.conv.weight"
    assert torch.equal(a[k], b[k]) and not torch.equal(a[k], c[k])
