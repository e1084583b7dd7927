"""The speech tokenizer's encoder half, synthetic, in the published on-disk layout.

rkspeech runs only the decoder (the vocoder), but qwen-tts' ``Qwen3TTSModel.from_pretrained``
loads the whole 12 Hz speech tokenizer (``Qwen3TTSTokenizer.from_pretrained`` on
``speech_tokenizer/``): ``AutoFeatureExtractor`` reads ``preprocessor_config.json`` and
``Qwen3TTSTokenizerV2Model`` builds its encoder, a transformers ``MimiModel`` without its decoder
half (``upsample``, ``decoder_transformer`` and ``decoder`` set to None), from ``encoder_config``.
So a synthetic root that the official API loads unchanged needs, besides the decoder:

* ``preprocessor_config.json``: an ``EncodecFeatureExtractor`` at 24 kHz (``PREPROCESSOR_CONFIG``;
  the published file's content, as two public copies quote it);
* ``encoder_config`` in ``config.json`` (``ENCODER_CONFIGS``): published, the values public copies
  of the published ``speech_tokenizer/config.json`` give (Mimi's SEANet ratios [8, 6, 5, 4] to
  25 Hz, a stride-2 downsample to 12.5 Hz, an 8-layer transformer of width 512, 32 quantizers of
  2048 x 256, of which qwen-tts keeps ``encoder_valid_num_quantizers`` = 16); reduced, the same
  structure and rates, narrow and shallow (1.3 M parameters, mostly the 32 codebooks, instead of
  56.2 M);
* the ``encoder.*`` tensors of that model (``encoder_shapes`` lists them, in the key names and
  shapes transformers 4.57's ``MimiModel`` uses; ``tests/models/test_synthetic_official_load.py`` checks
  the reduced ones against the model qwen-tts builds, the published ones were checked the same way
  once: 225 tensors, 56.2 M parameters).  Float32 like the published file: with the published
  decoder, ``speech_tokenizer/model.safetensors`` is 682.3 MB, the size public notes give for the
  published one (682 MB).

Weights are random, from a seeded generator (deterministic): fan-in scaled convs and linears,
LayerNorms near 1, layer scales ~0.1, codebooks ``embed_sum / cluster_usage`` ~ N(0, 1).
Nothing here imports transformers or qwen-tts.
"""

from __future__ import annotations

import math

#: ``speech_tokenizer/preprocessor_config.json`` as published (the feature extractor qwen-tts'
#: ``Qwen3TTSTokenizer.encode`` runs: mono audio at 24 kHz to ``input_values`` + ``padding_mask``).
PREPROCESSOR_CONFIG = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 24000,
}

_PUBLISHED = {
    "_frame_rate": 12.5, "attention_bias": False, "attention_dropout": 0.0, "audio_channels": 1,
    "codebook_dim": 256, "codebook_size": 2048, "compress": 2, "dilation_growth_rate": 2, "head_dim": 64,
    "hidden_act": "gelu", "hidden_size": 512, "intermediate_size": 2048, "kernel_size": 7, "last_kernel_size": 3,
    "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000, "model_type": "mimi", "norm_eps": 1e-05,
    "num_attention_heads": 8, "num_filters": 64, "num_hidden_layers": 8, "num_key_value_heads": 8,
    "num_quantizers": 32, "num_residual_layers": 1, "num_semantic_quantizers": 1, "residual_kernel_size": 3,
    "rope_theta": 10000.0, "sampling_rate": 24000, "sliding_window": 250, "upsample_groups": 512,
    "upsampling_ratios": [8, 6, 5, 4], "use_causal_conv": True, "use_conv_shortcut": False, "vector_quantization_hidden_dimension": 256,
    # the rest of the published file's encoder_config (vox-serve's Qwen3TTSTokenizerV2EncoderConfig,
    # built with cls(**encoder_config) from the downloaded file; the first five are also transformers
    # 4.57 MimiConfig attributes with these defaults; vllm-omni PR #1664 quotes dtype "float32")
    "initializer_range": 0.02, "pad_mode": "constant", "trim_right_ratio": 1.0, "use_cache": False,
    "use_streaming": False, "normalize": False, "dtype": "float32", "transformers_version": "4.57.0.dev0",
}
#: ``encoder_config`` of ``speech_tokenizer/config.json``.  Reduced keeps the rates (1920 samples a
#: code, 12.5 Hz), the 32 x 2048 codebooks and the projections around them (16 != 32, as 256 != 512);
#: ``upsample_groups`` (depthwise, = hidden_size) only has to divide the width: ``MimiModel`` builds
#: the upsample conv before qwen-tts drops it.
ENCODER_CONFIGS: dict[str, dict] = {
    "published": _PUBLISHED,
    "reduced": {**_PUBLISHED, "codebook_dim": 16, "head_dim": 16, "hidden_size": 32, "intermediate_size": 64,
                "num_attention_heads": 2, "num_filters": 8, "num_hidden_layers": 2, "num_key_value_heads": 2,
                "upsample_groups": 32, "vector_quantization_hidden_dimension": 16},
}


