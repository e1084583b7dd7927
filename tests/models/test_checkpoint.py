"""Checkpoint discovery and loading: every accepted layout, and a clear error for each mistake."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder, resolve_checkpoint


def _copy(src_root, dst):
    shutil.copytree(src_root / "speech_tokenizer", dst / "speech_tokenizer")
    return dst


def test_accepts_root_subfolder_and_hf_cache(reduced_ckpt, tmp_path, monkeypatch):
    st = reduced_ckpt / "speech_tokenizer"
    assert resolve_checkpoint(reduced_ckpt).folder == st
    assert resolve_checkpoint(st).folder == st
    # HF cache: models--Qwen--X/{refs/main, snapshots/<hash>/speech_tokenizer/...}
    repo = tmp_path / "models--Qwen--Qwen3-TTS-12Hz-0.6B-Base"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "speech_tokenizer").symlink_to(st, target_is_directory=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert resolve_checkpoint(snap).config.resolve() == (st / "config.json").resolve()
    assert resolve_checkpoint(repo).config.resolve() == (st / "config.json").resolve()
    monkeypatch.setenv("QWEN3_TTS_MODEL", str(reduced_ckpt))
    assert resolve_checkpoint(None).folder == st


def test_encoder_keys_are_ignored(reduced_ckpt):
    keys = load_file(str(reduced_ckpt / "speech_tokenizer" / "model.safetensors")).keys()
    assert any(k.startswith("encoder.") for k in keys)
    model, cfg, _ = load_vocoder(reduced_ckpt)
    assert cfg.latent_dim == 256


@pytest.mark.parametrize("mutate, message", [
    ("missing_dir", "does not exist"),
    ("missing_config", "config.json is missing"),
    ("missing_weights", "model.safetensors is missing"),
    ("wrong_model_type", "model_type is 'qwen3_tts'"),
    ("missing_key", "missing key decoder.pre_conv.conv.weight"),
    ("unexpected_key", "unexpected key decoder.extra.weight"),
    ("shape_mismatch", "decoder.pre_conv.conv.bias has shape (7,), config.json implies (256,)"),
    ("not_safetensors", "not a readable safetensors file"),
])
def test_clear_errors(reduced_ckpt, tmp_path, mutate, message):
    root = _copy(reduced_ckpt, tmp_path / "m")
    st = root / "speech_tokenizer"
    weights = st / "model.safetensors"
    if mutate == "missing_dir":
        root = tmp_path / "nope"
    elif mutate == "missing_config":
        (st / "config.json").unlink()
    elif mutate == "missing_weights":
        weights.unlink()
    elif mutate == "wrong_model_type":
        cfg = json.loads((st / "config.json").read_text())
        cfg["model_type"] = "qwen3_tts"
        (st / "config.json").write_text(json.dumps(cfg))
    elif mutate == "not_safetensors":
        weights.write_bytes(b"\x00" * 100)
    else:
        tensors = load_file(str(weights))
        if mutate == "missing_key":
            del tensors["decoder.pre_conv.conv.weight"]
        elif mutate == "unexpected_key":
            tensors["decoder.extra.weight"] = torch.zeros(3)
        elif mutate == "shape_mismatch":
            tensors["decoder.pre_conv.conv.bias"] = torch.zeros(7)
        save_file(tensors, str(weights))
    with pytest.raises(RkspeechError) as err:
        load_vocoder(root)
    assert message in str(err.value)


def test_cli_error_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rkspeech", "export", "qwen3-tts-vocoder", "--model-dir", str(tmp_path / "none"), "-B", "4"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "does not exist" in proc.stderr.strip().splitlines()[-1]
