"""Every Whisper size's geometry, and synthetic checkpoints at that geometry.

The dimensions are openai/whisper's ``ModelDimensions`` (``whisper/model.py``) as stored in each
released checkpoint's ``dims`` (what ``whisper.load_model(name).dims`` prints; large-v3, for
example, ``ModelDimensions(n_mels=128, n_audio_ctx=1500, n_audio_state=1280, n_audio_head=20,
n_audio_layer=32, n_vocab=51866, n_text_ctx=448, n_text_state=1280, n_text_head=20,
n_text_layer=32)``).  They equal the Hugging Face ``openai/whisper-*`` configs (``num_mel_bins``,
``d_model``, ``encoder_layers``, ``encoder_attention_heads``, ``vocab_size``) and, for the
distilled models, ``distil-whisper/distil-*``: distillation keeps the teacher's whole encoder
and cuts the decoder to 2 layers (large-v3-turbo: 4), so an encoder graph depends only on the
teacher's size.  Vocabulary: 51864 for the .en models, 51865 multilingual, 51866 from large-v3
on (one more language, Cantonese).

:func:`write_synthetic_openai` writes an openai-format ``.pt`` (``{"dims", "model_state_dict"}``)
holding random encoder weights at a size's geometry, read back by the same loader as a real
checkpoint (``load_whisper_encoder``), so export, the graph checks and lint run at the real
geometry of every size without its weights.  Only the encoder is written (the loaders read no
decoder weights); ``dims`` is complete.  Weights are stored fp16 like the released files.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.encoder import WhisperEncoderDims


@dataclass(frozen=True)
class WhisperDims:
    """openai/whisper's ``ModelDimensions`` (same fields)."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def encoder(self) -> WhisperEncoderDims:
        return WhisperEncoderDims(n_mels=self.n_mels, n_audio_ctx=self.n_audio_ctx,
                                  n_audio_state=self.n_audio_state, n_audio_head=self.n_audio_head,
                                  n_audio_layer=self.n_audio_layer)

    def to_dict(self) -> dict:
        return asdict(self)


def _dims(n_mels, d, heads, layers, vocab, text_layers=None) -> WhisperDims:
    return WhisperDims(n_mels, 1500, d, heads, layers, vocab, 448, d, heads,
                       layers if text_layers is None else text_layers)


#: name -> dims.  The .en variants of tiny..medium share the encoder geometry (vocab 51864).
SIZES: dict[str, WhisperDims] = {
    "tiny": _dims(80, 384, 6, 4, 51865),
    "tiny.en": _dims(80, 384, 6, 4, 51864),
    "base": _dims(80, 512, 8, 6, 51865),
    "base.en": _dims(80, 512, 8, 6, 51864),
    "small": _dims(80, 768, 12, 12, 51865),
    "small.en": _dims(80, 768, 12, 12, 51864),
    "medium": _dims(80, 1024, 16, 24, 51865),
    "medium.en": _dims(80, 1024, 16, 24, 51864),
    "large-v1": _dims(80, 1280, 20, 32, 51865),
    "large-v2": _dims(80, 1280, 20, 32, 51865),
    "large-v3": _dims(128, 1280, 20, 32, 51866),
    "large-v3-turbo": _dims(128, 1280, 20, 32, 51866, text_layers=4),
    "distil-small.en": _dims(80, 768, 12, 12, 51864, text_layers=4),
    "distil-medium.en": _dims(80, 1024, 16, 24, 51864, text_layers=2),
    "distil-large-v2": _dims(80, 1280, 20, 32, 51865, text_layers=2),
    "distil-large-v3": _dims(128, 1280, 20, 32, 51866, text_layers=2),
}


def size_dims(name: str) -> WhisperDims:
    if name not in SIZES:
        raise RkspeechError(f"unknown Whisper size {name!r}; known: {', '.join(SIZES)}")
    return SIZES[name]


def encoder_parameters(dims: WhisperEncoderDims, *, with_positions: bool = True) -> int:
    """Encoder parameter count (the formula of :class:`WhisperEncoder`'s layers; the key
    projection has no bias).  ``with_positions`` counts the 1500 x d positional table, a buffer in
    openai/whisper and a stored variable in CTranslate2; it is a constant in the ONNX graph."""
    m, d, n = dims.n_mels, dims.n_audio_state, dims.n_audio_layer
    convs = m * d * 3 + d + d * d * 3 + d
    block = (4 * d * d + 3 * d) + (8 * d * d + 4 * d + d) + 4 * d  # attn, mlp, two LayerNorms
    total = convs + n * block + 2 * d
    return total + (dims.n_audio_ctx * d if with_positions else 0)


def write_synthetic_openai(path: str | os.PathLike, size: str | WhisperDims, *, seed: int = 0,
                           std: float = 0.02) -> Path:
    """Write an openai-whisper ``.pt`` with random encoder weights at ``size``'s geometry.

    Linear and conv weights are N(0, std), biases 0, LayerNorms identity, the positional table
    openai's sinusoids; so activations stay in the range of a trained model's and fp16 export
    paths see realistic magnitudes.  Built directly as fp16 tensors (large-v3's 637 M encoder
    parameters take 1.3 GB, not 2.5 GB in fp32 plus an fp16 copy)."""
    import torch

    from rkspeech.models.whisper.encoder import sinusoids

    dims = size_dims(size) if isinstance(size, str) else size
    enc = dims.encoder
    enc.validate()
    d, m = enc.n_audio_state, enc.n_mels
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape):
        return (torch.randn(*shape, generator=gen) * std).half()

    def zeros(*shape):
        return torch.zeros(*shape, dtype=torch.float16)

    def ones(*shape):
        return torch.ones(*shape, dtype=torch.float16)

    sd = {
        "encoder.conv1.weight": normal(d, m, 3), "encoder.conv1.bias": zeros(d),
        "encoder.conv2.weight": normal(d, d, 3), "encoder.conv2.bias": zeros(d),
        "encoder.positional_embedding": sinusoids(enc.n_audio_ctx, d).half(),
        "encoder.ln_post.weight": ones(d), "encoder.ln_post.bias": zeros(d),
    }
    for i in range(enc.n_audio_layer):
        p = f"encoder.blocks.{i}"
        sd.update({
            f"{p}.attn.query.weight": normal(d, d), f"{p}.attn.query.bias": zeros(d),
            f"{p}.attn.key.weight": normal(d, d),
            f"{p}.attn.value.weight": normal(d, d), f"{p}.attn.value.bias": zeros(d),
            f"{p}.attn.out.weight": normal(d, d), f"{p}.attn.out.bias": zeros(d),
            f"{p}.attn_ln.weight": ones(d), f"{p}.attn_ln.bias": zeros(d),
            f"{p}.mlp.0.weight": normal(4 * d, d), f"{p}.mlp.0.bias": zeros(4 * d),
            f"{p}.mlp.2.weight": normal(d, 4 * d), f"{p}.mlp.2.bias": zeros(d),
            f"{p}.mlp_ln.weight": ones(d), f"{p}.mlp_ln.bias": zeros(d),
        })
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"dims": dims.to_dict(), "model_state_dict": sd}, tmp)
    os.replace(tmp, path)
    return path
