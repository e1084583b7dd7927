"""Read an ``.rknn`` file with the standard library only: header, metadata JSON, custom string,
contract (any kind) and (best effort) the per-node CPU/NPU targets.

Container layout (format 6, verified on 88 files; see shared field notes)::

    0   4  b"RKNN"                8  8  u64 LE format (6 = flatbuffer model, 0x1004 = "mini")
    4   4  reserved               16 8  u64 LE model_len (model blob at offset 64)
    64+model_len: u64 LE json_len, then json_len bytes of UTF-8 JSON
    invariant: 64 + model_len + 8 + json_len == file size

The model blob is a FlatBuffer with file identifier ``RKNN``.  No schema is published; the fields
used here were found by reading files built with rknn-toolkit2 2.5.0 (measured here, 2026-11, on
single-op and small Conv/Sin/Mul graphs, cross-checked against the build's layer table):

* root field 7  string: toolkit + compiler version
* root field 8  string: target platform (``rk3588``)
* root field 11 string: the build's ``custom_string`` (empty string when none was given)
* root field 12 / 13 strings: JSON ``{name: {"dtype", "layout"}}`` of the runtime inputs/outputs
* root field 2  vector of graph tables; graph field 1: vector of node tables, in layer-table order
* node field 1 string: compiled op type (``ConvRelu``), field 2 string: FullName (``Conv:conv0``),
  field 3 u8: target (0 = CPU, default when absent; 2 = NPU)

Everything read from the blob is bounds-checked.  Its FlatBuffer frame (identifier, root table)
must be sound, else the file is refused as corrupt (``_check_root``); the fields inside are best
effort: when they do not parse, the header/JSON information is still returned and ``node_error``
says why.  Any malformed input
raises :class:`~rkspeech.core.errors.RkspeechError` (one line), never another exception; all loops
are bounded by the file size.
"""

from __future__ import annotations

import ast
import json
import mmap
import os
import struct
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from rkspeech.contracts.flatbuffer import Fb, FbError
from rkspeech.contracts.kinds import KINDS
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import TARGETS

MAGIC = b"RKNN"
HEADER_SIZE = 64
FORMAT_FLATBUFFER = 6
FORMAT_MINI = 0x1004
KNOWN_FORMATS = {FORMAT_FLATBUFFER: "flatbuffer", FORMAT_MINI: "mini"}
#: targets accepted by ``config(target_platform=...)`` in rknn-toolkit2 2.5.0 (its docstring):
#: ours, and the chips we read containers for but do not build for
KNOWN_TARGETS = TARGETS + ("rv1103", "rv1103b", "rv1106", "rv1106b", "rv1126b", "rk2118")
MAX_JSON_BYTES = 64 * 1024 * 1024
NODE_TARGETS = {0: "CPU", 2: "NPU"}

# root-table field indices (see module docstring)
_F_GRAPHS, _F_ATTRS, _F_VERSION, _F_TARGET, _F_FRAMEWORK = 2, 3, 7, 8, 9
_F_CUSTOM, _F_IN_DTYPES, _F_OUT_DTYPES = 11, 12, 13


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str  # runtime dtype at the graph boundary (float16 for fp16 builds), "unknown" if absent
    layout: str | None = None
    model_dtype: str | None = None  # dtype in the source model (float32, int64, ...)


@dataclass
class NodeInfo:
    index: int
    op_type: str
    full_name: str
    target: str  # "CPU", "NPU" or "?<byte>"


