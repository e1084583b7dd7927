"""Our speech tokenizer encoder (``models.qwen3_tts.speech_encoder``) against qwen-tts' own:
``Qwen3TTSModel.create_voice_clone_prompt`` on the reduced Base root (its ``speech_tokenizer.encode``,
transformers' ``MimiModel``; and its ``extract_speaker_embedding``), in a child interpreter as
``test_synthetic_official_load`` runs the public API.

What must hold: for clips of several lengths (shorter than a code, a partial last code, whole
codes, past the transformer's 250 frames at 25 Hz), our torch module's codes are qwen-tts'
``ref_code`` exactly, and so are the exported graph's on onnxruntime; the x-vector graph's (numpy
mel) is within the build's marks of qwen-tts' ``ref_spk_embedding``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

#: samples: under one code, a partial last code, whole codes, past 250 transformer frames (10 s)
LENGTHS = (1500, 24000 + 777, 1920 * 9, 24000 * 11 + 5)

SCRIPT = r'''
import importlib, importlib.machinery, sys, types
for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
    try:
        importlib.import_module(name)
    except Exception:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
import numpy as np
import torch

torch.set_num_threads(2)
from qwen_tts import Qwen3TTSModel

root, clips, out = sys.argv[1], np.load(sys.argv[2]), sys.argv[3]
tts = Qwen3TTSModel.from_pretrained(root)
res = {}
for key in clips.files:
    item = tts.create_voice_clone_prompt(ref_audio=(clips[key], 24000), ref_text="Reference words.")[0]
    res[f"codes_{key}"] = item.ref_code.numpy()
    res[f"xvector_{key}"] = item.ref_spk_embedding.float().numpy()
np.savez(out, **res)
'''


def _clips() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(21)
    out = {}
    for n in LENGTHS:
        t = np.arange(n) / 24000
        out[str(n)] = (0.25 * np.sin(2 * np.pi * 170 * t) * (1 + 0.5 * np.sin(2 * np.pi * 2.5 * t))
                       + 0.05 * rng.standard_normal(n)).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def official(tts_base_ckpt, tmp_path_factory):
    d = tmp_path_factory.mktemp("official_encode")
    np.savez(d / "clips.npz", **_clips())
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tts_base_ckpt), str(d / "clips.npz"), str(d / "out.npz")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(d / "out.npz"))


def test_our_encoder_gives_qwen_tts_reference_codes(tts_base_ckpt, official, tmp_path):
    from rkspeech.contracts.clone import SpeechEncoderContract
    from rkspeech.export.clone_onnx import export_speech_encoder_onnx
    from rkspeech.models.qwen3_tts.speech_encoder import load_speech_encoder
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import resolve_checkpoint
    from rkspeech.runtime.tts.clone_encoders import GraphSpeechEncoder

    enc = load_speech_encoder(resolve_checkpoint(tts_base_ckpt))
    contract = SpeechEncoderContract(num_code_groups=16, codebook_size=2048, samples_per_code=enc.samples_per_code,
                                     sample_rate=24000)
    graph = GraphSpeechEncoder(export_speech_encoder_onnx(enc, contract, tmp_path / "enc.onnx"), "ort", threads=1)
    try:
        for key, clip in _clips().items():
            want = official[f"codes_{key}"]
            assert want.shape == (-(-clip.size // 1920), 16), key
            np.testing.assert_array_equal(enc.codes(clip), want, err_msg=f"torch module, {key} samples")
            np.testing.assert_array_equal(graph(clip), want, err_msg=f"onnx graph, {key} samples")
    finally:
        graph.close()


def test_xvector_graph_is_qwen_tts_speaker_embedding(tts_base_ckpt, official, tmp_path):
    from rkspeech.contracts.clone import SpeakerEncoderContract
    from rkspeech.core.compare import cosine, max_abs_diff
    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE
    from rkspeech.export.clone_onnx import export_speaker_encoder_onnx
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.runtime.tts.clone_encoders import GraphSpeakerEncoder

    tts = TTSModel.load(tts_base_ckpt)
    cfg = tts.cfg.speaker_encoder
    c = SpeakerEncoderContract(mel_dim=cfg.mel_dim, enc_dim=cfg.enc_dim, sample_rate=cfg.sample_rate)
    graph = GraphSpeakerEncoder(export_speaker_encoder_onnx(tts.net.speaker_encoder, c, tmp_path / "spk.onnx"),
                                "ort", config=cfg, threads=1)
    try:
        for key, clip in _clips().items():
            if clip.size < 2048:
                continue  # the speaker encoder's minimum (speaker_embedding refuses it)
            want, got = official[f"xvector_{key}"], graph(clip)
            assert max_abs_diff(want, got) <= CLONE_XVECTOR_MAX_ABS, key
            assert cosine(want, got) >= CLONE_XVECTOR_MIN_COSINE, key
    finally:
        graph.close()
