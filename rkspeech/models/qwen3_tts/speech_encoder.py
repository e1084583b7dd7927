"""The speech tokenizer's encoder half (audio -> codes), our own torch module: in-context cloning.

qwen-tts encodes a reference recording with the 12 Hz speech tokenizer's encoder, a transformers
``MimiModel`` without its decoder half (``Qwen3TTSTokenizerV2Model.encode``: ``MimiModel.encode`` of
the audio, the first ``encoder_valid_num_quantizers`` (16) codebooks, ``ceil(samples / 1920)``
codes kept).  This module computes the same codes from the same ``encoder.*`` tensors of
``speech_tokenizer/model.safetensors``:

* SEANet: causal convolutions (left padding ``kernel - stride``, zeros), residual blocks, ELU,
  strided convolutions by ``reversed(upsampling_ratios)``; a transformer of ``num_hidden_layers``
  pre-LayerNorm layers (RoPE, causal attention, GELU MLP, layer scales); a causal stride-2
  downsample (replicate padding) to 12.5 Hz; the split residual vector quantizer (one semantic
  codebook, then the acoustic ones on the same embeddings), each code the nearest centroid.
* Mimi pads each strided convolution's input on the right to whole strides, zeros (the
  downsample: copies of its last frame).  Here the caller pads the audio once, to whole codes
  (``contracts.clone.padded_length``), and passes the true ``length``: every strided layer zeroes
  (the downsample: replicates its last valid frame into) the positions past its own valid length,
  which is exactly the padding Mimi adds, so the first ``code_count(length)`` codes are Mimi's.
  Positions are counted with ``cumsum`` and lengths computed in the graph, so one exported graph
  takes any length (``export.clone_onnx``).

Nearest centroid: ``argmin(|e|^2 - 2 e.x)`` (``|x|^2`` is the same for every centroid);
``torch.cdist`` computes ``sqrt(|x|^2 + |e|^2 - 2 x.e)`` here, the same order unless two centroids
are within rounding of each other.  Checked against transformers' ``MimiModel`` loaded by qwen-tts
on the reduced synthetic root: codes identical (tests/models/test_speech_encoder.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rkspeech.core.errors import RkspeechError

ENCODER_PREFIX = "encoder."


def samples_per_code(c: dict) -> int:
    """Audio samples per code: the SEANet's total stride times the downsample's (1920 at 24 kHz)."""
    return math.prod(c["upsampling_ratios"]) * (2 if _downsample_kernel(c) else 1)


def _downsample_kernel(c: dict) -> int:
    """``MimiModel``'s downsample kernel (stride 2), 0 when the SEANet's rate is the frame rate."""
    encodec_rate = math.ceil(c["sampling_rate"] / math.prod(c["upsampling_ratios"]))
    return 0 if c["_frame_rate"] == encodec_rate else 2 * int(encodec_rate / c["_frame_rate"])


class CausalConv(nn.Module):
    """``MimiConv1d`` with ``use_causal_conv``, on an input whose length is whole strides."""

    def __init__(self, cin, cout, k, stride=1, dilation=1, bias=True, pad_mode="constant"):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride, dilation=dilation, bias=bias)
        self.left, self.pad_mode = (k - 1) * dilation + 1 - stride, pad_mode

    def forward(self, x):
        if self.left:
            x = F.pad(x, (self.left, 0)) if self.pad_mode == "constant" else F.pad(x, (self.left, 0), mode=self.pad_mode)
        return self.conv(x)


class ResBlock(nn.Module):
    def __init__(self, c, dim, dilation):
        super().__init__()
        hidden = dim // c["compress"]
        self.block = nn.ModuleList([nn.ELU(), CausalConv(dim, hidden, c["residual_kernel_size"], dilation=dilation,
                                                         pad_mode=c["pad_mode"]),
                                    nn.ELU(), CausalConv(hidden, dim, 1, pad_mode=c["pad_mode"])])
        self.shortcut = CausalConv(dim, dim, 1, pad_mode=c["pad_mode"]) if c["use_conv_shortcut"] else None

    def forward(self, x):
        h = x
        for layer in self.block:
            h = layer(h)
        return (self.shortcut(x) if self.shortcut is not None else x) + h


class SEANet(nn.Module):
    def __init__(self, c):
        super().__init__()
        f, pm = c["num_filters"], c["pad_mode"]
        layers: list[nn.Module] = [CausalConv(c["audio_channels"], f, c["kernel_size"], pad_mode=pm)]
        scale = 1
        for ratio in reversed(c["upsampling_ratios"]):
            dim = scale * f
            for j in range(c["num_residual_layers"]):
                layers.append(ResBlock(c, dim, c["dilation_growth_rate"] ** j))
            layers += [nn.ELU(), CausalConv(dim, 2 * dim, 2 * ratio, stride=ratio, pad_mode=pm)]
            scale *= 2
        layers += [nn.ELU(), CausalConv(scale * f, c["hidden_size"], c["last_kernel_size"], pad_mode=pm)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x, length):
        """``x [1, C, T]`` (T whole strides), ``length``: valid samples (float tensor [1])."""
        for layer in self.layers:
            if isinstance(layer, CausalConv) and layer.conv.stride[0] > 1:
                x = x * (_positions(x) < length).to(x.dtype)  # Mimi's right padding: zeros
                length = torch.ceil(length / layer.conv.stride[0])
            x = layer(x)
        return x, length


def _positions(x):
    """``[T]`` float positions 0..T-1 of ``x [.., T]`` (no shape ops: one graph for every T)."""
    return torch.cumsum(torch.ones_like(x[0, 0]), 0) - 1


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], hd
        b = c["attention_bias"]
        self.q_proj = nn.Linear(h, self.heads * hd, bias=b)
        self.k_proj = nn.Linear(h, self.kv_heads * hd, bias=b)
        self.v_proj = nn.Linear(h, self.kv_heads * hd, bias=b)
        self.o_proj = nn.Linear(self.heads * hd, h, bias=b)

    def forward(self, x, cos, sin, bias):
        q = self.q_proj(x).view(1, -1, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(1, -1, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(1, -1, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * (1 / math.sqrt(self.head_dim)) + bias, dim=-1)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(1, -1, self.heads * self.head_dim))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.self_attn = Attention(c)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(h, c["intermediate_size"], bias=False)
        self.mlp.fc2 = nn.Linear(c["intermediate_size"], h, bias=False)
        self.input_layernorm = nn.LayerNorm(h, eps=c["norm_eps"])
        self.post_attention_layernorm = nn.LayerNorm(h, eps=c["norm_eps"])
        self.self_attn_layer_scale = nn.Module()
        self.self_attn_layer_scale.scale = nn.Parameter(torch.zeros(h))
        self.mlp_layer_scale = nn.Module()
        self.mlp_layer_scale.scale = nn.Parameter(torch.zeros(h))
        if c["hidden_act"] != "gelu":
            raise RkspeechError(f"speech tokenizer encoder: hidden_act {c['hidden_act']!r} is not supported (gelu)")

    def forward(self, x, cos, sin, bias):
        x = x + self.self_attn_layer_scale.scale * self.self_attn(self.input_layernorm(x), cos, sin, bias)
        h = self.mlp.fc2(F.gelu(self.mlp.fc1(self.post_attention_layernorm(x))))
        return x + self.mlp_layer_scale.scale * h


class Quantizer(nn.Module):
    """One ``MimiResidualVectorQuantizer``'s encode: input projection, then residual nearest centroids."""

    def __init__(self, c, count: int):
        super().__init__()
        vq, h = c["vector_quantization_hidden_dimension"], c["hidden_size"]
        self.input_proj = nn.Conv1d(h, vq, 1, bias=False) if vq != h else None
        n, d = c["codebook_size"], c["codebook_dim"]
        self.register_buffer("embed", torch.zeros(count, n, d))  # embed_sum / cluster_usage, per layer
        self.register_buffer("norms", torch.zeros(count, n), persistent=False)  # |e|^2: set_norms()

    def set_norms(self) -> None:
        """``|e|^2`` of every centroid, kept beside the codebooks (the exporter does not fold ReduceSum:
        computed in the graph, each codebook was stored a second time as ``e * e``)."""
        self.norms = (self.embed * self.embed).sum(-1)

    def forward(self, x):
        """``x [1, H, T]`` -> codes ``[count, T]`` int64."""
        if self.input_proj is not None:
            x = self.input_proj(x)
        r = x[0]  # [D, T]
        codes = []
        for i in range(self.embed.shape[0]):
            e = self.embed[i]  # [N, D], one copy in the graph: the distances as e @ r, the residual's gather
            idx = torch.argmin(self.norms[i][:, None] - 2 * (e @ r), dim=0)
            codes.append(idx)
            r = r - torch.index_select(e, 0, idx).transpose(0, 1)
        return torch.stack(codes)


