"""The speaker encoder (ECAPA-TDNN x-vector) of the Base checkpoints, in plain torch.

Parameter names follow ``speaker_encoder.*`` in ``model.safetensors``.  The mel front end is the
official one (n_fft 1024, hop 256, 128 Slaney mel bands 0-12 kHz at 24 kHz, magnitude with a
1e-9 floor, log clamp 1e-5), its constants and filterbank from ``clone_inputs`` (numpy; the same front
end without torch, which the speaker encoder's graph is fed with on a board).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.models.qwen3_tts.clone_inputs import LOG_FLOOR, MAGNITUDE_EPS, MEL, mel_filters, slaney_mel_filters  # noqa: F401
from rkspeech.models.qwen3_tts.tts_config import SpeakerEncoderConfig


def mel_spectrogram(audio: np.ndarray, sample_rate: int = 24000) -> torch.Tensor:
    """``[1, frames, 128]`` log-mel of mono float audio (the official speaker-encoder front end)."""
    y = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)).unsqueeze(0)
    basis = torch.from_numpy(mel_filters(sample_rate))
    pad = (MEL["n_fft"] - MEL["hop"]) // 2
    y = F.pad(y.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(y, MEL["n_fft"], hop_length=MEL["hop"], win_length=MEL["win"],
                      window=torch.hann_window(MEL["win"]), center=False, normalized=False, onesided=True,
                      return_complex=True)
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + MAGNITUDE_EPS)
    mel = torch.log(torch.clamp(basis @ spec, min=LOG_FLOOR))
    return mel.transpose(1, 2)


def _conv(cin, cout, k, d=1):
    return nn.Conv1d(cin, cout, kernel_size=k, dilation=d, padding="same", padding_mode="reflect")


class TDNNBlock(nn.Module):
    def __init__(self, cin, cout, k, d):
        super().__init__()
        self.conv = _conv(cin, cout, k, d)

    def forward(self, x):
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    def __init__(self, cin, cout, scale, k, d):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(TDNNBlock(cin // scale, cout // scale, k, d) for _ in range(scale - 1))

    def forward(self, x):
        outs, y = [], None
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            y = part if i == 0 else self.blocks[i - 1](part if i == 1 else part + y)
            outs.append(y)
        return torch.cat(outs, dim=1)


class SEBlock(nn.Module):
    def __init__(self, cin, se, cout):
        super().__init__()
        self.conv1 = _conv(cin, se, 1)
        self.conv2 = _conv(se, cout, 1)

    def forward(self, x):
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * s


class SERes2NetBlock(nn.Module):
    def __init__(self, cin, cout, scale, se, k, d):
        super().__init__()
        self.tdnn1 = TDNNBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, cout, scale, k, d)
        self.tdnn2 = TDNNBlock(cout, cout, 1, 1)
        self.se_block = SEBlock(cout, se, cout)

    def forward(self, x):
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


class AttentiveStatsPool(nn.Module):
    eps = 1e-12

    def __init__(self, channels, attention_channels):
        super().__init__()
        self.tdnn = TDNNBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels, 1)

    def _stats(self, x, w):
        mean = (w * x).sum(2)
        std = torch.sqrt((w * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(self.eps))
        return mean, std

    def forward(self, x):
        t = x.shape[-1]
        w = torch.full((x.shape[0], 1, t), 1.0 / t, dtype=x.dtype)
        mean, std = self._stats(x, w)
        att = torch.cat([x, mean.unsqueeze(2).expand(-1, -1, t), std.unsqueeze(2).expand(-1, -1, t)], dim=1)
        att = torch.softmax(self.conv(torch.tanh(self.tdnn(att))), dim=2)
        mean, std = self._stats(x, att)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """``mel [1, frames, mel_dim] -> x-vector [enc_dim]``."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, ds = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.blocks = nn.ModuleList([TDNNBlock(cfg.mel_dim, ch[0], ks[0], ds[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], cfg.enc_res2net_scale, cfg.enc_se_channels, ks[i], ds[i]))
        self.mfa = TDNNBlock(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim, 1)

    def frames(self, mel: torch.Tensor) -> torch.Tensor:
        """``[1, channels, frames]``: the blocks and their aggregation, before the pooling."""
        h = mel.transpose(1, 2)
        outs = []
        for block in self.blocks:
            h = block(h)
            outs.append(h)
        return self.mfa(torch.cat(outs[1:], dim=1))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.fc(self.asp(self.frames(mel))).squeeze(-1)[0]
