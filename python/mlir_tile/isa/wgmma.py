"""wgmma's operands from shared tiles' layouts (pure Python; issue 39): the shared-memory matrix descriptor
that makes `wgmma.mma_async` read an operand tile exactly where its layout puts each element, or why none does.

A descriptor (PTX ISA, "Matrix Descriptor Format") is 64 bits: the start address (bits 0-13), the leading
dimension byte offset LBO (16-29) and the stride dimension byte offset SBO (32-45), each in 16-byte units,
the base offset (49-51, 0 here: tiles start on their swizzle's repeat) and the swizzle mode (62-63: 0 none,
1 128-byte, 2 64-byte, 3 32-byte). The instruction reads an operand of `rows` (M of A, N of B) x `columns`
(its K: 16 elements of 16 bits, 32 of 8 bits, 32 bytes either way) through one of the canonical layouts, in
bytes from the start (e = element bytes, t = 16 / e elements in 16 bytes, W = the swizzle's bytes), then the
swizzle `Sw<B,4,3>` applies to the shared address (so a tile on its repeat, `tma.ALIGNMENT`, reads as TMA
wrote it, and an operand inside one, e.g. a later K step, is its start plus its offset):

    K-major, none:   (i % 8) * 16 + (i / 8) * SBO + (j / t) * LBO + (j % t) * e      (i: M/N, j: K)
    K-major, W:      (i % 8) * W  + (i / 8) * SBO + j * e                            (LBO unused)
    MN-major, none:  (i % t) * e  + (i / t) * SBO + (j % 8) * 16 + (j / 8) * LBO
    MN-major, W:     (i % (W/e)) * e + (i / (W/e)) * LBO + (j % 8) * W + (j / 8) * SBO

CuTe's GMMA layout atoms are these (`make_gmma_desc`): e.g. K-major 128-byte `Sw<3,4,3> o (8,64):(64,1)` on
16-bit elements. `descriptor_for` derives the fields from a tile's layout at an operand's origin and checks
every element of the operand against them: a tile whose layout no descriptor reads is a `WgmmaMismatch` naming
the element where they part. The reference model (`reference.wgmma_operand`) decodes descriptors from the ISA's
text independently; the GPU bundle (`testing/wgmma_operands`) compares it with the H200.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir_tile.algebra.layout import Layout, as_layout
from mlir_tile.isa.tma import swizzle_bytes_of, swizzle_on_elements

MODE_BITS = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle bytes -> the descriptor's bits 62-63
FIELD_BYTES = 1 << 18  # start, LBO and SBO are 14-bit counts of 16 bytes
INSTRUCTION_K_BYTES = 32  # the K one wgmma reads: 16 elements of 16 bits, 32 of 8 bits
MAJORS = ("K", "MN")


class WgmmaMismatch(ValueError):
    """No descriptor reads the operand as its tile's layout lays it out: the reason, naming the element."""


