"""Tiled fragments (CuTe's TiledMMA for ldmatrix/stmatrix, pure Python): the CTA-wide transfers that give
each warp of a (WM x WN) warp grid its mma.sync m16n8k16 (f16/bf16) fragments of a (BM, BN, BK) CTA tile,
derived by CuTe's algebra from the shared tiles' layouts, each with its coverage proof; and the same for
m16n8k32 (s8/u8) A and B.

Shared tiles are given in 32-bit words, as (rows, words) layouts (a swizzle allowed, from
`mlir_tile.tiling.synthesize`): A is BM x BK halves (row-major), B either K x N (row-major [K, N]: read with
`.trans`) or N x K (the weight of `torch.nn.functional.linear`, attention's K: read without it), C is BM x BN
halves (written with stmatrix after packing). Warp `w` is (n = w % WN, m = w // WN). Each operand is one
`scope = "cta"` transfer of all warps over the whole k-tile (`whole`), or one per k16 block (`k_block(k)`, a
view of the tile and of the registers at the block's offsets: the swizzle keeps its place, see the slicing
rule). Register slots follow the order the mma helpers consume: a0..a3 of an m16 block at `a_slots(m, k)`,
b0,b1 of an n8 block at `b_slots(n, k)`, the packed C pairs of an n8 block at `c_slots(m, n)`.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile import contract
from mlir_tile.isa.atoms import (LDMATRIX_X4, LDMATRIX_X4_NK, LDMATRIX_X4_TRANS, MMA_M16N8K16, MMA_M16N8K32, STMATRIX_X4,
                             CopyAtom, MmaAtom)
from mlir_tile.models.coverage import Coverage, prove_coverage
from mlir_tile.algebra.layout import Layout, warpid
from mlir_tile.algebra.operations import composition, make_layout, tiled_divide


@dataclass(frozen=True)
class OperandTransfer:
    """One operand's CTA-wide transfer: ready for `builder.transfer(opcode, ..., scope="cta")`."""

    opcode: str
    registers: Layout
    shared: Layout
    slots: int  # register words per thread
    shared_offset: int = 0  # words into the tile (a view there)
    register_offset: int = 0  # slots into the register storage (a view there)

    def one_warp(self) -> tuple["OperandTransfer", Layout]:
        """This CTA-wide transfer as each warp's own: a scope "warp" transfer (the warp mode taken out of
        both layouts) on a view that starts the warp's part later by the returned layout of the warp's index
        (words into the tile, the swizzle staying in place as for any view: the slicing rule; constant 0
        for an operand every warp reads whole). What a warp runs under a branch on its index, which a scope
        "cta" transfer may not sit under (the other warps would not do their part)."""
        warp_part = self.shared[0]
        registers = Layout(self.registers.shape[1:], self.registers.stride[1:])
        shared = Layout(self.shared.shape[1:], self.shared.stride[1:], self.shared.swizzle)
        own = OperandTransfer(self.opcode, registers, shared, self.slots, self.shared_offset, self.register_offset)
        return own, warp_part


