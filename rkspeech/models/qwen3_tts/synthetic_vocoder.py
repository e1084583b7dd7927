"""Synthetic Qwen3-TTS speech-tokenizer checkpoints in the real on-disk format.

Real weights cannot be downloaded on our machines, so tests, the demo and the benchmarks use
checkpoints written here: ``config.json`` (``model_type`` qwen3_tts_tokenizer_12hz with a
``decoder_config`` and an ``encoder_config``), ``preprocessor_config.json`` and
``model.safetensors`` with the official key names: ``decoder.*`` and (unless
``with_encoder_keys=False``) the whole ``encoder.*`` half, which our loader ignores
(``synthetic_encoder``: it is there so qwen-tts' ``Qwen3TTSModel.from_pretrained`` loads the root
as it is).  Every code path after this point is the one a user with the real checkpoint runs.

Random weights are scaled so the signal exercises what real weights exercise:

* fan-in scaled convs/linears, Snake frequencies exp(alpha) in [0.5, 1.5];
* attention layer scales of ~0.6 (the published init is 0.01, which would make the attention
  branch invisible and let a KV-cache bug hide): zeroing the attention branch must drop the
  full decode below 20 dB SNR against the intact one (``tests/models/test_synthetic.py`` checks it);
* the final conv is calibrated on a short decode of random codes to an RMS of 0.15 before the
  clamp, so fewer than 1% of samples sit at +-1 (also checked).
"""

from __future__ import annotations

import math
import re
import os
from pathlib import Path

from rkspeech.core.atomic import atomic_path, write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_config import MODEL_TYPE, VocoderConfig
from rkspeech.models.qwen3_tts.synthetic_encoder import (
    ENCODER_CONFIGS,
    PREPROCESSOR_CONFIG,
    encoder_tensors,
)

#: The published 12 Hz decoder config (field notes) and a reduced one with the same structure:
#: same codebooks, head_dim, sliding window and upsampling, narrower and shallower.
CONFIGS: dict[str, VocoderConfig] = {
    "published": VocoderConfig(),
    "reduced": VocoderConfig(
        codebook_dim=128, latent_dim=256, hidden_size=128, intermediate_size=256,
        num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=2, decoder_dim=384,
    ),
}

TARGET_RMS = 0.15
ATTENTION_SCALE = 0.6
CALIBRATION_TOKENS = 12
RESIDUAL_GAIN = 0.2


def _init_weights(model, seed: int) -> None:
    import torch

    from rkspeech.models.qwen3_tts.vocoder_transformer import LayerScale, RMSNorm
    from rkspeech.models.qwen3_tts.vocoder import SnakeBeta

    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                w = module.weight
                if isinstance(module, torch.nn.ConvTranspose1d):
                    fan_in = w.shape[0] * w.shape[2] / module.stride[0]
                else:
                    fan_in = w.shape[1] * w.shape[2]
                w.copy_(normal(w.shape, 1.0 / math.sqrt(fan_in)))
                if module.bias is not None:
                    module.bias.copy_(normal(module.bias.shape, 0.02))
            elif isinstance(module, torch.nn.Linear):
                w = module.weight
                w.copy_(normal(w.shape, 1.0 / math.sqrt(w.shape[1])))
                if module.bias is not None:
                    module.bias.copy_(normal(module.bias.shape, 0.02))
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(uniform(module.weight.shape, 0.8, 1.2))
                module.bias.copy_(normal(module.bias.shape, 0.05))
            elif isinstance(module, RMSNorm):
                module.weight.copy_(uniform(module.weight.shape, 0.8, 1.2))
            elif isinstance(module, LayerScale):
                scale = ATTENTION_SCALE if name.endswith("self_attn_layer_scale") else 0.3
                module.scale.copy_(uniform(module.scale.shape, 0.5 * scale, 1.5 * scale))
            elif isinstance(module, SnakeBeta):
                module.alpha.copy_(torch.log(uniform(module.alpha.shape, 0.5, 1.5)))
                module.beta.copy_(uniform(module.beta.shape, -0.3, 0.3))
        for name, p in model.named_parameters():
            if name.endswith("cluster_usage"):
                p.copy_(uniform(p.shape, 0.5, 2.0))
            elif name.endswith("embedding_sum"):
                usage = dict(model.named_parameters())[name.replace("embedding_sum", "cluster_usage")]
                p.copy_(normal(p.shape, 1.0) * usage[:, None])
            elif name.endswith("gamma"):  # ConvNeXt layer scale (published init 1e-6)
                p.copy_(uniform(p.shape, 0.05, 0.15))
            elif re.search(r"conv2\.conv\.weight$", name):
                # Residual branches at ~RESIDUAL_GAIN keep activations O(1) through the four
                # upsampling blocks; at unit gain they grew to |x| ~ 490 before the last Snake,
                # where sin(alpha*x) turns fp32 rounding into 37 dB of noise (measured).
                p.mul_(RESIDUAL_GAIN)


