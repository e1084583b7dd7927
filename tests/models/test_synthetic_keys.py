"""Synthetic roots in the published format: every config key the published files have, and the
same bytes for the same seed.

Key lists and their sources:

* ``speech_tokenizer/config.json``: vox-serve (``vox_serve/tokenizer/qwen3_codec.py`` at
  0218631, ``Qwen3TTSTokenizerV2Config`` / ``...DecoderConfig`` / ``...EncoderConfig``: dataclasses
  built with ``cls(**config)`` from the downloaded published file, so they hold every key it has);
  the decoder list also equals a Swift port's ``codecConfigJSON`` fixture.  Our encoder_config
  also carries ``model_type`` "mimi" (``EXTRA_ENCODER_KEYS``; harmless for qwen-tts' MimiConfig).
* ``config.json``: every ``__init__`` key of qwen-tts 0.1.1's ``Qwen3TTSConfig``,
  ``Qwen3TTSTalkerConfig``, ``Qwen3TTSTalkerCodePredictorConfig`` and
  ``Qwen3TTSSpeakerEncoderConfig`` (``qwen_tts/core/models/configuration_qwen3_tts.py``), plus
  the keys public copies of the published file add (``head_dim``, ``text_vocab_size``,
  ``position_id_per_seconds``, ``model_type``, ``architectures``, ``transformers_version``).
"""

from __future__ import annotations

import pytest

TOKENIZER_TOP = {"architectures", "model_type", "encoder_valid_num_quantizers", "input_sample_rate",
                 "output_sample_rate", "decode_upsample_rate", "encode_downsample_rate", "decoder_config",
                 "encoder_config", "transformers_version"}
TOKENIZER_DECODER = {
    "attention_bias", "attention_dropout", "latent_dim", "codebook_dim", "codebook_size", "decoder_dim",
    "hidden_act", "hidden_size", "intermediate_size", "layer_scale_initial_scale", "max_position_embeddings",
    "head_dim", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "num_quantizers",
    "num_semantic_quantizers", "rms_norm_eps", "rope_theta", "semantic_codebook_size", "sliding_window",
    "upsample_rates", "upsampling_ratios", "vector_quantization_hidden_dimension"}
TOKENIZER_ENCODER = {
    "_frame_rate", "attention_bias", "attention_dropout", "audio_channels", "codebook_dim", "codebook_size",
    "compress", "dilation_growth_rate", "dtype", "head_dim", "hidden_size", "hidden_act", "initializer_range",
    "intermediate_size", "kernel_size", "last_kernel_size", "layer_scale_initial_scale", "max_position_embeddings",
    "norm_eps", "normalize", "num_attention_heads", "num_filters", "num_hidden_layers", "num_key_value_heads",
    "num_quantizers", "num_residual_layers", "num_semantic_quantizers", "pad_mode", "residual_kernel_size",
    "rope_theta", "sampling_rate", "sliding_window", "transformers_version", "trim_right_ratio",
    "upsample_groups", "upsampling_ratios", "use_cache", "use_causal_conv", "use_conv_shortcut", "use_streaming",
    "vector_quantization_hidden_dimension"}
EXTRA_ENCODER_KEYS = {"model_type"}

TTS_TOP = {"talker_config", "speaker_encoder_config", "tokenizer_type", "tts_model_size", "tts_model_type",
           "im_start_token_id", "im_end_token_id", "tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id",
           "architectures", "model_type", "transformers_version"}
_STACK = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
          "use_cache", "tie_word_embeddings", "rope_theta", "rope_scaling", "attention_bias", "use_sliding_window",
          "sliding_window", "attention_dropout", "num_code_groups", "head_dim", "model_type"}
TALKER = _STACK | {"code_predictor_config", "text_hidden_size", "codec_eos_token_id", "codec_think_id",
                   "codec_nothink_id", "codec_think_bos_id", "codec_think_eos_id", "codec_pad_id", "codec_bos_id",
                   "spk_id", "spk_is_dialect", "codec_language_id", "text_vocab_size", "position_id_per_seconds"}
CODE_PREDICTOR = _STACK | {"max_window_layers", "layer_types"}
SPEAKER_ENCODER = {"mel_dim", "enc_dim", "enc_channels", "enc_kernel_sizes", "enc_dilations",
                   "enc_attention_channels", "enc_res2net_scale", "enc_se_channels", "sample_rate"}


@pytest.mark.parametrize("config", ["reduced", "published"])
def test_speech_tokenizer_config_has_the_published_keys(config):
    from rkspeech.models.qwen3_tts.synthetic_encoder import ENCODER_CONFIGS
    from rkspeech.models.qwen3_tts.synthetic_vocoder import CONFIGS, official_config_json

    c = official_config_json(CONFIGS[config], ENCODER_CONFIGS[config])
    assert set(c) == TOKENIZER_TOP
    assert set(c["decoder_config"]) == TOKENIZER_DECODER
    assert set(c["encoder_config"]) == TOKENIZER_ENCODER | EXTRA_ENCODER_KEYS
    dec = c["decoder_config"]
    assert (dec["num_semantic_quantizers"], dec["semantic_codebook_size"]) == (1, 4096)
    assert dec["vector_quantization_hidden_dimension"] == dec["codebook_dim"]
    if config == "published":
        assert dec["vector_quantization_hidden_dimension"] == 512


@pytest.mark.parametrize("config", ["reduced", "published"])
@pytest.mark.parametrize("variant", ["base", "custom-voice", "voice-design"])
def test_model_config_has_every_qwen_tts_key(config, variant):
    from rkspeech.models.qwen3_tts.synthetic_tts import official_config_json

    special = {"im_start": 1, "im_end": 2, "tts_pad": 3, "tts_bos": 4, "tts_eos": 5, "text_vocab": 640}
    c = official_config_json(config, variant, special)
    assert set(c) == TTS_TOP
    assert set(c["talker_config"]) == TALKER
    assert set(c["talker_config"]["code_predictor_config"]) == CODE_PREDICTOR
    assert set(c["speaker_encoder_config"]) == SPEAKER_ENCODER


def test_same_seed_writes_the_same_bytes(tmp_path):
    """Every file of two reduced roots of one seed is byte-identical (the speech tokenizer's
    safetensors differed before ``save_file_stable``: its metadata keys came out in hash order)."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    a = write_tts_checkpoint(tmp_path / "a", "reduced", "custom-voice", 5)
    b = write_tts_checkpoint(tmp_path / "b", "reduced", "custom-voice", 5)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert "speech_tokenizer/model.safetensors" in {str(f) for f in files}
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_save_file_stable_is_order_free_and_readable(tmp_path):
    import torch
    from safetensors import safe_open

    from rkspeech.models.safetensors_file import save_file_stable

    tensors = {"b.weight": torch.arange(6, dtype=torch.float32).view(2, 3), "a.bias": torch.ones(3, dtype=torch.bfloat16)}
    meta = {f"k{i}": f"v{i}" for i in range(12)}
    paths = [tmp_path / f"{i}.safetensors" for i in range(4)]
    for i, p in enumerate(paths):  # the same metadata given in other orders
        save_file_stable(tensors, p, metadata=dict(sorted(meta.items(), reverse=bool(i % 2))))
    assert len({p.read_bytes() for p in paths}) == 1
    with safe_open(str(paths[0]), "pt") as f:
        assert f.metadata() == meta
        assert sorted(f.keys()) == sorted(tensors)
        for k, v in tensors.items():
            assert torch.equal(f.get_tensor(k), v)