class SpeechEncoder(nn.Module):
    """``audio [1, 1, samples]`` (zeros past ``length``, whole codes) and ``length [1]`` int64
    -> ``codes [1, G, samples / samples_per_code]`` int64; the first ``code_count(length)`` are
    the reference's."""

    def __init__(self, c: dict, num_code_groups: int):
        super().__init__()
        if c["num_semantic_quantizers"] > num_code_groups or num_code_groups > c["num_quantizers"]:
            raise RkspeechError(f"speech tokenizer encoder: {num_code_groups} codebooks asked, the encoder has "
                                f"{c['num_semantic_quantizers']} semantic of {c['num_quantizers']}")
        if not c.get("use_causal_conv", True):
            raise RkspeechError("speech tokenizer encoder: only the causal Mimi encoder is supported")
        self.config, self.num_code_groups = dict(c), num_code_groups
        self.samples_per_code = samples_per_code(c)
        self.encoder = SEANet(c)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        hd = c["head_dim"]
        self.register_buffer("inv_freq", 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64)
                                                                     .float() / hd)), persistent=False)
        k = _downsample_kernel(c)
        self.downsample = (CausalConv(c["hidden_size"], c["hidden_size"], k, stride=2, bias=False,
                                      pad_mode="replicate") if k else None)
        n_sem = c["num_semantic_quantizers"]
        self.semantic = Quantizer(c, n_sem)
        self.acoustic = Quantizer(c, num_code_groups - n_sem)

    def forward(self, audio, length):
        length = length.to(torch.float32)
        x, length = self.encoder(audio, length)  # [1, H, T25]
        h = x.transpose(1, 2)
        pos = _positions(x)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        bias = (pos[None, :] > pos[:, None]).to(h.dtype) * torch.finfo(torch.float32).min  # causal
        for layer in self.layers:
            h = layer(h, cos, sin, bias)
        x = h.transpose(1, 2)
        if self.downsample is not None:  # Mimi pads it with copies of the last valid frame
            last = torch.minimum(pos, length - 1).to(torch.int64)
            x = self.downsample(torch.index_select(x, 2, last))
        codes = self.semantic(x)
        if self.acoustic.embed.shape[0]:
            codes = torch.cat([codes, self.acoustic(x)], dim=0)
        return codes[None]

    def codes(self, audio: np.ndarray) -> np.ndarray:
        """``[ceil(samples / samples_per_code), G]`` int64 codes of mono float audio (the torch path)."""
        from rkspeech.models.qwen3_tts.clone_inputs import reference_codes, reference_feed

        a = np.asarray(audio, dtype=np.float32).reshape(-1)
        feed = reference_feed(a, self.samples_per_code)
        with torch.no_grad():
            out = self(torch.from_numpy(feed["audio"]), torch.from_numpy(feed["length"])).numpy()
        return reference_codes(out, a.size, self.samples_per_code)


