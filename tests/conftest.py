"""Shared fixtures: synthetic checkpoints written once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RKSPEECH_THREADS", "2")


@pytest.fixture(scope="session")
def reduced_ckpt(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic import write_checkpoint

    root = tmp_path_factory.mktemp("ckpt_reduced")
    write_checkpoint(root, "reduced", seed=0)
    return root


@pytest.fixture(scope="session")
def published_ckpt(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic import write_checkpoint

    root = tmp_path_factory.mktemp("ckpt_published")
    write_checkpoint(root, "published", seed=0)
    return root


@pytest.fixture(scope="session")
def reduced_model(reduced_ckpt):
    import torch

    torch.set_num_threads(2)
    from rkspeech.models.qwen3_tts.checkpoint import load_vocoder

    model, cfg, _ = load_vocoder(reduced_ckpt)
    return model