@dataclass(frozen=True)
class Operand:
    name: str
    tile: Layout  # the shared tile, (rows, words)
    opcode: str
    whole: OperandTransfer  # every k16 block (A, B) or the whole tile (C)
    k_blocks: int  # 1 for C
    k_stride: tuple[int, int]  # (shared words, register slots) from one k16 block to the next; (0, 0) for C
    copies: int  # warps that read each word of the tile

    def k_block(self, k: int) -> OperandTransfer:
        """The transfer of k16 block `k` alone: the k-block mode sliced, on views at the block's offsets."""
        if not 0 <= k < self.k_blocks:
            raise ValueError(f"{self.name}: k16 block {k} is outside the tile's {self.k_blocks}")
        if self.k_stride == (0, 0):  # C has no k mode
            return self.whole
        keep = (None, Layout.parse("1:0"))
        return OperandTransfer(self.opcode, composition(self.whole.registers, keep), composition(self.whole.shared, keep),
                               self.whole.slots // self.k_blocks, k * self.k_stride[0], k * self.k_stride[1])

    def coverage(self, transfers: list[OperandTransfer] | None = None) -> Coverage:
        """The proof that the transfers (by default the whole one) move every word of the tile `copies` times."""
        checked = [_checked(t, self.tile) for t in (transfers or [self.whole])]
        return prove_coverage(checked, self.tile, self.copies)


def _checked(transfer: OperandTransfer, tile: Layout) -> contract.Transfer:
    threads = contract.WARP_SIZE * transfer.registers.sizes[0]
    return contract.verdict(contract.Query.of_layouts(
        transfer.opcode, transfer.registers, transfer.shared, register_slots=transfer.register_offset + transfer.slots,
        shared_words=tile.cosize, scope="cta", block_size=(threads, 1, 1), shared_offset=transfer.shared_offset)).require()


@dataclass(frozen=True)
class TiledMma:
    atom: MmaAtom
    warps: tuple[int, int]  # (WM, WN)
    tile: tuple[int, int, int]  # (BM, BN, BK) in elements
    a: Operand
    b: Operand
    c: Operand | None  # None for s8 (s32 accumulators have no stmatrix form)
    b_major: str  # "kn" (B as K x N, read with .trans) or "nk" (B as N x K)

    @property
    def m_blocks(self) -> int:  # m16 blocks per warp
        return self.tile[0] // 16 // self.warps[0]

    @property
    def n_blocks(self) -> int:  # n8 blocks per warp
        return self.tile[1] // 8 // self.warps[1]

    def a_slots(self, m: int, k: int) -> list[int]:
        return [4 * (m + self.m_blocks * k) + i for i in range(4)]

    def b_slots(self, n: int, k: int) -> list[int]:
        pair, second = divmod(n, 2)
        return [4 * (pair + self.n_blocks // 2 * k) + 2 * second + i for i in range(2)]

    def c_slots(self, m: int, n: int) -> list[int]:
        pair, second = divmod(n, 2)
        return [4 * (pair + self.n_blocks // 2 * m) + 2 * second + i for i in range(2)]

    @property
    def accumulator_slots(self) -> int:  # f32 accumulators per thread
        return 4 * self.m_blocks * self.n_blocks

    def accumulator_block(self, m: int, n: int) -> list[int]:
        """The f32 accumulator slots c0..c3 of the warp's (m16, n8) block `m`, `n`."""
        return [4 * (m * self.n_blocks + n) + i for i in range(4)]

    def accumulator_coordinates(self) -> tuple[Layout, Layout]:
        """(rows, columns): where in the BM x BN tile each thread's accumulator lies, as CuTe's thread-value
        layout split by coordinate (CuTe's C TV layout composed with the tile's identity tensor): layouts of
        (thread, slot) -> row and -> column. The atom's C layout (`atoms`: the ISA's fragment, checked against
        its table for every lane and value in the tests) tiled over the warp grid (thread: lane modes, warp
        n, warp m; warp = n + WN * m) and the warp's blocks (slot: c0..c3, n8 block, m16 block:
        `accumulator_block`'s order)."""
        (wm, wn), mb, nb = self.warps, self.m_blocks, self.n_blocks
        (m, n, _), c = self.atom.shape, self.atom.c

        def tiled(layout: Layout, warp_strides: tuple, block_strides: tuple) -> Layout:
            (threads, values), (thread_strides, value_strides) = layout.shape, layout.stride
            return Layout(((*threads, wn, wm), (*values, nb, mb)),
                          ((*thread_strides, *warp_strides), (*value_strides, *block_strides)))

        return tiled(c.rows, (0, m * mb), (0, m)), tiled(c.columns, (n * nb, 0), (n, 0))


def tiled_mma_m16n8k16(warps: tuple[int, int], tile: tuple[int, int, int], a: Layout, b: Layout, c: Layout,
                       b_major: str = "kn") -> TiledMma:
    """The A, B and C transfers of a (BM, BN, BK) CTA tile of f16/bf16 over a (WM, WN) warp grid. `a` is
    BM x BK/2 words, `b` BK x BN/2 (b_major "kn") or BN x BK/2 ("nk"), `c` BM x BN/2; each a (rows, words)
    layout."""
    return _tiled_mma(MMA_M16N8K16, warps, tile, a, b, c, b_major)


def tiled_mma_m16n8k32(warps: tuple[int, int], tile: tuple[int, int, int], a: Layout, b: Layout) -> TiledMma:
    """The A and B transfers of a (BM, BN, BK) CTA tile of s8/u8 for mma.sync m16n8k32 over a (WM, WN) warp
    grid: `a` is BM x BK/4 words, `b` BN x BK/4 (N x K: ldmatrix's .trans moves 16-bit elements, not bytes).
    A k32 block is 8 words, as a k16 block of f16 is, and the ISA's m16n8k32 fragments hold the words that
    m16n8k16's hold (the byte tables "a8", "b8" of `fragments`): the same transfers. C (s32) has no stmatrix
    form: `c` is None."""
    return _tiled_mma(MMA_M16N8K32, warps, tile, a, b, None, "nk")


def tiled_store_c(warps: int, c: Layout) -> Operand:
    """The stmatrix transfer of packed C pairs held as a column of `warps` warps each holds 16 rows of (the
    mma.sync accumulator, which wgmma's is per warp of its warpgroup) into the C tile `c` (BM x BN/2 words,
    `warps` = BM / 16): one scope "cta" transfer, the packed pair i of n8 block n at slot `c_slots(0, n)[i]`
    of a TiledMma of one m16 block a warp."""
    return _operand("c", c, STMATRIX_X4, (warps, 1), 1, rows_split="m", words_split="n")


def packed_slot(block: int, half: int) -> int:
    """The register slot of n8 block `block`'s packed pair `half` (c0 c1, or c2 c3 eight rows down) in the C
    stmatrix transfer (`tiled_store_c`'s c_slots(0, block)): the accumulator slots 4 block + 2 half, + 1."""
    return 4 * (block // 2) + 2 * (block % 2) + half


def _tiled_mma(atom: MmaAtom, warps, tile, a, b, c, b_major) -> TiledMma:
    (wm, wn), (bm, bn, bk), elements_per_word = warps, tile, atom.per_register
    k_block = atom.shape[2]  # a k16 (f16) or k32 (s8) block: 8 words
    if b_major not in ("kn", "nk"):
        raise ValueError(f"b_major is 'kn' (B as K x N, .trans) or 'nk' (B as N x K), got {b_major!r}")
    if bm % (16 * wm) or bn % (16 * wn) or bk % k_block:
        raise ValueError(f"the tile {tile} must split into 16x{k_block} blocks over the {wm}x{wn} warps: BM a multiple "
                         f"of {16 * wm}, BN of {16 * wn}, BK of {k_block}")
    words = bk // elements_per_word
    shapes = [("a", a, (bm, words)), ("b", b, (bk, bn // 2) if b_major == "kn" else (bn, words))]
    if c is not None:
        shapes.append(("c", c, (bm, bn // 2)))
    for name, layout, shape in shapes:
        if layout.rank != 2 or layout.sizes != shape:
            raise ValueError(f"{name}: a (rows, words) layout of {shape} words, got {layout}")
    operand_a = _operand("a", a, LDMATRIX_X4, (wm, wn), wn, rows_split="m", k_mode="words")
    if b_major == "kn":
        operand_b = _operand("b", b, LDMATRIX_X4_TRANS, (wm, wn), wm, words_split="n", k_mode="rows")
    else:
        operand_b = _operand("b", b, LDMATRIX_X4_NK, (wm, wn), wm, rows_split="n", k_mode="words")
    operand_c = None if c is None else _operand("c", c, STMATRIX_X4, (wm, wn), 1, rows_split="m", words_split="n")
    return TiledMma(atom, (wm, wn), (bm, bn, bk), operand_a, operand_b, operand_c, b_major)


def _operand(name: str, tile: Layout, atom: CopyAtom, warps: tuple[int, int], copies: int,
             rows_split: str | None = None, words_split: str | None = None, k_mode: str | None = None) -> Operand:
    """The copy atom tiled over the tile (CuTe's make_tiled_copy_A/B/C): (warps, k blocks?, the warp's blocks
    along rows, along words, matrix, row, word). The tile's rows and words are split over the warps along "m"
    or "n" (or not); `copies` warps read each word."""
    wm, wn = warps
    split = {"m": wm, "n": wn, None: 1}
    block, row_blocks, word_blocks = tiled_divide(Layout(tile.shape, tile.stride), (Layout.parse("16:1"), Layout.parse("8:1")))
    rows = composition(row_blocks, _split(row_blocks.size, split[rows_split]))  # (per warp, warps)
    words = composition(word_blocks, _split(word_blocks.size, split[words_split]))
    along = {rows_split: rows[1], words_split: words[1]}  # the warp modes that step through the tile
    warp_modes = [along.get("n", Layout((wn,), (0,))), along.get("m", Layout((wm,), (0,)))]  # warp = n + WN * m
    per_warp = {"rows": rows[0], "words": words[0]}
    k = per_warp.pop(k_mode) if k_mode else None  # the k16 blocks lead: a k16 block is one slice
    blocks = ([k] if k is not None else []) + list(per_warp.values())
    matrices = composition(block, atom.order)
    shared = make_layout(make_layout(*warp_modes), *blocks, *matrices)
    shared = Layout(shared.shape, shared.stride, tile.swizzle)
    block_sizes = [b.size for b in blocks]
    strides, running = [], atom.registers.sizes[0]
    for size in reversed(block_sizes):  # the innermost block mode next to the matrix: slot order a0..a3 per block
        strides.insert(0, running)
        running *= size
    registers = Layout((wm * wn, *block_sizes, *atom.registers.shape), (1 @ warpid, *strides, *atom.registers.stride))
    slots = running
    k_blocks = k.size if k is not None else 1
    k_stride = (k.stride[0] if k is not None else 0, strides[0] if k is not None else 0)
    return Operand(name, tile, atom.opcode, OperandTransfer(atom.opcode, registers, shared, slots), k_blocks, k_stride,
                   copies)


def _split(blocks: int, warps: int) -> Layout:
    """(blocks per warp, warps) over `blocks` consecutive blocks: each warp takes a contiguous run."""
    if blocks % warps:
        raise ValueError(f"{blocks} blocks do not split over {warps} warps")
    return Layout((blocks // warps, warps), (1, blocks // warps))
