"""Our decoder against the official qwen-tts 0.1.1 implementation on the same weights."""

from __future__ import annotations

import pytest
import torch
from official_reference import load_official_decoder

from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
from rkspeech.core.compare import snr_db
from rkspeech.verify.stepwise import random_codes


@pytest.mark.parametrize("which, tokens", [("reduced", 150), ("published", 100)])
def test_full_decode_parity(which, tokens, reduced_ckpt, published_ckpt):
    ckpt = reduced_ckpt if which == "reduced" else published_ckpt
    ours, cfg, _ = load_vocoder(ckpt)
    official = load_official_decoder(ckpt)
    codes = torch.from_numpy(random_codes(tokens, 16, cfg.codebook_size, seed=5).T[None].copy())
    with torch.no_grad():
        want = official(codes).numpy()
        got = ours(codes).numpy()
    assert got.shape == want.shape
    assert snr_db(want, got) >= 100.0


def test_parity_check_detects_a_wrong_weight(reduced_ckpt):
    """The comparison is sensitive: one perturbed Snake parameter is visible."""
    ours, cfg, _ = load_vocoder(reduced_ckpt)
    official = load_official_decoder(reduced_ckpt)
    with torch.no_grad():
        ours.decoder[2].block[0].alpha.add_(0.01)
        ours.fold()
    codes = torch.from_numpy(random_codes(30, 16, cfg.codebook_size, seed=5).T[None].copy())
    with torch.no_grad():
        assert snr_db(official(codes).numpy(), ours(codes).numpy()) < 60.0
