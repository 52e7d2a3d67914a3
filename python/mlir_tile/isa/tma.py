"""TMA boxes from shared tiles' layouts (pure Python; issue 39's first part, issue 57's rules): which tensor-map
swizzle mode and box write a shared tile exactly as its consumers read it, or why none does; and the rules of
the hardware that a box, a store's map and a store's coordinates must keep, each a named unit with its tag.

A tiled TMA load writes a box of `rows` x `columns` elements into shared memory row after row, the byte
address of each 16-byte chunk then swizzled by the tensor map's mode: CU_TENSOR_MAP_SWIZZLE_32B / 64B / 128B
xor the address's bits [4, 4 + B) with its bits [7, 7 + B), B = 1, 2, 3: CuTe's `Sw<B,4,3>` on bytes
(`Sw<B,3,3>` on 16-bit elements, `Sw<B,2,3>` on 32-bit words). Rows lie `Box.pitch_bytes` apart:

- `[tma-swizzle-span]` (`pitch_bytes`): a swizzled box's rows are a whole swizzle span apart (32, 64 or 128
  bytes) even where a row holds fewer bytes, the rest of each span untouched (seen on the H100: a 16-bit box
  of 8 columns with the 32-byte swizzle puts row r at 32 r; CUDA's programming guide: "if the swizzle width
  exceeds the inner dimension, ensure that the shared memory is allocated to accommodate the full swizzle
  width"). Its shared image is `shared_bytes`, its mbarrier transactions only its elements' `bytes`.
- `[tma-store-chunks]` (`check_store_rows`): a store clips a row at the matrix's last column in whole 16-byte
  chunks, so a matrix whose rows are not whole chunks gets the elements past its last column that share its
  last chunk written too (seen on the H100); loads clip exactly.
- `[tma-store-coordinate]` (`check_store_coordinates`): a store whose start coordinate is negative in any
  dimension is an illegal instruction (PTX ISA, tensor copies from shared to global: the starting coordinates
  are non-negative); a load takes negative coordinates and reads zeros there.

The pattern repeats every 2^B x 128 bytes, so a box keeps it only from a start aligned to that (`ALIGNMENT`).
`box_for` is what the builder asks of a tile's layout before issuing a TMA load or store of it; the reference
model's `tma_box_write` and `tma_box_read` (written from the hardware's rules, bit by bit) are the tests' oracle.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from mlir_tile.algebra.layout import Layout, Swizzle, as_layout

SWIZZLE_BYTES = (0, 32, 64, 128)  # the modes: none, 32B, 64B, 128B
MAX_BOX = 256  # elements along each dimension of a box
# A box's innermost coordinate times the element size: a multiple of this, or the load is an illegal
# instruction (measured on the H200, every swizzle mode, interior and edge boxes alike; rows are free)
INNER_COORDINATE_BYTES = 16
ALIGNMENT = {0: 128, 32: 256, 64: 512, 128: 1024}  # bytes a box's shared start needs (a swizzle's repeat), per mode


class TmaMismatch(ValueError):
    """No TMA box writes the layout: the reason, naming the element where the closest mode differs."""


@dataclass(frozen=True)
class Box:
    rows: int
    columns: int
    element_bits: int
    swizzle_bytes: int  # one of SWIZZLE_BYTES

    def __post_init__(self) -> None:
        if self.element_bits not in (8, 16, 32, 64):
            raise ValueError(f"TMA box: elements of 8, 16, 32 or 64 bits, got {self.element_bits}")
        if not (1 <= self.rows <= MAX_BOX and 1 <= self.columns <= MAX_BOX):
            raise ValueError(f"TMA box: 1 to {MAX_BOX} elements along each dimension, got {self.rows} x {self.columns}")
        if self.swizzle_bytes not in SWIZZLE_BYTES:
            raise ValueError(f"TMA box: swizzle of {SWIZZLE_BYTES} bytes, got {self.swizzle_bytes}")
        if self.row_bytes % 16:
            raise ValueError(f"TMA box: a row of {self.row_bytes} bytes; a box's rows are multiples of 16 bytes")
        if self.swizzle_bytes and self.row_bytes > self.swizzle_bytes:
            raise ValueError(f"TMA box: a row of {self.row_bytes} bytes is wider than the {self.swizzle_bytes}-byte "
                             f"swizzle's span")
        if self.swizzle_bytes and self.shared_bytes % ALIGNMENT[self.swizzle_bytes]:
            raise ValueError(f"TMA box: {self.rows} rows {self.pitch_bytes} bytes apart are not whole "
                             f"{ALIGNMENT[self.swizzle_bytes]}-byte repeats of the {self.swizzle_bytes}-byte swizzle "
                             f"(8 rows a repeat), the only boxes modelled")

    @property
    def row_bytes(self) -> int:
        """A row's elements' bytes (what global memory gives and the mbarrier counts)."""
        return self.columns * self.element_bits // 8

    @property
    def pitch_bytes(self) -> int:
        """[tma-swizzle-span] How far apart the box's rows lie in shared memory: a swizzled box's rows a whole
        span apart (the rest of a narrower row's span untouched), an unswizzled box's rows back to back."""
        return max(self.row_bytes, self.swizzle_bytes)

    @property
    def bytes(self) -> int:
        """The bytes one copy of the box moves: an mbarrier's transactions (`expect_bytes`), padding not counted."""
        return self.rows * self.row_bytes

    @property
    def shared_bytes(self) -> int:
        """The bytes of shared memory the box's image spans from its start (rows `pitch_bytes` apart)."""
        return self.rows * self.pitch_bytes

    @property
    def layout(self) -> Layout:
        """(row, column) -> the element offset the box writes it to, from a start aligned to `ALIGNMENT`."""
        return Layout((self.rows, self.columns), (self.pitch_bytes * 8 // self.element_bits, 1),
                      swizzle_on_elements(self.swizzle_bytes, self.element_bits))


def swizzle_on_elements(swizzle_bytes: int, element_bits: int) -> Swizzle | None:
    """A swizzle mode (`SWIZZLE_BYTES`) as CuTe's swizzle of element offsets: `Sw<B,4,3>` on bytes is
    `Sw<B,4-log2(element bytes),3>` on elements (`Sw<3,3,3>` for 128 bytes of 16-bit elements); None unswizzled.
    TMA's boxes and wgmma's descriptors swizzle alike."""
    if not swizzle_bytes:
        return None
    unit = {8: 4, 16: 3, 32: 2, 64: 1}[element_bits]  # log2 of the elements in 16 bytes
    return Swizzle(SWIZZLE_BYTES.index(swizzle_bytes), unit, 3)


def swizzle_bytes_of(swizzle: Swizzle | None, element_bits: int) -> int | None:
    """The swizzle mode whose `swizzle_on_elements` is `swizzle` (0 for none), or None where no mode is."""
    if swizzle is not None and not swizzle.bits:  # Sw<0,M,S> moves nothing
        swizzle = None
    return next((mode for mode in SWIZZLE_BYTES if swizzle_on_elements(mode, element_bits) == swizzle), None)


def box_for(layout: Layout | str, element_bits: int) -> Box:
    """The box (swizzle mode and extents) whose TMA load writes a (rows, columns) shared tile exactly where
    `layout` puts each element (offsets in elements of `element_bits`); TmaMismatch naming the first element
    where the nearest candidate differs (the mode of the layout's own swizzle, else the widest the row allows)."""
    return _box_for(as_layout(layout), element_bits)


@functools.lru_cache(maxsize=None)  # (proven element by element: a kernel's tiles ask again, kernels of a shape too)
def _box_for(layout: Layout, element_bits: int) -> Box:
    if layout.rank != 2:
        raise TmaMismatch(f"a TMA box is (rows, columns): the layout {layout} has {layout.rank} modes")
    rows, columns = layout.sizes
    candidates = []
    for swizzle_bytes in reversed(SWIZZLE_BYTES):
        try:
            candidates.append(Box(rows, columns, element_bits, swizzle_bytes))
        except ValueError as error:
            reason = str(error)
    if not candidates:
        raise TmaMismatch(f"no TMA box is {rows} x {columns} elements of {element_bits} bits: {reason}")
    own = swizzle_bytes_of(layout.swizzle, element_bits)
    candidates.sort(key=lambda box: box.swizzle_bytes != own)  # (stable: the rest widest first)
    differences = []
    for box in candidates:
        written = box.layout
        first = next(((r, c) for r in range(rows) for c in range(columns)
                      if written.offset(r, c) != layout.offset(r, c)), None)
        if first is None:
            return box
        differences.append((box, first, written.offset(*first)))
    box, (r, c), offset = differences[0]
    modes = ", ".join(f"{b.swizzle_bytes}B" if b.swizzle_bytes else "none" for b, _, _ in differences)
    narrow = (f"; [tma-swizzle-span] a box's rows of {box.row_bytes} bytes lie a whole {box.swizzle_bytes}-byte span "
              f"apart under its swizzle: give the tile rows {box.pitch_bytes * 8 // element_bits} elements apart "
              f"({box.layout}), or take the unswizzled box" if box.pitch_bytes > box.row_bytes else "")
    raise TmaMismatch(f"no TMA box writes {layout} ({rows} x {columns} elements of {element_bits} bits, rows of "
                      f"{box.row_bytes} bytes; modes tried: {modes}): with the {box.swizzle_bytes or 'no'}"
                      f"{'-byte' if box.swizzle_bytes else ''} swizzle element ({r}, {c}) lands at offset {offset}, "
                      f"the layout puts it at {layout.offset(r, c)}; a TMA tile is rows of the box's width, "
                      f"swizzled as Sw<B,4,3> on bytes (B = 1, 2, 3 for 32, 64, 128 bytes){narrow}")


def column_boxes(layout: Layout | str, element_bits: int, columns: int) -> list[tuple[int, Box]]:
    """A (rows, columns) tile as TMA boxes of `columns` columns side by side (a 128-byte-swizzled tile wider
    than 128 bytes is such boxes): per box, (its first element's offset in the tile, the box that writes or
    reads it), each proven element by element (`box_for` of the tile's layout at the box, relative to that
    offset); TmaMismatch naming the box and the element where one is not a box."""
    return list(_column_boxes(as_layout(layout), element_bits, columns))


@functools.lru_cache(maxsize=None)  # (as _box_for)
def _column_boxes(layout: Layout, element_bits: int, columns: int) -> tuple[tuple[int, Box], ...]:
    rows, width = layout.sizes
    if columns < 1 or width % columns:
        raise TmaMismatch(f"a tile {width} columns wide is no whole number of boxes {columns} columns wide")
    boxes = []
    for first in range(0, width, columns):
        start = layout.offset(0, first)
        shifted = [[layout.offset(r, first + c) - start for c in range(columns)] for r in range(rows)]
        mode = swizzle_bytes_of(layout.swizzle, element_bits)
        try:
            box = Box(rows, columns, element_bits, 0 if mode is None else mode)
        except ValueError as error:
            raise TmaMismatch(f"the columns {first} to {first + columns - 1} of {layout} are no TMA box: "
                              f"{error}") from None
        box_layout = box.layout  # (one Layout: each `box.layout` is a new one, its offset tables built again)
        if start % (ALIGNMENT[box.swizzle_bytes] * 8 // element_bits) or any(
                shifted[r][c] != box_layout.offset(r, c) for r in range(rows) for c in range(columns)):
            wrong = next(((r, c) for r in range(rows) for c in range(columns)
                          if shifted[r][c] != box_layout.offset(r, c)), (0, 0))
            raise TmaMismatch(f"the columns {first} to {first + columns - 1} of {layout} are no TMA box: element "
                              f"{wrong} lies {shifted[wrong[0]][wrong[1]]} elements past the box's first (at {start}), "
                              f"the {box.swizzle_bytes or 'un'}swizzled box puts it at {box_layout.offset(*wrong)}")
        boxes.append((start, box))
    return tuple(boxes)


def boxes_at(layout: Layout | str, element_bits: int, columns: int) -> list[tuple[int, int, Box]]:
    """A tile's TMA boxes of `columns` columns (`column_boxes`): per box, (its first element in the tile, its
    first column, the box), the column read off the layout at that element."""
    layout = as_layout(layout)
    first_columns = {layout.offset(0, column): column for column in range(layout.sizes[1])}
    return [(offset, first_columns[offset], box) for offset, box in column_boxes(layout, element_bits, columns)]


def check_store_rows(columns: int, element_bits: int) -> None:
    """[tma-store-chunks] A TMA store clips each row at the matrix's last column in whole 16-byte chunks: the
    elements past it that share its last chunk are written too. ValueError where `columns` elements of
    `element_bits` are not whole chunks (a store of a box over the last column would write past the matrix,
    into a padded pitch or the next columns of the tensor it is a view of)."""
    row_bytes = columns * element_bits // 8
    if columns * element_bits % (8 * 16):
        chunk = 128 // element_bits
        first, last = columns, (columns // chunk + 1) * chunk - 1
        raise ValueError(f"[tma-store-chunks] a TMA store writes a row's last 16-byte chunk whole: rows of {columns} "
                         f"elements ({row_bytes} bytes) would have the elements {first} to {last} past the matrix "
                         f"written too; store to a matrix whose rows are multiples of 16 bytes ({chunk} elements), "
                         f"or store the last columns without TMA")


def check_store_coordinates(coordinates: Sequence[int | None]) -> None:
    """[tma-store-coordinate] A TMA store's start coordinates are non-negative (a negative one is an illegal
    instruction, which loses the CUDA context; loads take them). ValueError naming the first coordinate known
    to be negative (None: not known here, the kernel's to keep)."""
    for axis, value in enumerate(coordinates):
        if value is not None and value < 0:
            raise ValueError(f"[tma-store-coordinate] a TMA store's coordinate {axis} (innermost first) is {value}: "
                             f"a store starting at a negative coordinate is an illegal instruction (a load would read "
                             f"zeros there); store the box from its first row and column inside the matrix")
