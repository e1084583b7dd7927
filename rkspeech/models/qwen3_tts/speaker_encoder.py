"""The speaker encoder (ECAPA-TDNN x-vector) of the Base checkpoints, in plain torch.

Parameter names follow ``speaker_encoder.*`` in ``model.safetensors``.  The mel front end is the
official one (n_fft 1024, hop 256, 128 Slaney mel bands 0-12 kHz at 24 kHz, magnitude with a
1e-9 floor, log clamp 1e-5) with the filterbank computed here in numpy, no librosa at run time
(``tests/models/test_tts_generate.py`` checks it against librosa's ``filters.mel``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.models.qwen3_tts.tts_config import SpeakerEncoderConfig

MEL = {"n_fft": 1024, "num_mels": 128, "hop": 256, "win": 1024, "fmin": 0.0, "fmax": 12000.0}


def _hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * m
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), freqs)


def slaney_mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """``[n_mels, n_fft//2+1]`` float32 triangular Slaney-scale filters with Slaney area norm."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def mel_spectrogram(audio: np.ndarray, sample_rate: int = 24000) -> torch.Tensor:
    """``[1, frames, 128]`` log-mel of mono float audio (the official speaker-encoder front end)."""
    y = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)).unsqueeze(0)
    basis = torch.from_numpy(slaney_mel_filters(sample_rate, MEL["n_fft"], MEL["num_mels"], MEL["fmin"], MEL["fmax"]))
    pad = (MEL["n_fft"] - MEL["hop"]) // 2
    y = F.pad(y.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(y, MEL["n_fft"], hop_length=MEL["hop"], win_length=MEL["win"],
                      window=torch.hann_window(MEL["win"]), center=False, normalized=False, onesided=True,
                      return_complex=True)
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.log(torch.clamp(basis @ spec, min=1e-5))
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

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        h = mel.transpose(1, 2)
        outs = []
        for block in self.blocks:
            h = block(h)
            outs.append(h)
        h = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(h)).squeeze(-1)[0]
