"""The speaker encoder as one graph call: ``mel [1, frames, M] -> xvector [D]`` for any ``frames``.

``models.qwen3_tts.speaker_encoder.SpeakerEncoder`` builds its attentive pooling's uniform
weights with ``torch.full(..., 1 / t)`` and broadcasts the statistics with ``expand(-1, -1, t)``:
a trace would freeze ``t``, the reference's length at export.  This form runs the model's own
blocks and the pooling's own layers, with the uniform statistics as ``mean`` over time and the
broadcast as a product with ``ones_like``, so the exported graph takes every length
(``export.clone_onnx``).  The build checks it (numpy mel, this graph on onnxruntime) against the
torch path (torch mel, the module): max-abs 1.4e-6 on the reduced root (docs/tts-build.md).
"""

from __future__ import annotations

import torch
from torch import nn


class SpeakerEncoderGraph(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.enc = encoder

    def forward(self, mel):
        e = self.enc
        return e.fc(_pool(e.asp, e.frames(mel))).reshape(e.fc.out_channels)  # [1, D, 1] -> [D] (squeeze: an If)


def _pool(asp, x):
    """``AttentiveStatsPool.forward`` without the length as a number."""
    mean = x.mean(dim=2)
    std = torch.sqrt((x - mean.unsqueeze(2)).pow(2).mean(dim=2).clamp(asp.eps))
    ones = torch.ones_like(x[:, :1, :])
    att = torch.cat([x, mean.unsqueeze(2) * ones, std.unsqueeze(2) * ones], dim=1)
    att = torch.softmax(asp.conv(torch.tanh(asp.tdnn(att))), dim=2)
    mean, std = asp._stats(x, att)
    return torch.cat((mean, std), dim=1).unsqueeze(2)
