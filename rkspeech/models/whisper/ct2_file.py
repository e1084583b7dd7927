"""A CTranslate2 ``model.bin`` read as an index of variables (numpy only: the runtime uses it too).

``model.bin`` is CTranslate2's own binary (writer: ``ctranslate2/specs/model_spec.py`` ``ModelSpec._serialize``,
reader: ``src/models/model.cc`` ``Model::load``), little endian::

    u32 binary_version (we read 4..6; 6 in CTranslate2 4.x)
    str spec name ("WhisperSpec"), u32 spec revision
    u32 n_variables, then per variable:
        str name, u8 rank, u32[rank] shape, u8 dtype id, u32 n_bytes, n_bytes of data
    u32 n_aliases, then per alias: str alias, str target
    str = u16 length (including a trailing NUL), then the bytes and the NUL

dtype ids follow ``include/ctranslate2/types.h``: 0 float32, 1 int8, 2 int16, 3 int32,
4 float16, 5 bfloat16.  Quantized weights carry ``<name>_scale``: int8 per output row
(``q = rint(w * 127 / amax_row)``), int16 one scalar; we dequantize ``w = q / scale``.
AWQ-style models (``weight_zero``) are refused.  Only the ``encoder/`` variables are read
(seek, not the whole file), so a 3 GB large-v3 ``model.bin`` costs only its encoder.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

_CT2_DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}


@dataclass(frozen=True)
class Ct2Variable:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int  # of the data in the file
    nbytes: int


class Ct2ModelFile:
    """Index of a CTranslate2 ``model.bin``: names, shapes, dtypes and data offsets."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.variables: dict[str, Ct2Variable] = {}
        self.aliases: dict[str, str] = {}
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size

            def read(n: int) -> bytes:
                data = f.read(n)
                if len(data) != n:
                    raise RkspeechError(
                        f"{self.path} is truncated at byte {f.tell()} (file has {size} bytes); "
                        "re-download or re-convert the model"
                    )
                return data

            def u8() -> int:
                return read(1)[0]

            def u16() -> int:
                return struct.unpack("<H", read(2))[0]

            def u32() -> int:
                return struct.unpack("<I", read(4))[0]

            def string() -> str:
                n = u16()
                return read(n).rstrip(b"\0").decode("utf-8")

            self.binary_version = u32()
            if not 4 <= self.binary_version <= 6:
                raise RkspeechError(
                    f"{self.path}: CTranslate2 binary version {self.binary_version} is not supported "
                    "(this reader handles 4-6, CTranslate2 >= 2.x); re-convert with a current ct2 converter"
                )
            self.spec = string()
            self.revision = u32()
            for _ in range(u32()):
                name = string()
                shape = tuple(u32() for _ in range(u8()))
                type_id = u8()
                nbytes = u32()
                if type_id not in _CT2_DTYPES:
                    raise RkspeechError(f"{self.path}: variable {name} has unknown dtype id {type_id}")
                self.variables[name] = Ct2Variable(name, shape, _CT2_DTYPES[type_id], f.tell(), nbytes)
                f.seek(nbytes, os.SEEK_CUR)
            if self.binary_version >= 3:
                for _ in range(u32()):
                    alias = string()
                    self.aliases[alias] = string()

    def __contains__(self, name: str) -> bool:
        return name in self.variables or name in self.aliases

    def raw(self, name: str) -> np.ndarray:
        var = self.variables[self.aliases.get(name, name)]
        if var.dtype == "bfloat16":
            words = np.fromfile(self.path, dtype="<u2", count=var.nbytes // 2, offset=var.offset)
            return (words.astype(np.uint32) << 16).view(np.float32).reshape(var.shape)
        array = np.fromfile(self.path, dtype=np.dtype(var.dtype).newbyteorder("<"),
                            count=var.nbytes // np.dtype(var.dtype).itemsize, offset=var.offset)
        return array.reshape(var.shape)

    def float32(self, name: str) -> np.ndarray:
        """The variable as float32, dequantizing int8/int16 weights with their saved scale."""
        if f"{name[: -len('weight')]}weight_zero" in self and name.endswith("weight"):
            raise RkspeechError(
                f"{self.path}: {name} is AWQ-quantized (weight_zero); convert the model without "
                "AWQ (ct2-transformers-converter --quantization float16 or float32)"
            )
        value = self.raw(name)
        if value.dtype in (np.int8, np.int16):
            scale_name = f"{name}_scale"
            if scale_name not in self:
                raise RkspeechError(f"{self.path}: quantized {name} has no {scale_name}")
            scale = self.raw(scale_name).astype(np.float32)
            if scale.ndim == 1:  # per output row (int8); conv weights are [out, in, k]
                scale = scale.reshape((-1,) + (1,) * (value.ndim - 1))
            return value.astype(np.float32) / scale
        return value.astype(np.float32)

    def scalar_int(self, name: str) -> int:
        return int(self.raw(name).reshape(()))
