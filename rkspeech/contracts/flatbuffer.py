"""A minimal bounds-checked FlatBuffer accessor: what ``contracts.rknn_file`` reads an .rknn's
blob with (no flatbuffers package: the toolkit's schema is not published; every read is checked
against the blob's length, so a damaged file is an error, never a crash)."""

from __future__ import annotations

import struct


class FbError(Exception):
    pass


class Fb:
    """Minimal bounds-checked FlatBuffer accessor over a bytes-like object."""

    def __init__(self, buf, start: int, length: int):
        self.buf, self.start, self.len = buf, start, length

    def _chk(self, off: int, size: int) -> int:
        if off < 0 or size < 0 or off + size > self.len:
            raise FbError(f"offset {off}+{size} outside the {self.len}-byte model blob")
        return self.start + off

    def u8(self, off: int) -> int:
        return self.buf[self._chk(off, 1)]

    def u16(self, off: int) -> int:
        return struct.unpack_from("<H", self.buf, self._chk(off, 2))[0]

    def u32(self, off: int) -> int:
        return struct.unpack_from("<I", self.buf, self._chk(off, 4))[0]

    def i32(self, off: int) -> int:
        return struct.unpack_from("<i", self.buf, self._chk(off, 4))[0]

    def root(self) -> int:
        return self.u32(0)

    def field_pos(self, table: int, index: int) -> int | None:
        vtable = table - self.i32(table)
        vlen = self.u16(vtable)
        if vlen < 4 or vlen % 2:
            raise FbError("bad vtable")
        if 4 + 2 * index + 2 > vlen:
            return None
        rel = self.u16(vtable + 4 + 2 * index)
        return table + rel if rel else None

    def deref(self, pos: int) -> int:
        return pos + self.u32(pos)

    def string(self, table: int, index: int, limit: int = 1 << 24) -> str | None:
        pos = self.field_pos(table, index)
        if pos is None:
            return None
        s = self.deref(pos)
        n = self.u32(s)
        if n > limit:
            raise FbError(f"string of {n} bytes")
        at = self._chk(s + 4, n)
        return bytes(self.buf[at:at + n]).decode("utf-8", errors="replace")

    def scalar_u8(self, table: int, index: int, default: int = 0) -> int:
        pos = self.field_pos(table, index)
        return default if pos is None else self.u8(pos)

    def table_vector(self, table: int, index: int) -> list[int]:
        pos = self.field_pos(table, index)
        if pos is None:
            return []
        vec = self.deref(pos)
        n = self.u32(vec)
        self._chk(vec + 4, 4 * n)  # bounds n by the blob size before looping
        return [self.deref(vec + 4 + 4 * i) for i in range(n)]


# ---- the parser --------------------------------------------------------------------------------
