"""The host's share of a Qwen3-TTS checkpoint, read into numpy without torch.

When the talker and the code predictor run as graphs, the host needs only the embeddings, the text
projection, the codec head and the code predictor's input projection, embeddings and heads
(plus two tensors per stack for the graphs' weight fingerprints).  :class:`HostWeights` reads those
keys of ``model.safetensors`` and nothing else.

The reader is a small safetensors parser (8-byte little-endian header length, a JSON header of
``{key: {dtype, shape, data_offsets}}``, then the raw tensors) over ``numpy.memmap``:
``safetensors.numpy`` cannot load the published files, which are bfloat16 (numpy has no bfloat16:
``TypeError: data type 'bfloat16' not understood``).  bfloat16 becomes float32 by a 16-bit shift,
which is exactly what torch's ``.to(torch.float32)`` does, so every value equals the torch path's.
The text embedding (151,936 x 2,048 in the published models, 1.2 GB as float32) stays mapped in
its file dtype and only the rows a prompt uses are converted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def _float32(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(a).astype(np.float32)


class SafetensorsFile:
    """Tensors of one ``.safetensors`` file by key, memory-mapped (``raw``) or as float32 (``get``)."""

    def __init__(self, path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                if not 2 <= n <= 100_000_000:
                    raise ValueError(f"header length {n}")
                header = json.loads(f.read(n))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise RkspeechError(f"{self.path}: not a readable safetensors file ({exc})") from None
        header.pop("__metadata__", None)
        self.header, self.base = header, 8 + n
        self._map = None

    def keys(self) -> list[str]:
        return list(self.header)

    def _entry(self, key: str) -> dict:
        e = self.header.get(key)
        if e is None:
            raise RkspeechError(f"{self.path}: missing key {key} (does config.json match the weights?)")
        if e.get("dtype") not in _DTYPES:
            raise RkspeechError(f"{self.path}: {key} is stored as {e.get('dtype')}; weights must be floating point")
        return e

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._entry(key)["shape"])

    def raw(self, key: str) -> tuple[np.ndarray, str]:
        """``(array in the file's dtype (bfloat16 as uint16), dtype name)``, memory-mapped."""
        e = self._entry(key)
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        lo, hi = e["data_offsets"]
        dt = np.dtype(_DTYPES[e["dtype"]]).newbyteorder("<")
        flat = self._map[self.base + lo:self.base + hi].view(dt)
        return flat.reshape(e["shape"]), e["dtype"]

    def get(self, key: str, shape: tuple | None = None) -> np.ndarray:
        """``key`` as a C-contiguous float32 array (checked against ``shape`` when given)."""
        a, dtype = self.raw(key)
        if shape is not None and tuple(a.shape) != tuple(shape):
            raise RkspeechError(f"{self.path}: {key} has shape {tuple(a.shape)}, config.json implies {tuple(shape)}")
        return np.ascontiguousarray(_float32(a, dtype))


class EmbeddingRows:
    """A mapped embedding table: ``rows(ids) -> [n, dim]`` float32 (only those rows converted)."""

    def __init__(self, f: SafetensorsFile, key: str, shape: tuple):
        self.table, self.dtype = f.raw(key)
        if tuple(self.table.shape) != tuple(shape):
            raise RkspeechError(f"{f.path}: {key} has shape {tuple(self.table.shape)}, config.json implies "
                                f"{tuple(shape)}")

    def rows(self, ids) -> np.ndarray:
        return np.ascontiguousarray(_float32(self.table[np.asarray(ids, dtype=np.int64)], self.dtype))


def fingerprint(norm: np.ndarray, q_proj: np.ndarray) -> str:
    """``stepgraph.talker_step.weights_fingerprint`` of numpy weights (the same fp32 bytes)."""
    h = hashlib.sha256()
    for a in (norm, q_proj):
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


class HostWeights:
    """The host-side tensors of a checkpoint (``cfg``: its ``TTSConfig``), float32 numpy.

    ``text_embedding`` (rows on demand), ``fc1_w/fc1_b/fc2_w/fc2_b`` (text projection),
    ``codec_embedding`` ``[V, Ht]``, ``codec_head`` ``[V, Ht]``, ``cp_proj_w/cp_proj_b`` (None when the
    code predictor's hidden equals the talker's: ``nn.Identity``), ``cp_embedding[j-1]`` ``[Vc, Ht]``,
    ``cp_head[j-1]`` ``[Vc, Hc]``, and the two stacks' fingerprints."""

    def __init__(self, path, cfg):
        f = SafetensorsFile(path)
        t, cp = cfg.talker, cfg.code_predictor
        Ht, Dt = t.hidden_size, t.text_hidden_size
        self.text_embedding = EmbeddingRows(f, "talker.model.text_embedding.weight", (t.text_vocab_size, Dt))
        p = "talker.text_projection."
        self.fc1_w, self.fc1_b = f.get(p + "linear_fc1.weight", (Dt, Dt)), f.get(p + "linear_fc1.bias", (Dt,))
        self.fc2_w, self.fc2_b = f.get(p + "linear_fc2.weight", (Ht, Dt)), f.get(p + "linear_fc2.bias", (Ht,))
        self.codec_embedding = f.get("talker.model.codec_embedding.weight", (t.vocab_size, Ht))
        self.codec_head = f.get("talker.codec_head.weight", (t.vocab_size, Ht))
        c = "talker.code_predictor."
        if cp.hidden_size != Ht:
            self.cp_proj_w = f.get(c + "small_to_mtp_projection.weight", (cp.hidden_size, Ht))
            self.cp_proj_b = f.get(c + "small_to_mtp_projection.bias", (cp.hidden_size,))
        else:
            self.cp_proj_w = self.cp_proj_b = None
        groups = cp.num_code_groups - 1
        self.cp_embedding = [f.get(f"{c}model.codec_embedding.{i}.weight", (cp.vocab_size, Ht)) for i in range(groups)]
        self.cp_head = [f.get(f"{c}lm_head.{i}.weight", (cp.vocab_size, cp.hidden_size)) for i in range(groups)]
        hd = t.head_dim * t.num_attention_heads
        self.talker_fingerprint = fingerprint(f.get("talker.model.norm.weight", (Ht,)),
                                              f.get("talker.model.layers.0.self_attn.q_proj.weight", (hd, Ht)))
        self.cp_fingerprint = fingerprint(
            f.get(c + "model.norm.weight", (cp.hidden_size,)),
            f.get(c + "model.layers.0.self_attn.q_proj.weight", (cp.head_dim * cp.num_attention_heads, cp.hidden_size)))
        self.file = f