@dataclass
class RknnContainer:
    path: str
    file_size: int
    magic: str
    format: int
    format_name: str
    model_len: int
    json_len: int
    metadata: dict[str, Any]
    target_platform: list[str]
    toolkit_version: str | None
    compiler_version: str | None = None
    source_framework: str | None = None
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    custom_string: str | None = None
    custom_json: Any = None  # the custom string parsed as JSON, when it is JSON
    contract: Any = None  # the Contract (vocoder, talker, code predictor) the custom string holds
    contract_error: str | None = None
    nodes: list[NodeInfo] | None = None
    node_error: str | None = None

    @property
    def target(self) -> str | None:
        return self.target_platform[0] if self.target_platform else None

    def node_counts(self) -> dict[str, int] | None:
        if self.nodes is None:
            return None
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.target] = counts.get(n.target, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("metadata")
        d["contract"] = self.contract.to_dict() if self.contract is not None else None
        d["node_counts"] = self.node_counts()
        return d


def _err(source: str, message: str) -> RkspeechError:
    return RkspeechError(f"{source}: {message}")


def _literal(text: str) -> Any:
    """``ast.literal_eval`` guarded against pathological nesting/size (returns None if unsafe)."""
    if len(text) > 1 << 20:
        return None
    depth = peak = 0
    for ch in text:
        if ch in "[{(":
            depth += 1
            peak = max(peak, depth)
        elif ch in "]})":
            depth -= 1
    if peak > 40:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mutated text can raise Syntax/DeprecationWarnings
            return ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - any malformed literal just means "not available"
        return None


def _json_obj(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _io_from_json(meta: dict, source: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    tensors: dict[Any, dict] = {}
    for t in meta.get("norm_tensor") or []:
        if isinstance(t, dict) and "tensor_id" in t:
            tensors[t.get("tensor_id")] = t
    ins: list[tuple[int, TensorInfo]] = []
    outs: list[tuple[int, TensorInfo]] = []
    for g in meta.get("graph") or []:
        if not isinstance(g, dict) or g.get("left") not in ("input", "output"):
            continue
        t = tensors.get(g.get("right_tensor_id"))
        if t is None:
            continue
        size = t.get("size")
        if not isinstance(size, list) or not all(isinstance(s, int) for s in size):
            raise _err(source, "metadata JSON has a tensor without an integer shape")
        dt = t.get("dtype") if isinstance(t.get("dtype"), dict) else {}
        info = TensorInfo(name=str(t.get("url", "")), shape=list(size),
                          dtype=str(dt.get("vx_type") or "unknown"))
        order = g.get("left_tensor_id") if isinstance(g.get("left_tensor_id"), int) else 0
        (ins if g["left"] == "input" else outs).append((order, info))
    ins.sort(key=lambda p: p[0])
    outs.sort(key=lambda p: p[0])
    return [i for _, i in ins], [o for _, o in outs]


def parse_buffer(buf, size: int, source: str = "<buffer>",
                 expect_target: str | None = None) -> RknnContainer:
    """Parse an .rknn held in ``buf`` (bytes or mmap of ``size`` bytes)."""
    if size < 4 or bytes(buf[:4]) != MAGIC:
        head = bytes(buf[:min(size, 8)])
        raise _err(source, f"not an .rknn file (starts with {head!r}, expected {MAGIC!r})")
    if size < HEADER_SIZE:
        raise _err(source, f"truncated .rknn: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    fmt, model_len = struct.unpack_from("<QQ", buf, 8)
    if fmt not in KNOWN_FORMATS:
        raise _err(source, f"unsupported .rknn container format {fmt:#x} (known: 6, 0x1004); "
                           "corrupt, or written by a toolkit this reader does not know")
    json_at = HEADER_SIZE + model_len
    if json_at + 8 > size:
        raise _err(source, f"truncated or corrupt .rknn: header says a {model_len}-byte model at offset "
                           f"64, but the file has {size} bytes; rebuild or re-copy it")
    (json_len,) = struct.unpack_from("<Q", buf, json_at)
    expected = json_at + 8 + json_len
    if expected != size:
        what = "truncated" if expected > size else "has trailing bytes or a corrupt header"
        raise _err(source, f"corrupt .rknn ({what}): header and JSON length add up to {expected} bytes, "
                           f"the file has {size}; rebuild or re-copy it")
    if json_len > MAX_JSON_BYTES:
        raise _err(source, f"corrupt .rknn: metadata JSON of {json_len} bytes")
    raw = bytes(buf[json_at + 8:expected])
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _err(source, f"corrupt .rknn: metadata JSON does not parse ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise _err(source, "corrupt .rknn: metadata JSON is not an object")
    targets = meta.get("target_platform")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise _err(source, "corrupt .rknn: metadata has no target_platform list")
    version = meta.get("version")
    inputs, outputs = _io_from_json(meta, source)
    c = RknnContainer(
        path=source, file_size=size, magic=MAGIC.decode(), format=fmt,
        format_name=KNOWN_FORMATS[fmt], model_len=model_len, json_len=json_len, metadata=meta,
        target_platform=[t.lower() for t in targets],
        toolkit_version=str(version) if version is not None else None,
        inputs=inputs, outputs=outputs,
    )
    if fmt == FORMAT_FLATBUFFER:
        _read_blob(c, buf, model_len)
    else:
        c.node_error = "mini models are not parsed beyond the header and JSON"
    if c.custom_string:
        _read_custom(c)
    if expect_target is not None:
        want = expect_target.lower()
        if want not in c.target_platform:
            built = ", ".join(c.target_platform) or "no chip"
            raise _err(source, f"built for {built}, not {want}: a .rknn only loads on the chip it was "
                               f"built for; rebuild with --target {want}")
    return c


def _check_root(fb: Fb, buf) -> int:
    """The blob's FlatBuffer frame, which any schema has: the ``RKNN`` file identifier, a root
    offset inside the blob and 4-aligned (a table starts with an int32), and a root vtable whose
    table and field offsets stay inside the blob.  A file that fails here is damaged (one flipped
    byte at offset 64 or 68 did it), not of an unknown schema, so it is refused: the runtime
    would not load it either.  Returns the root table's offset."""
    if bytes(buf[HEADER_SIZE + 4:HEADER_SIZE + 8]) != MAGIC:
        raise FbError("lacks the RKNN flatbuffer identifier (bytes 68-71)")
    root = fb.root()
    if root % 4 or not 8 <= root < fb.len:
        raise FbError(f"has its root table at {root}, not a 4-aligned offset inside its {fb.len} bytes")
    vtable = root - fb.i32(root)
    vlen, tlen = fb.u16(vtable), fb.u16(vtable + 2)
    if vlen < 4 or vlen % 2 or tlen < 4 or root + tlen > fb.len:
        raise FbError("has a root table whose vtable does not fit the blob")
    for i in range((vlen - 4) // 2):
        if fb.u16(vtable + 4 + 2 * i) >= tlen:
            raise FbError("has a root table whose fields lie outside it")
    return root


def _read_blob(c: RknnContainer, buf, model_len: int) -> None:
    fb = Fb(buf, HEADER_SIZE, model_len)
    try:
        root = _check_root(fb, buf)
    except (FbError, struct.error) as exc:
        raise _err(c.path, f"corrupt .rknn: the model blob {exc}; rebuild or re-copy it") from None
    try:
        c.compiler_version = fb.string(root, _F_VERSION, 4096)
        c.source_framework = fb.string(root, _F_FRAMEWORK, 4096)
        custom = fb.string(root, _F_CUSTOM)
        c.custom_string = custom if custom else None
        io_types = []
        for idx in (_F_IN_DTYPES, _F_OUT_DTYPES):
            io_types.append(_json_obj(fb.string(root, idx)) or {})
        for infos, types in zip((c.inputs, c.outputs), io_types):
            for t in infos:
                d = types.get(t.name)
                if isinstance(d, dict):
                    t.dtype = str(d.get("dtype") or t.dtype)
                    t.layout = str(d["layout"]) if d.get("layout") else None
        attrs_text = fb.string(root, _F_ATTRS)
        attrs = _literal(attrs_text) if attrs_text else None
        if isinstance(attrs, dict) and isinstance(attrs.get("attrs"), dict):
            for t in c.inputs + c.outputs:
                a = attrs["attrs"].get(t.name)
                if isinstance(a, dict) and a.get("dtype"):
                    t.model_dtype = str(a["dtype"])
        nodes: list[NodeInfo] = []
        for graph in fb.table_vector(root, _F_GRAPHS):
            for node in fb.table_vector(graph, 1):
                byte = fb.scalar_u8(node, 3, 0)
                nodes.append(NodeInfo(index=len(nodes), op_type=fb.string(node, 1, 4096) or "",
                                      full_name=fb.string(node, 2, 65536) or "",
                                      target=NODE_TARGETS.get(byte, f"?{byte}")))
        c.nodes = nodes
    except (FbError, struct.error, IndexError, ValueError) as exc:
        c.nodes = None
        c.node_error = f"model blob not understood: {exc}"


def _read_custom(c: RknnContainer) -> None:
    try:
        value = json.loads(c.custom_string)
    except (ValueError, RecursionError):
        return
    c.custom_json = value
    kind = KINDS.get(value.get("format")) if isinstance(value, dict) else None
    if kind is not None:
        try:
            c.contract = kind.from_dict(value)
        except RkspeechError as exc:
            c.contract_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a hostile contract must not crash the reader
            c.contract_error = f"{kind.KIND} contract is malformed: {type(exc).__name__}"


def read_container(path: str | os.PathLike, expect_target: str | None = None) -> RknnContainer:
    """Read and validate an .rknn file; raise RkspeechError with one line on any problem."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < HEADER_SIZE:
                return _safe_parse(f.read(), size, source, expect_target)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _safe_parse(mm, size, source, expect_target)
    except FileNotFoundError:
        raise RkspeechError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise RkspeechError(f"{source}: is a directory, expected an .rknn file") from None
    except PermissionError:
        raise RkspeechError(f"{source}: permission denied") from None
    except (OSError, ValueError) as exc:
        raise RkspeechError(f"{source}: cannot read ({exc})") from None


def _safe_parse(buf, size: int, source: str, expect_target: str | None) -> RknnContainer:
    try:
        return parse_buffer(buf, size, source, expect_target)
    except RkspeechError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, TypeError, AttributeError, KeyError,
            MemoryError, RecursionError) as exc:
        raise RkspeechError(f"{source}: corrupt .rknn ({type(exc).__name__}: {exc})"[:300]) from None


def parse_bytes(data: bytes, source: str = "<bytes>", expect_target: str | None = None) -> RknnContainer:
    """Parse an in-memory .rknn (used by tests and the fuzzer)."""
    return _safe_parse(data, len(data), source, expect_target)