@dataclass(frozen=True)
class Descriptor:
    """The fields of a matrix descriptor other than its start (which the kernel adds, an address)."""
    major: str  # "K" (K contiguous: A M x K row-major, B N x K) or "MN"
    swizzle_bytes: int  # 0, 32, 64, 128
    leading: int  # LBO, bytes
    stride: int  # SBO, bytes

    def __post_init__(self) -> None:
        if self.major not in MAJORS:
            raise ValueError(f"wgmma descriptor: major is one of {MAJORS}, got {self.major!r}")
        if self.swizzle_bytes not in MODE_BITS:
            raise ValueError(f"wgmma descriptor: swizzle of {sorted(MODE_BITS)} bytes, got {self.swizzle_bytes!r}")
        for name, value in (("leading byte offset", self.leading), ("stride byte offset", self.stride)):
            if not isinstance(value, int) or value % 16 or not 0 <= value < FIELD_BYTES:
                raise ValueError(f"wgmma descriptor: the {name} is a multiple of 16 bytes below {FIELD_BYTES} "
                                 f"(a 14-bit count of 16 bytes), got {value!r}")

    def bits(self, start: int = 0) -> int:
        """The 64-bit descriptor with `start` (a shared-memory byte address, a multiple of 16) in it."""
        if start % 16 or not 0 <= start < FIELD_BYTES:
            raise ValueError(f"wgmma descriptor: a start address is a multiple of 16 below {FIELD_BYTES}, got {start}")
        return ((start >> 4) | (self.leading >> 4) << 16 | (self.stride >> 4) << 32
                | MODE_BITS[self.swizzle_bytes] << 62)

    def offset(self, row: int, column: int, element_bits: int) -> int:
        """The byte offset from the start, before the swizzle, of the operand's element (row: M or N, column:
        K) in the canonical layout of this descriptor's major and swizzle mode."""
        e = element_bits // 8
        t, width = 16 // e, self.swizzle_bytes
        if self.major == "K":
            if not width:
                return row % 8 * 16 + row // 8 * self.stride + column // t * self.leading + column % t * e
            return row % 8 * width + row // 8 * self.stride + column * e
        if not width:
            return row % t * e + row // t * self.stride + column % 8 * 16 + column // 8 * self.leading
        across = width // e
        return row % across * e + row // across * self.leading + column % 8 * width + column // 8 * self.stride

    def layout(self, rows: int, columns: int, element_bits: int) -> Layout:
        """The canonical layout as CuTe writes it, (rows, columns) -> element offset from the start."""
        e = element_bits // 8
        t, width, swizzle = 16 // e, self.swizzle_bytes, swizzle_on_elements(self.swizzle_bytes, element_bits)
        lead, stride = self.leading // e, self.stride // e
        if self.major == "K" and not width:
            shape, strides = ((8, rows // 8), (t, columns // t)), ((t, stride), (1, lead))
        elif self.major == "K":
            shape, strides = ((8, rows // 8), columns), ((width // e, stride), 1)
        elif not width:
            shape, strides = ((t, rows // t), (8, columns // 8)), ((1, stride), (t, lead))
        else:
            shape, strides = ((width // e, rows // (width // e)), (8, columns // 8)), ((1, lead), (width // e, stride))
        return Layout(_ones_out(shape), _ones_out(strides, shape), swizzle)


def _ones_out(item, shape=None):
    """Drop modes of extent 1 (a canonical layout's unused level), keeping the tuple's form CuTe prints."""
    shape = item if shape is None else shape
    kept = []
    for mode, extent in zip(item, shape):
        if isinstance(mode, tuple):
            inner = [m for m, x in zip(mode, extent) if x > 1] or [mode[0]]
            kept.append(inner[0] if len(inner) == 1 else tuple(inner))
        else:
            kept.append(mode)
    return tuple(kept)


@functools.lru_cache(maxsize=None)  # (proven element by element: each k step of each kernel asks again)
def descriptor_for(layout: Layout | str, element_bits: int, rows: int, columns: int,
                   origin: tuple[int, int] = (0, 0)) -> tuple[Descriptor, int]:
    """The descriptor and start (bytes from the tile's start, before the swizzle) with which wgmma reads the
    `rows` x `columns` operand at `origin` (row, column) of a (rows, columns) tile laid out by `layout` (element
    offsets from a start on the swizzle's repeat). WgmmaMismatch where no descriptor does, naming the element."""
    layout = as_layout(layout)
    if element_bits not in (8, 16, 32):
        raise WgmmaMismatch(f"wgmma reads elements of 8, 16 or 32 bits, got {element_bits}")
    e = element_bits // 8
    if layout.rank != 2:
        raise WgmmaMismatch(f"a wgmma operand tile is (M or N, K): the layout {layout} has {layout.rank} modes")
    (row0, column0), (tile_rows, tile_columns) = origin, layout.sizes
    if rows % 8 or columns * e != INSTRUCTION_K_BYTES or row0 + rows > tile_rows or column0 + columns > tile_columns:
        raise WgmmaMismatch(f"a wgmma operand is a multiple of 8 rows by {INSTRUCTION_K_BYTES} bytes of K inside its "
                            f"tile: {rows} x {columns} elements of {element_bits} bits at {origin} of a {tile_rows} x "
                            f"{tile_columns} tile")
    swizzle_bytes = swizzle_bytes_of(layout.swizzle, element_bits)
    if swizzle_bytes is None:
        raise WgmmaMismatch(f"the tile's swizzle {layout.swizzle} is none of wgmma's modes (Sw<B,4,3> on bytes: "
                            f"{', '.join(str(swizzle_on_elements(w, element_bits)) for w in (32, 64, 128))} on "
                            f"{element_bits}-bit elements)")

    def byte(i: int, j: int) -> int:
        return layout.linear_offset(row0 + i, column0 + j) * e

    start, t = byte(0, 0), 16 // e
    if byte(0, 1) - start == e:
        major, along_rows, along_columns = "K", 8, t
    elif byte(1, 0) - start == e:
        major, along_rows, along_columns = "MN", (swizzle_bytes or 16) // e, 8
    else:
        raise WgmmaMismatch(f"wgmma reads runs of 16 bytes along K or along M/N, but {layout} puts neither "
                            f"element (0, 1) nor (1, 0) of the operand at {origin} next to element (0, 0)")
    if start % 16:
        raise WgmmaMismatch(f"the operand at {origin} starts at byte {start} of its tile; a descriptor's start is a "
                            f"multiple of 16 bytes")
    # the fields: the distance to the next group along rows, and along columns (0 where the operand has none)
    next_row = byte(along_rows, 0) - start if rows > along_rows else 0
    next_column = byte(0, along_columns) - start if columns > along_columns else 0
    if major == "K":
        fields = (next_column if not swizzle_bytes else 16, next_row)  # (LBO, SBO)
    else:
        fields = (next_column, next_row) if not swizzle_bytes else (next_row, next_column)
    try:
        descriptor = Descriptor(major, swizzle_bytes, *fields)
    except ValueError as error:
        raise WgmmaMismatch(f"{layout} at {origin}: {error}") from None
    for i in range(rows):
        for j in range(columns):
            if start + descriptor.offset(i, j, element_bits) != byte(i, j):
                raise WgmmaMismatch(
                    f"no wgmma descriptor reads {layout} ({element_bits}-bit elements) at {origin}: the nearest, "
                    f"{major}-major with {swizzle_bytes or 'no'}{'-byte' if swizzle_bytes else ''} swizzle, LBO "
                    f"{descriptor.leading} and SBO {descriptor.stride}, reads operand element ({i}, {j}) at byte "
                    f"{start + descriptor.offset(i, j, element_bits)} of the tile, the layout puts it at {byte(i, j)}; "
                    f"wgmma's canonical layout here is {descriptor.layout(rows, columns, element_bits)}")
    return descriptor, start
