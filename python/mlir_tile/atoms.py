"""MMA atoms as values (CuTe's MMA_Atom, pure Python): one mma.sync instruction's shape, element types and, per
operand, its thread-value layout: (lane, value) -> the (row, column) of the operand's tile that the value holds.
The tiled mma (`mlir_tile.tiled`) spreads an atom over a warp grid and blocks, the builder's `Kernel.mma`
issues it, and the tests check every lane and value of each layout against the PTX ISA's fragment tables
(`fragments.fragment_element`): a new mma instruction is a new atom.

Lanes are (4, 8): (lane in its quad, quad). Values: A's (element in its register, register), ordered as the
instruction takes them (a0, a1, ...); B's the same for one n8 block's b0, b1 (k down the rows, n across); C's
the accumulators c0..c3 as (column + 1, row + 8). A is M x K, B is K x N, C is M x N.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from mlir_tile.layout import Layout


class ThreadValues(NamedTuple):
    """A thread-value layout split by coordinate (CuTe's TV layout composed with the tile's identity tensor):
    (thread, value) -> row and -> column."""
    rows: Layout
    columns: Layout

    def coordinate(self, thread: int, value: int) -> tuple[int, int]:
        return self.rows.offset(thread, value), self.columns.offset(thread, value)


@dataclass(frozen=True)
class MmaAtom:
    name: str  # e.g. "m16n8k16"
    shape: tuple[int, int, int]  # (M, N, K)
    elements: tuple[str, ...]  # the multiplicands' element types it takes
    accumulator: str  # "f32" or "s32"
    a: ThreadValues
    b: ThreadValues
    c: ThreadValues

    @property
    def per_register(self) -> int:
        """Multiplicand elements a 32-bit register holds."""
        return 2 if self.accumulator == "f32" else 4

    @property
    def registers(self) -> tuple[int, int, int]:
        """32-bit registers a lane holds of A, B and C."""
        return (self.a.rows.sizes[1] // self.per_register, self.b.rows.sizes[1] // self.per_register,
                self.c.rows.sizes[1])

    def fragment(self, operand: str, lane: int, register: int, part: int = 0) -> tuple[int, int]:
        """(row, column) of `part` of `register` of `operand` ("a", "b", "c") in `lane`."""
        layout = {"a": self.a, "b": self.b, "c": self.c}[operand]
        return layout.coordinate(lane, part + (1 if operand == "c" else self.per_register) * register)


def _thread_values(text_rows: str, text_columns: str) -> ThreadValues:
    return ThreadValues(Layout.parse(text_rows), Layout.parse(text_columns))


# The accumulators of both: c0, c1 at (quad, 2 lane + 0/1), c2, c3 eight rows further
_C = _thread_values("((4,8),(2,2)):((0,1),(0,8))", "((4,8),(2,2)):((2,0),(1,0))")

# f16/bf16: a register holds two elements (part); A's a_i at +8 rows if i & 1, +8 columns if i >> 1; b_i at +8 k
MMA_M16N8K16 = MmaAtom(
    "m16n8k16", (16, 8, 16), ("f16", "bf16"), "f32",
    a=_thread_values("((4,8),(2,2,2)):((0,1),(0,8,0))", "((4,8),(2,2,2)):((2,0),(1,0,8))"),
    b=_thread_values("((4,8),(2,2)):((2,0),(1,8))", "((4,8),(2,2)):((0,1),(0,0))"),
    c=_C)

# s8/u8: a register holds four bytes; A's a_i at +8 rows if i & 1, +16 columns if i >> 1; b_i at +16 k
MMA_M16N8K32 = MmaAtom(
    "m16n8k32", (16, 8, 32), ("s8", "u8"), "s32",
    a=_thread_values("((4,8),(4,2,2)):((0,1),(0,8,0))", "((4,8),(4,2,2)):((4,0),(1,0,16))"),
    b=_thread_values("((4,8),(4,2)):((4,0),(1,16))", "((4,8),(4,2)):((0,1),(0,0))"),
    c=_C)

ATOMS = (MMA_M16N8K16, MMA_M16N8K32)
