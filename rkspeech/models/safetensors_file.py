"""Write a safetensors file whose bytes depend on its tensors and metadata only.

safetensors 0.8.0's ``save_file`` keeps ``__metadata__`` in a hash map, so its key order in the
header (and so the file's bytes) changes from one process to the next: two
``synth-checkpoint qwen3-tts --seed 5`` runs wrote byte-different ``speech_tokenizer/model.safetensors``
files with identical tensors and metadata (headers equal as JSON, data bytes equal; measured).
``save_file_stable`` writes with ``save_file`` and then rewrites the header in place with the
metadata keys sorted (the tensor entries keep the library's own order, already fixed: by dtype
alignment, then name), compact and space-padded to a multiple of 8 as the format requires; the
data bytes are not touched, and readers see the same tensors and metadata.
"""

from __future__ import annotations

import json
import os
import shutil


def _stable_header(header: dict) -> bytes:
    meta = header.pop("__metadata__", None)
    ordered = {"__metadata__": dict(sorted(meta.items()))} if meta else {}
    ordered.update(header)
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return text + b" " * (-len(text) % 8)


def save_file_stable(tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_file`` (name -> contiguous torch tensor), byte-for-byte the same
    for the same tensors and metadata."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        new = _stable_header(json.loads(f.read(n)))
        if len(new) == n:  # the usual case: same JSON, other key order
            f.seek(8)
            f.write(new)
            return
    tmp = f"{path}.restable"
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        src.seek(8 + n)
        dst.write(len(new).to_bytes(8, "little") + new)
        shutil.copyfileobj(src, dst)
    os.replace(tmp, path)


#: safetensors dtype names of the torch dtypes the writers use, and their sizes in bytes
_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}


def write_streamed(path: str | os.PathLike, entries, metadata: dict[str, str] | None = None) -> None:
    """A safetensors file written one tensor at a time: ``entries`` is a list of
    ``(name, dtype, shape, make)`` (dtype ``"BF16"``/``"F16"``/``"F32"``; ``make()`` returns the
    tensor's little-endian bytes), in the order the data is laid out.  Only one tensor is held at a
    time, so a file larger than memory can be written.  The header is the stable one of
    ``save_file_stable`` (metadata keys sorted, compact, space-padded to 8 bytes); the bytes depend
    on the entries and metadata only."""
    header: dict = {}
    offset = 0
    for name, dtype, shape, _ in entries:
        size = _DTYPES[dtype]
        for d in shape:
            size *= int(d)
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header = {"__metadata__": metadata, **header}
    head = _stable_header(header)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for name, _, _, make in entries:
            data = make()
            begin, end = header[name]["data_offsets"]
            if len(data) != end - begin:
                raise ValueError(f"{name}: {len(data)} bytes, the header says {end - begin}")
            f.write(data)