def read_encoder_config(files) -> tuple[dict, int]:
    """``(encoder_config, encoder_valid_num_quantizers)`` of a speech tokenizer's ``config.json``
    (``files``: ``vocoder_checkpoint.CheckpointFiles``); one line when it has no encoder."""
    try:
        raw = json.loads(files.config.read_text())
    except (OSError, ValueError) as exc:
        raise RkspeechError(f"{files.config}: not readable JSON ({exc})") from None
    c = raw.get("encoder_config")
    if not isinstance(c, dict):
        raise RkspeechError(f"{files.config}: no encoder_config; this speech tokenizer has no encoder half "
                            "(in-context cloning needs it)")
    n = int(raw.get("encoder_valid_num_quantizers", 16))
    return c, n


def load_speech_encoder(files) -> SpeechEncoder:
    """Our encoder with the ``encoder.*`` tensors of ``files.weights`` (codebooks as
    ``embed_sum / cluster_usage.clamp(1e-5)``, as Mimi computes them)."""
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    c, n = read_encoder_config(files)
    enc = SpeechEncoder(c, n)
    state: dict = {}
    try:
        with safe_open(str(files.weights), framework="pt") as f:
            raw = {k[len(ENCODER_PREFIX):]: f.get_tensor(k).to(torch.float32)
                   for k in f.keys() if k.startswith(ENCODER_PREFIX)}
    except (SafetensorError, OSError) as exc:
        raise RkspeechError(f"{files.weights}: not a readable safetensors file ({exc})") from None
    if not raw:
        raise RkspeechError(f"{files.weights}: no encoder.* tensors; this speech tokenizer has no encoder half "
                            "(in-context cloning needs it)")
    for k, v in raw.items():
        if k.startswith("encoder."):  # SEANet: layers.{i}[.block.{j}].conv.* as ours
            state[k] = v
        elif k.startswith("encoder_transformer.layers."):
            state[k[len("encoder_transformer."):]] = v
        elif k.startswith("downsample."):
            state[k] = v
    for part, q in (("semantic", enc.semantic), ("acoustic", enc.acoustic)):
        p = f"quantizer.{part}_residual_vector_quantizer."
        if q.input_proj is not None:
            state[f"{part}.input_proj.weight"] = raw[p + "input_proj.weight"]
        embeds = []
        for i in range(q.embed.shape[0]):
            usage = raw[f"{p}layers.{i}.codebook.cluster_usage"].clamp(min=1e-5)
            embeds.append(raw[f"{p}layers.{i}.codebook.embed_sum"] / usage[:, None])
        state[f"{part}.embed"] = torch.stack(embeds) if embeds else q.embed
    try:
        enc.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise RkspeechError(f"{files.weights}: the speech tokenizer's encoder does not load "
                            f"({str(exc).splitlines()[0]})") from None
    enc.semantic.set_norms()
    enc.acoustic.set_norms()
    return enc.eval()


class LazySpeechEncoder:
    """The speech encoder of a model root, read on the first ``codes`` call (``TTSModel.reference_codes``)."""

    def __init__(self, root):
        self.root, self._encoder = root, None

    def codes(self, audio: np.ndarray) -> np.ndarray:
        if self._encoder is None:
            from rkspeech.models.qwen3_tts.vocoder_checkpoint import resolve_checkpoint

            self._encoder = load_speech_encoder(resolve_checkpoint(self.root))
        return self._encoder.codes(audio)
