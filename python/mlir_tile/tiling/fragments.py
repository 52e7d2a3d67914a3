"""Named layouts for the operand fragments of `mma.sync.aligned.m16n8k16` (f16/bf16) and `m16n8k32` (s8/u8):
the transfer that fills (or, for C/D, stores) each fragment as ONE ldmatrix/stmatrix.x4 per 16x16 block (per
16x32 bytes for 8-bit), from row-major tiles in shared memory (pure Python, no MLIR).

Each function returns (register layout, shared layout) for a tile whose rows are `pitch` words apart; a
swizzle (`Sw<...>`) may be given for the tile. The register slots hold the
fragment's registers in the PTX ISA's order (a0..a3, b0..b3 = two n-blocks' b0,b1, or packed c/d pairs), one
32-bit word each. The PTX ISA's fragment tables ("Matrix Fragments for mma.m16n8k16", "... m16n8k32") are
written out in `fragment_element` so that tests can check every lane and register against them.
"""
from __future__ import annotations

from mlir_tile.isa.atoms import LDMATRIX_X4, LDMATRIX_X4_NK, LDMATRIX_X4_TRANS, STMATRIX_X4
from mlir_tile.algebra.layout import Layout, Swizzle


def mma_m16n8k16_a(pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
    """A (16x16, row-major) of mma.m16n8k16 f16/bf16: ldmatrix.x4; a0..a3 = (rows 0-7 | 8-15) x (k 0-7 | 8-15)."""
    return LDMATRIX_X4.fragment(pitch, swizzle)


def mma_m16n8k16_b_trans(pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
    """B (16x8, col) of mma.m16n8k16 for two n-blocks at once, from a row-major k x n tile: ldmatrix.x4.trans;
    slots 0,1 = b0,b1 of n-block 0, slots 2,3 = b0,b1 of n-block 1."""
    return LDMATRIX_X4_TRANS.fragment(pitch, swizzle)


def mma_m16n8k16_c(pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
    """C/D (16x8) of two n-blocks stored with stmatrix.x4 after packing each (c0,c1) and (c2,c3) pair to two
    16-bit values: slots 0,1 = n-block 0's pairs, slots 2,3 = n-block 1's."""
    return STMATRIX_X4.fragment(pitch, swizzle)


def mma_m16n8k32_a(pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
    """A (16x32 bytes, row-major) of mma.m16n8k32 s8/u8: the same words as the f16 A operand (ldmatrix.x4)."""
    return LDMATRIX_X4.fragment(pitch, swizzle)


def mma_m16n8k32_b(pitch: int, swizzle: Swizzle | None = None) -> tuple[Layout, Layout]:
    """B (32x8 bytes, col) of mma.m16n8k32 s8/u8 for two n-blocks, from an n x k tile with k contiguous (8-bit
    data cannot be transposed by .trans): ldmatrix.x4; slots 0,1 = b0,b1 of n-block 0, 2,3 of n-block 1."""
    return LDMATRIX_X4_NK.fragment(pitch, swizzle)


def fragment_element(operand: str, lane: int, register: int, part: int) -> tuple[int, int]:
    """(row, column) of the tile element that `part` (16-bit half, or byte for 8-bit) of `register` holds in
    `lane`, per the PTX ISA's tables. Operands: "a16" (16x16 of m16n8k16), "b16" (k x n, 16 x 16: two n-blocks),
    "c16" (16 x 16 packed C pairs), "c32" (16 x 8 f32 accumulators of one n8 block), "a8" (16 x 32 bytes), "b8" (n x k, 16 x 32 bytes: two n-blocks)."""
    group, thread = lane // 4, lane % 4
    if operand in ("a16", "c16"):
        row = group + 8 * (register & 1)
        return row, 2 * thread + part + 8 * (register >> 1)
    if operand == "c32":  # one n8 block's f32 accumulators c0..c3 (part 0 only: a register holds one)
        return group + 8 * (register >> 1), 2 * thread + (register & 1)
    if operand == "b16":
        k = 2 * thread + part + 8 * (register & 1)
        return k, group + 8 * (register >> 1)
    if operand == "a8":
        return group + 8 * (register & 1), 4 * thread + part + 16 * (register >> 1)
    if operand == "b8":
        return group + 8 * (register >> 1), 4 * thread + part + 16 * (register & 1)
    raise ValueError(f"unknown fragment operand {operand!r}")


def c_as_a_operand() -> list[tuple[int, int, int]]:
    """How the f32 accumulators of two adjacent n8 blocks of mma.m16n8k16 become, packed to 16-bit pairs, the
    A operand of a k16 block, in registers (attention keeps P = softmax(S) so): for A register r, (n-block,
    low accumulator, high accumulator), each lane's own. Proven from the PTX ISA's fragment tables for every
    lane (ValueError if they disagree): A's element (r, part) is accumulator `low`/`high` of that n-block."""
    plan = [(register >> 1, 2 * (register & 1), 2 * (register & 1) + 1) for register in range(4)]
    for lane in range(32):
        for register, (block, low, high) in enumerate(plan):
            for part, accumulator in enumerate((low, high)):
                row, column = fragment_element("c32", lane, accumulator, 0)
                if fragment_element("a16", lane, register, part) != (row, column + 8 * block):
                    raise ValueError(f"lane {lane}: A register {register} part {part} is not accumulator "
                                     f"{accumulator} of n-block {block}")
    return plan
