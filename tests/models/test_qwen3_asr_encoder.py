"""Our Qwen3-ASR encoder (fixed-shape windows) against the official ``Qwen3ASRAudioEncoder``, same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def pair():
    from tests.asr_reference import qwen_asr

    qwen_asr()
    from qwen_asr.core.transformers_backend.configuration_qwen3_asr import Qwen3ASRAudioEncoderConfig
    from qwen_asr.core.transformers_backend.modeling_qwen3_asr import Qwen3ASRAudioEncoder

    from rkspeech.models.qwen3_asr.encoder import AudioEncoder

    cfg = Qwen3ASRAudioEncoderConfig(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=4,
                                     encoder_ffn_dim=256, d_model=128, output_dim=96, n_window=50,
                                     n_window_infer=800, downsample_hidden_size=32, max_source_positions=1500)
    torch.manual_seed(0)
    official = Qwen3ASRAudioEncoder(cfg).eval()
    for p in official.parameters():
        torch.nn.init.normal_(p, std=0.05)
    ours = AudioEncoder(cfg).eval()
    ours.load_state_dict(official.state_dict(), strict=True)
    return official, ours


def _both(pair, frames: int, seed: int = 0):
    official, ours = pair
    mel = torch.from_numpy(np.random.default_rng(seed).standard_normal((128, frames)).astype(np.float32))
    with torch.no_grad():
        want = official(mel, feature_lens=torch.tensor([frames])).last_hidden_state
        got = ours(mel)
    assert got.shape == want.shape
    return float((want - got).abs().max())


@pytest.mark.parametrize("frames", [37, 99, 100, 150, 800])
def test_one_window_equals_the_official(pair, frames):
    """Under 1 s (one unpadded chunk: the conv masks), whole and partial chunks, a full window."""
    assert _both(pair, frames) < 1e-6


def test_past_one_window_the_official_transformers_path_attends_globally(pair):
    """The model windows its attention at 104 tokens (vLLM / flash attention pass ``cu_seqlens``); the
    transformers path passes no mask, so past 8 s its output is not the windowed one.  Ours with one
    window over everything equals it: the difference is the windowing, nothing else."""
    from dataclasses import replace

    official, ours = pair
    assert _both(pair, 1234) > 1e-6
    windowed = ours.geometry
    try:
        ours.geometry = replace(windowed, window_chunks=100)
        assert _both(pair, 1234) < 1e-6
    finally:
        ours.geometry = windowed