def _calibrate_output(model, cfg: VocoderConfig, seed: int) -> None:
    """Scale the final conv so the pre-clamp output has RMS ``TARGET_RMS``."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, CALIBRATION_TOKENS), generator=g)
    final = model.decoder[-1].conv
    with torch.no_grad():
        model.fold()
        captured = {}
        hook = final.register_forward_hook(lambda m, i, o: captured.setdefault("y", o))
        model(codes)
        hook.remove()
        rms = float(captured["y"].pow(2).mean().sqrt())
        final.weight.mul_(TARGET_RMS / max(rms, 1e-8))
        final.bias.zero_()


def make_checkpoint_state(cfg: VocoderConfig, seed: int):
    """Build the decoder with synthetic weights; returns the model (folded, eval)."""
    import torch

    from rkspeech.models.qwen3_tts.vocoder import Vocoder

    torch.manual_seed(seed)
    model = Vocoder(cfg).eval()
    _init_weights(model, seed)
    _calibrate_output(model, cfg, seed)
    return model.fold()


#: ``decoder_config`` keys of the published file that rkspeech (and qwen-tts 0.1.1) never reads:
#: the semantic codebook of the first quantizer and the VQ width.  Values from public parsers of
#: the published ``speech_tokenizer/config.json`` (vox-serve ``vox_serve/tokenizer/qwen3_codec.py``
#: ``Qwen3TTSTokenizerV2DecoderConfig``, a dataclass built with ``cls(**decoder_config)`` from the
#: downloaded file; a Swift port's ``codecConfigJSON`` test fixture gives the same 24 keys):
#: 1 semantic quantizer of 4096 codes, ``vector_quantization_hidden_dimension`` 512 = ``codebook_dim``
#: (the reduced config keeps that relation).  Without them faster-qwen3-tts' GGML ``convert.py``
#: stopped with a KeyError on ``num_semantic_quantizers`` (issue 39).
SEMANTIC_QUANTIZERS = {"num_semantic_quantizers": 1, "semantic_codebook_size": 4096}


def official_config_json(cfg: VocoderConfig, encoder_config: dict | None = None) -> dict:
    """config.json as the published speech tokenizer lays it out (``encoder_config``: the
    published one unless given); the key set is ``tests/models/test_synthetic_keys.py``'s."""
    dec = cfg.to_dict()
    dec.pop("sample_rate")
    dec.update({"max_position_embeddings": 8000, "attention_dropout": 0.0, **SEMANTIC_QUANTIZERS,
                "vector_quantization_hidden_dimension": cfg.codebook_dim})
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": MODEL_TYPE,
        "encoder_valid_num_quantizers": cfg.num_quantizers,
        "input_sample_rate": cfg.sample_rate,
        "output_sample_rate": cfg.sample_rate,
        "decode_upsample_rate": cfg.samples_per_token,
        "encode_downsample_rate": cfg.samples_per_token,
        "decoder_config": dec,
        "encoder_config": dict(encoder_config or ENCODER_CONFIGS["published"]),
        "transformers_version": "4.57.3",
    }


def write_checkpoint(out_dir: str | os.PathLike, config: str = "reduced", seed: int = 0,
                     with_encoder_keys: bool = True) -> Path:
    """Write ``<out>/speech_tokenizer/{config.json,preprocessor_config.json,model.safetensors}``;
    returns that folder.  ``with_encoder_keys`` False leaves the ``encoder.*`` tensors out (the
    decoder alone; qwen-tts would then start its encoder from random weights, with a warning).

    The decoder's tensors depend on ``config`` and ``seed`` only; the encoder's come from their own
    generator (``seed + 2``).  Files are written under temporary names and renamed, so an
    interrupted run leaves no half-written checkpoint.
    """
    from rkspeech.models.safetensors_file import save_file_stable

    if config not in CONFIGS:
        raise RkspeechError(f"unknown synthetic config {config!r}; choose one of {', '.join(CONFIGS)}")
    cfg = CONFIGS[config]
    model = make_checkpoint_state(cfg, seed)
    tensors = {f"decoder.{k}": v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if with_encoder_keys:  # the Mimi encoder half (our loader ignores encoder.* keys)
        tensors.update(encoder_tensors(ENCODER_CONFIGS[config], seed + 2))
    folder = Path(out_dir) / "speech_tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file_stable(tensors, tmp, metadata={"format": "pt", "rkspeech_synthetic": f"{config}/seed={seed}"})
    write_json(folder / "preprocessor_config.json", {**PREPROCESSOR_CONFIG, "sampling_rate": cfg.sample_rate})
    write_json(folder / "config.json", official_config_json(cfg, ENCODER_CONFIGS[config]))
    return folder
