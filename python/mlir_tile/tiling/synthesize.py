"""Conflict-free shared layouts for a tile, by the bank model (pure Python, no MLIR).

Given a row-major tile (rows x columns of 16-bit or 8-bit elements), the transfers that read or write it (its
16x16 b16 blocks, or 16x32 byte blocks, one ldmatrix/stmatrix.x4 each, in mma order, `.trans` or not; every
block of the tile) and a writer that fills it with 16-byte vectors along the rows (as cp.async and TMA do:
lane t of a warp writes chunk t, 8 lanes a phase), `synthesize` returns a shared layout under which every one
of them is conflict-free by `mlir_tile.models.banks`, trying the least memory first: swizzles `Sw<B,2,S>` (no extra
memory), then row paddings; or, when none is conflict-free, the one with the fewest wavefronts, saying so.

An x4 in mma order reads (or, stmatrix, writes) the same 32 rows with or without `.trans` (which only
transposes inside each 8x8 matrix), so one count serves all four. The count is per 8x8 matrix, and every
matrix on the tile's grid (8 rows by 16 bytes) is counted: what holds for the x4s holds for x1 and x2 and for
any fragment order whose matrices sit on that grid.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable

from mlir_tile.models.banks import matrix_wavefronts
from mlir_tile.isa.atoms import MMA_ORDER
from mlir_tile.algebra.layout import Layout, Swizzle
from mlir_tile.algebra.operations import composition, make_layout, tiled_divide
from mlir_tile.isa.targets import max_shared_bytes

WORD_BYTES, CHUNK_WORDS = 4, 4


@dataclass(frozen=True)
class Tile:
    rows: int
    columns: int
    element_bits: int = 16  # 16 (f16/bf16) or 8 (s8/u8)

    @property
    def row_words(self) -> int:
        return self.columns * self.element_bits // 32


@dataclass(frozen=True)
class Choice:
    swizzle: Swizzle | None
    pitch: int  # words from one row to the next (the row's words plus padding; 8 in a k block)
    wavefronts: int  # of all the accesses, summed
    minimum: int  # one per 128 bytes moved
    block_stride: int = 0  # k-block-major: words from one 8-word column block (a k16/k32 block) to the next

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.minimum

    def address(self, row: int, word: int) -> int:
        """The word offset of a row's word: the row's pitch (k-block-major: within its column block, the
        blocks one after another), then the swizzle."""
        if self.block_stride:
            linear = word // 8 * self.block_stride + row * self.pitch + word % 8
        else:
            linear = row * self.pitch + word
        return self.swizzle(linear) if self.swizzle else linear

    def _words(self, tile: Tile) -> Layout:
        if self.block_stride:  # ((rows), (word in block, block)): each k block a contiguous rows x 8 words
            return Layout((tile.rows, (8, tile.row_words // 8)), (self.pitch, (1, self.block_stride)))
        return Layout((tile.rows, tile.row_words), (self.pitch, 1))

    def layout(self, tile: Tile) -> Layout:
        """The tile in words: (rows, words of a row), swizzled; k-block-major, the words mode is nested."""
        words = self._words(tile)
        return Layout(words.shape, words.stride, self.swizzle)

    def block_layout(self, tile: Tile) -> Layout:
        """Every 16x16-b16 (16x32-byte) block of the tile as one x4 in mma order: (row band, block column,
        matrix (2,2), row, word), by CuTe's algebra: the tile divided into 16x8-word blocks, each block read
        through MMA_ORDER (a subview at a block with the block's own layout reads the same words)."""
        whole = self._words(tile)
        blocks = tiled_divide(whole, (Layout.parse("16:1"), Layout.parse("8:1")))  # (block, bands, columns)
        matrices = composition(blocks[0], MMA_ORDER)
        result = make_layout(blocks[1], blocks[2], matrices[0], matrices[1], matrices[2])
        return Layout(result.shape, result.stride, self.swizzle)

    def describe(self, tile: Tile) -> str:
        words = self.block_stride * (tile.row_words // 8) if self.block_stride else tile.rows * self.pitch
        memory = f"{words * WORD_BYTES} bytes"
        verdict = "conflict-free" if self.conflict_free else f"{self.wavefronts} wavefronts, minimum {self.minimum}"
        return f"{self.layout(tile)}: {memory}, {verdict}"


Address = Callable[[int, int], int]  # (row, word of the row) -> word offset in shared memory


def block_wavefronts(tile: Tile, address: Choice | Address) -> tuple[int, int]:
    """(wavefronts, minimum) of reading (or writing) every block with an x4, under a Choice or any address
    function (another tool's layout, say)."""
    address = address.address if isinstance(address, Choice) else address
    total = minimum = 0
    for block_row, block_column in itertools.product(range(tile.rows // 16), range(tile.row_words // 8)):
        for matrix in range(4):  # mma order: (rows +8) fastest, then (words +4); .trans reads the same rows
            rows = [WORD_BYTES * address(16 * block_row + 8 * (matrix & 1) + r, 8 * block_column + 4 * (matrix >> 1))
                    for r in range(8)]
            total += matrix_wavefronts(rows)
            minimum += 1
    return total, minimum


def writer_wavefronts(tile: Tile, address: Choice | Address) -> tuple[int, int]:
    """(wavefronts, minimum) of the writer filling the tile with 16-byte vectors, chunk k by lane k % 32."""
    address = address.address if isinstance(address, Choice) else address
    chunks, per_row = tile.rows * tile.row_words // CHUNK_WORDS, tile.row_words // CHUNK_WORDS
    total = 0
    for phase in range(0, chunks, 8):  # 8 lanes of 16 bytes a wavefront at best
        rows = [WORD_BYTES * address(k // per_row, CHUNK_WORDS * (k % per_row)) for k in range(phase, phase + 8)]
        total += matrix_wavefronts(rows)
    return total, chunks // 8


def _cost(tile: Tile, choice: Choice, writer: bool) -> tuple[int, int]:
    """(wavefronts, minimum) of the block transfers and, if asked, the writer."""
    blocks = block_wavefronts(tile, choice)
    written = writer_wavefronts(tile, choice) if writer else (0, 0)
    return blocks[0] + written[0], blocks[1] + written[1]


def candidates(tile: Tile, k_block_major: bool = False):
    """(swizzle, pitch, block stride): swizzles first (no memory beyond the tile), then paddings of 4, 8, ...
    words a row; k-block-major, swizzles of the column blocks laid one after another."""
    if k_block_major:
        yield None, 8, 8 * tile.rows
        for bits in (1, 2, 3):
            for shift in range(bits, 10):
                yield Swizzle(bits, 2, shift), 8, 8 * tile.rows
        return
    words = tile.row_words
    yield None, words, 0
    for bits in (1, 2, 3):
        for shift in range(bits, 8):
            yield Swizzle(bits, 2, shift), words, 0
    for padding in range(CHUNK_WORDS, 8 * CHUNK_WORDS + 1, CHUNK_WORDS):
        yield None, words + padding, 0


@functools.lru_cache(maxsize=None)  # (a pure search: kernels of one tile shape ask it again)
def synthesize(tile: Tile, writer: bool = True, k_block_major: bool = False) -> Choice:
    """The least-memory conflict-free layout for the tile's x4 block transfers (and the writer), or the best.
    `k_block_major`: each 8-word column block (a k16 block of f16, k32 of s8) contiguous, rows x 8 words, so
    that one k block of the tile is one contiguous view (a transfer per k block reads a plain subview)."""
    if tile.rows % 16 or tile.row_words % 8 or tile.element_bits not in (8, 16) or tile.rows <= 0 or tile.columns <= 0:
        raise ValueError(f"{tile}: rows a multiple of 16 and 16-byte-aligned rows of 8-word blocks, of 8- or 16-bit elements")
    if tile.rows * tile.row_words * WORD_BYTES > max_shared_bytes(None):
        raise ValueError(f"{tile}: {tile.rows * tile.row_words * WORD_BYTES} bytes, more than any chip's shared memory "
                         f"({max_shared_bytes(None)} bytes a block)")
    best = None
    for swizzle, pitch, block_stride in candidates(tile, k_block_major):
        choice = Choice(swizzle, pitch, 0, 0, block_stride)
        wavefronts, minimum = _cost(tile, choice, writer)
        choice = Choice(swizzle, pitch, wavefronts, minimum, block_stride)
        if choice.conflict_free:
            return choice
        if best is None or choice.wavefronts < best.wavefronts:
            best = choice
    return best
