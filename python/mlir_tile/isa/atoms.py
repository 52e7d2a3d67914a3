"""Instructions as values (CuTe's MMA_Atom and Copy_Atom, pure Python), each with its thread-value layouts:
(lane, value) -> the (row, column) of the tile that the value holds.

An MMA atom is one mma.sync: its shape, element types and the layouts of A, B and C. A copy atom is one warp's
ldmatrix or stmatrix of four 8x8 b16 matrices: its opcode, its registers' layout (`REGISTERS_X4`), the order
its matrices take in a 16 x 16 block (`MMA_ORDER`, `NK_ORDER`: what makes the block one mma operand) and the
layout of the block's elements it moves. The tiled mma (`mlir_tile.tiling.tiled`) spreads an MMA atom over a warp
grid and blocks and its operands' copy atoms over the shared tiles, the builder's `Kernel.mma` issues an MMA
atom and `transfer` a tiled copy atom's layouts, and the tests check every lane and value of each layout
against the PTX ISA's fragment tables (`fragments.fragment_element`): a new instruction is a new atom.

Lanes are (4, 8): (lane in its quad, quad). Values: A's (element in its register, register), ordered as the
instruction takes them (a0, a1, ...); B's the same for one n8 block's b0, b1 (k down the rows, n across); C's
the accumulators c0..c3 as (column + 1, row + 8). A is M x K, B is K x N, C is M x N.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from mlir_tile.algebra.layout import Layout, Swizzle, laneid

from mlir_tile.algebra.operations import composition


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


# ----- copy atoms -----
REGISTERS_X4 = Layout((4, 8, 4), (1, 4 @ laneid, 1 @ laneid))  # (matrix, row, word) -> register slot, lane
# A 16x8-word block's x4 coordinates (matrix, row, word) as indices of the block (column-major over its 16 rows
# and 8 words): the order mma.sync takes the four matrices in. MMA_ORDER: matrix i at +8 rows if i & 1, +4
# words if i >> 1 (A, C, and B read with .trans from a K x N tile). NK_ORDER: +4 words (k 8..15) if i & 1, +8
# rows (n 8..15) if i >> 1 (B read from an N x K tile).
MMA_ORDER = Layout.parse("((2,2),8,4):((8,64),1,16)")
NK_ORDER = Layout.parse("((2,2),8,4):((64,8),1,16)")


def block_layout(pitch: int, order: Layout, swizzle: Swizzle | None) -> Layout:
    """The four 8x8 matrices of a 16x16 b16 block (16 rows of 8 words, `pitch` words apart) in `order`, by
    CuTe's composition. The block's start is the memref's offset (a subview at the block); a swizzle applies
    to the offset from the buffer, so a subview of a swizzled tile at any block reads that block."""
    block = composition(Layout((16, 8), (pitch, 1)), order)
    return Layout(block.shape, block.stride, swizzle)


@dataclass(frozen=True)
class CopyAtom:
    opcode: str
    order: Layout  # (matrix, row, word) -> the 16 x 8-word block's index (MMA_ORDER or NK_ORDER)
    values: ThreadValues  # (lane, (part, register)) -> (row, column) of the 16 x 16 block's b16 elements
    registers: Layout = REGISTERS_X4

    def fragment(self, pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
        """(register layout, shared layout) of one 16 x 16 block of a tile whose rows are `pitch` words apart."""
        return self.registers, block_layout(pitch, self.order, swizzle)


# Lane l's register r holds row l / 4, word l % 4 of matrix r (ldmatrix, stmatrix); with .trans, column l / 4
# and rows 2 (l % 4) + part. Matrices in MMA_ORDER: +8 rows if r & 1, +8 columns if r >> 1; NK_ORDER: +8
# columns if r & 1, +8 rows if r >> 1.
_ROWS_FIRST = _thread_values("((4,8),(2,2,2)):((0,1),(0,8,0))", "((4,8),(2,2,2)):((2,0),(1,0,8))")
LDMATRIX_X4 = CopyAtom("ldmatrix.sync.aligned.m8n8.x4.shared.b16", MMA_ORDER, _ROWS_FIRST)
STMATRIX_X4 = CopyAtom("stmatrix.sync.aligned.m8n8.x4.shared.b16", MMA_ORDER, _ROWS_FIRST)
LDMATRIX_X4_TRANS = CopyAtom("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", MMA_ORDER, _thread_values(
    "((4,8),(2,2,2)):((2,0),(1,8,0))", "((4,8),(2,2,2)):((0,1),(0,0,8))"))
LDMATRIX_X4_NK = CopyAtom("ldmatrix.sync.aligned.m8n8.x4.shared.b16", NK_ORDER, _thread_values(
    "((4,8),(2,2,2)):((0,1),(0,0,8))", "((4,8),(2,2,2)):((2,0),(1,8,0))"))
COPY_ATOMS = (LDMATRIX_X4, STMATRIX_X4, LDMATRIX_X4_TRANS, LDMATRIX_X4_NK)


# ----- warpgroup MMA (sm_90a) -----
@dataclass(frozen=True)
class WgmmaAtom:
    """One `wgmma.mma_async.sync.aligned.m64n<N>k<K>` of a warpgroup (128 threads): A (64 x K) and B (N x K)
    read from shared memory through descriptors (`mlir_tile.isa.wgmma`), D (64 x N, f32) in registers, `c` its
    thread-value layout: (thread of the warpgroup, value) -> (row, column)."""
    element: str  # f16, bf16 (K 16) or e4m3, e5m2 (K 32)
    shape: tuple[int, int, int]  # (64, N, K)
    c: ThreadValues
    a: ThreadValues  # A from registers (the RS form): (thread, value) -> (row, k) of the 64 x K operand

    @property
    def name(self) -> str:
        return "m{}n{}k{}".format(*self.shape)

    @property
    def element_bits(self) -> int:
        return WGMMA_ELEMENTS[self.element]

    @property
    def transposable(self) -> bool:
        """Whether A and B may be MN-major (the ISA's imm-trans: 16-bit elements only)."""
        return self.element_bits == 16


WGMMA_ELEMENTS = {"f16": 16, "bf16": 16, "e4m3": 8, "e5m2": 8}
WARPGROUP_THREADS = 128


def wgmma(n: int, element: str = "f16") -> WgmmaAtom:
    """The wgmma atom m64n<n>k<32 bytes> for `element` (N a multiple of 8 from 8 to 256). Warp w of the warpgroup
    holds accumulator rows 16 w .. 16 w + 15; in it, lane l's d[4 j + i] is row l / 4 (+ 8 for i >= 2), column
    8 j + 2 (l % 4) + i % 2 (the mma.sync m16n8 accumulator, once per 8 columns)."""
    if element not in WGMMA_ELEMENTS:
        raise ValueError(f"wgmma: element one of {', '.join(WGMMA_ELEMENTS)}, got {element!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma: N a multiple of 8 from 8 to 256, got {n!r}")
    blocks = n // 8
    c = _thread_values(f"((4,8,4),(2,2,{blocks})):((0,1,16),(0,8,0))", f"((4,8,4),(2,2,{blocks})):((2,0,0),(1,0,8))")
    # A in registers: each warp's 16 rows as mma.sync's A fragment (m16n8k16, or m16n8k32's for 8-bit elements)
    if WGMMA_ELEMENTS[element] == 16:
        a = _thread_values("((4,8,4),(2,2,2)):((0,1,16),(0,8,0))", "((4,8,4),(2,2,2)):((2,0,0),(1,0,8))")
    else:
        a = _thread_values("((4,8,4),(4,2,2)):((0,1,16),(0,8,0))", "((4,8,4),(4,2,2)):((4,0,0),(1,0,16))")
    return WgmmaAtom(element, (64, n, 256 // WGMMA_ELEMENTS[element]), c, a)


@functools.lru_cache(maxsize=None)  # (pure: each kernel's P asks it again)
def a_key_order(accumulating: WgmmaAtom, multiplying: WgmmaAtom):
    """The order in which `multiplying`'s register A operand holds the columns of `accumulating`'s accumulators
    with no data leaving its thread: None where each column keeps its place (16-bit A: a register holds two
    adjacent columns, as an accumulator thread does), else a Layout over N, column j -> A's column (8-bit A: a
    register holds 4 adjacent columns where an accumulator thread holds 2 and 2 eight further, so each thread's
    columns of a row, in order, fill its A values of that row, in order: FlashAttention-3's fp8 P, whose
    partner B (V) must then hold its K in the same order). ValueError where that order is not one permutation
    for every thread, or not a layout."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.operations import coalesce

    (_, n, _), k = accumulating.shape, multiplying.shape[2]
    if n % k:
        raise ValueError(f"accumulators_as_a: N ({n}) is no whole number of {multiplying.name}'s K ({k})")
    order: dict[int, int] = {}
    for thread in range(WARPGROUP_THREADS):
        held: dict[tuple[int, int], list[int]] = {}  # (row, K step) -> this thread's accumulator columns
        for value in range(n // 2):
            row, column = accumulating.c.coordinate(thread, value)
            held.setdefault((row, column // k), []).append(column)
        wanted: dict[tuple[int, int], list[int]] = {}
        for step in range(n // k):
            for value in range(multiplying.a.rows.sizes[1]):
                row, column = multiplying.a.coordinate(thread, value)
                wanted.setdefault((row, step), []).append(step * k + column)
        for place, columns in held.items():
            for column, target in zip(sorted(columns), sorted(wanted.get(place, []))):
                if order.setdefault(column, target) != target:
                    raise ValueError(f"accumulators_as_a: accumulator column {column} goes to A's {order[column]} in "
                                     f"one thread and to {target} in thread {thread}")
    if sorted(order) != list(range(n)) or sorted(order.values()) != list(range(n)):
        raise ValueError(f"accumulators_as_a: {multiplying.name}'s A takes no permutation of {accumulating.name}'s "
                         f"columns")
    if all(order[j] == j for j in range(n)):
        return None
    bits = k.bit_length() - 1  # each K step's columns by the same bit permutation, the steps in order
    flat = coalesce(Layout((*(2,) * bits, n // k), (*(order[1 << b] for b in range(bits)), k)))
    layout = Layout((flat.shape,), (flat.stride,)) if flat.rank > 1 else flat
    if any(layout.offset(j) != order[j] for j in range(n)):
        raise ValueError(f"accumulators_as_a: the order of {accumulating.name}'s columns in {multiplying.name}'s A is "
                         f"no layout")
    return layout


@functools.lru_cache(maxsize=None)  # (pure: each kernel's P asks it again)
def accumulators_as_a(accumulating: WgmmaAtom, multiplying: WgmmaAtom, key_order=None) -> tuple[tuple[int, ...], ...]:
    """How `accumulating`'s accumulators (64 x N) become the register A operand of `multiplying` over its N / K
    steps with no data leaving its thread (FlashAttention's P), its columns in `key_order` (`a_key_order`'s;
    None: in place): per A register of each K step (step-major), the accumulator slots its elements are, low
    part first. ValueError naming the element that another thread holds."""
    (m, n, _), k = accumulating.shape, multiplying.shape[2]
    if n % k:
        raise ValueError(f"accumulators_as_a: N ({n}) is no whole number of {multiplying.name}'s K ({k})")
    holder = {accumulating.c.coordinate(t, v): (t, v) for t in range(WARPGROUP_THREADS) for v in range(n // 2)}
    source = list(range(n)) if key_order is None else [0] * n  # A's column -> the accumulator column it holds
    for column in range(n) if key_order is not None else ():
        source[key_order.offset(column)] = column
    per_register = 32 // multiplying.element_bits

    def slot(step: int, value: int) -> int:
        """The accumulator slot every thread holds A's `value` of K step `step` in, proven for each thread."""
        slots = set()
        for thread in range(WARPGROUP_THREADS):
            row, column = multiplying.a.coordinate(thread, value)
            owner, held = holder[row, source[step * k + column]]
            if owner != thread:
                raise ValueError(f"accumulators_as_a: A's element ({row}, {step * k + column}) of thread {thread} is "
                                 f"accumulator slot {held} of thread {owner}: {multiplying.element} needs a shuffle")
            slots.add(held)
        if len(slots) != 1:
            raise ValueError(f"accumulators_as_a: A's value {value} of K step {step} is accumulator slots {sorted(slots)} "
                             f"in different threads")
        return slots.pop()

    registers = multiplying.a.rows.sizes[1] // per_register
    return tuple(tuple(slot(step, register * per_register + part) for part in range(per_register))
                 for step in range(n // k) for register in range(registers))