def encoder_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    """``encoder.*`` key -> shape for ``encoder_config`` ``c``, in ``MimiModel``'s order."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name, cin, cout, k, bias=True):
        shapes[f"encoder.{name}.conv.weight"] = (cout, cin, k)
        if bias:
            shapes[f"encoder.{name}.conv.bias"] = (cout,)

    # SEANet encoder: conv, then per ratio (last first) residual blocks + ELU + strided conv, ELU, conv
    f, i = c["num_filters"], 0
    conv(f"encoder.layers.{i}", c["audio_channels"], f, c["kernel_size"])
    i += 1
    scale = 1
    for ratio in reversed(c["upsampling_ratios"]):
        dim = scale * f
        for j in range(c["num_residual_layers"]):
            conv(f"encoder.layers.{i}.block.1", dim, dim // c["compress"], c["residual_kernel_size"])
            conv(f"encoder.layers.{i}.block.3", dim // c["compress"], dim, 1)
            if c["use_conv_shortcut"]:
                conv(f"encoder.layers.{i}.shortcut", dim, dim, 1)
            i += 1
        i += 1  # ELU
        conv(f"encoder.layers.{i}", dim, 2 * dim, 2 * ratio)
        i += 1
        scale *= 2
    i += 1  # ELU
    conv(f"encoder.layers.{i}", scale * f, c["hidden_size"], c["last_kernel_size"])

    h, hd = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    for n in range(c["num_hidden_layers"]):
        p = f"encoder.encoder_transformer.layers.{n}"
        for proj, out, inp in (("q", q, h), ("k", kv, h), ("v", kv, h), ("o", h, q)):
            shapes[f"{p}.self_attn.{proj}_proj.weight"] = (out, inp)
            if c["attention_bias"]:
                shapes[f"{p}.self_attn.{proj}_proj.bias"] = (out,)
        shapes[f"{p}.mlp.fc1.weight"] = (c["intermediate_size"], h)
        shapes[f"{p}.mlp.fc2.weight"] = (h, c["intermediate_size"])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{p}.{norm}.weight"] = (h,)
            shapes[f"{p}.{norm}.bias"] = (h,)
        shapes[f"{p}.self_attn_layer_scale.scale"] = (h,)
        shapes[f"{p}.mlp_layer_scale.scale"] = (h,)

    encodec_rate = math.ceil(c["sampling_rate"] / math.prod(c["upsampling_ratios"]))
    if c["_frame_rate"] != encodec_rate:
        conv("downsample", h, h, 2 * int(encodec_rate / c["_frame_rate"]), bias=False)

    vq = c["vector_quantization_hidden_dimension"]
    n_sem = c["num_semantic_quantizers"]
    for part, count in (("semantic", n_sem), ("acoustic", c["num_quantizers"] - n_sem)):
        p = f"encoder.quantizer.{part}_residual_vector_quantizer"
        for n in range(count):
            shapes[f"{p}.layers.{n}.codebook.initialized"] = (1,)
            shapes[f"{p}.layers.{n}.codebook.cluster_usage"] = (c["codebook_size"],)
            shapes[f"{p}.layers.{n}.codebook.embed_sum"] = (c["codebook_size"], c["codebook_dim"])
        if vq != h:
            shapes[f"{p}.input_proj.weight"] = (vq, h, 1)
            shapes[f"{p}.output_proj.weight"] = (h, vq, 1)
    return shapes


def encoder_tensors(c: dict, seed: int) -> dict:
    """Random ``encoder.*`` tensors (float32) for ``encoder_config`` ``c``; the same for the same seed."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    out: dict = {}
    for key, shape in encoder_shapes(c).items():
        if key.endswith("codebook.initialized"):
            t = torch.ones(shape)
        elif key.endswith("cluster_usage"):
            t = uniform(shape, 0.5, 2.0)
        elif key.endswith("embed_sum"):  # the codebook is embed_sum / cluster_usage: ~N(0, 1) rows
            t = normal(shape, 1.0) * out[key.replace("embed_sum", "cluster_usage")][:, None]
        elif key.endswith("layernorm.weight"):
            t = uniform(shape, 0.8, 1.2)
        elif key.endswith("layernorm.bias"):
            t = normal(shape, 0.05)
        elif key.endswith(".scale"):
            t = uniform(shape, 0.05, 0.15)
        elif key.endswith(".bias"):
            t = normal(shape, 0.02)
        else:  # conv [out, in, k] or linear [out, in]
            t = normal(shape, 1.0 / math.sqrt(math.prod(shape[1:])))
        out[key] = t.contiguous()
    return out
