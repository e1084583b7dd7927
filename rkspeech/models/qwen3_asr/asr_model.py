"""Qwen3-ASR's thinker in plain torch, loaded from the checkpoint's own keys (host side: builds, checks).

``thinker.audio_tower.*`` -> :class:`~rkspeech.models.qwen3_asr.encoder.AudioEncoder`;
``thinker.model.*`` -> the Qwen3 decoder stack the text-to-speech talker already is
(``models.qwen3_tts.talker.DecoderStack``: with audio the official interleaved MRoPE's three
position rows are equal, which is 1-D RoPE) plus ``embed_tokens``; the head is
``thinker.lm_head.weight``, or the embedding when ``tie_word_embeddings`` (the published 0.6B).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_asr.encoder import AudioEncoder
from rkspeech.models.qwen3_tts.talker import DecoderStack

PREFIX = "thinker."


class TextModel(DecoderStack):
    """``thinker.model``: the decoder stack and the token embedding."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)


class ASRNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.audio_tower = AudioEncoder(cfg.audio)
        self.model = TextModel(cfg.text)
        self.lm_head = nn.Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)

    def head_weight(self) -> torch.Tensor:
        return self.lm_head.weight


def load_asr_net(files, cfg) -> ASRNet:
    """The thinker of a model root in float32 (``files``: ``asr_checkpoint.resolve_asr_root``), each
    tensor copied into its parameter in turn: no second fp32 copy of the weights is held (the 1.7B
    thinker is 8.1 GB in fp32)."""
    from safetensors import safe_open

    net = ASRNet(cfg)
    want = {PREFIX + k: v for k, v in net.state_dict().items()}  # shares the parameters' storage
    head = want.pop(PREFIX + "lm_head.weight") if cfg.tie_word_embeddings else None
    keys = {}
    for path in files.weights:
        with safe_open(str(path), framework="pt") as f:
            keys.update((key, path) for key in f.keys() if key in want)
    missing = sorted(set(want) - set(keys))
    if missing:
        raise RkspeechError(f"{files.root}: the weights lack {len(missing)} key(s) config.json implies, e.g. "
                            f"{missing[0]} (does config.json match the weights?)")
    with torch.no_grad():
        for path in files.weights:
            with safe_open(str(path), framework="pt") as f:
                for key in (k for k, p in keys.items() if p == path):
                    t = f.get_tensor(key)
                    if tuple(t.shape) != tuple(want[key].shape):
                        raise RkspeechError(f"{files.root}: {key} has shape {list(t.shape)}, config.json implies "
                                            f"{list(want[key].shape)}")
                    want[key].copy_(t)
        if head is not None:
            head.copy_(want[PREFIX + "model.embed_tokens.weight"])
    return net.eval()


def encoder_fingerprint(encoder: AudioEncoder) -> str:
    """16 hex digits over the encoder's first convolution and final projection (fp32 bytes): a window
    graph from another checkpoint of the same shape is refused."""
    h = hashlib.sha256()
    for t in (encoder.conv2d1.weight, encoder.proj2.weight):
        h.update(t.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
