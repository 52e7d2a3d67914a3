"""Conflict-free shared layouts for a tile, by the bank model (pure Python, no MLIR).

Given a row-major tile (rows x columns of 16-bit or 8-bit elements), the transfers that read or write it (its
16x16 b16 blocks, or 16x32 byte blocks, one ldmatrix/stmatrix.x4 each, in mma order, `.trans` or not; every
block of the tile) and a writer that fills it with 16-byte vectors along the rows (as cp.async and TMA do:
lane t of a warp writes chunk t, 8 lanes a phase), `synthesize` returns a shared layout under which every one
of them is conflict-free by `mlir_tile.banks`, trying the least memory first: swizzles `Sw<B,2,S>` (no extra
memory), then row paddings; or, when none is conflict-free, the one with the fewest wavefronts, saying so. An x4 in mma order reads (or, stmatrix, writes) the same 32 rows
with or without `.trans` (which only transposes inside each 8x8 matrix), so one count serves all four.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from mlir_tile.banks import matrix_wavefronts
from mlir_tile.layout import Swizzle

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
    pitch: int  # words from one row to the next (the row's words plus padding)
    wavefronts: int  # of all the accesses, summed
    minimum: int  # one per 128 bytes moved

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.minimum

    def describe(self, tile: Tile) -> str:
        memory = f"{tile.rows * self.pitch * WORD_BYTES} bytes"
        layout = f"{self.swizzle} o ({tile.rows},{tile.row_words}):({self.pitch},1)" if self.swizzle else \
            f"({tile.rows},{tile.row_words}):({self.pitch},1)"
        verdict = "conflict-free" if self.conflict_free else f"{self.wavefronts} wavefronts, minimum {self.minimum}"
        return f"{layout}: {memory}, {verdict}"


def _offset(choice: Choice, row: int, word: int) -> int:
    linear = row * choice.pitch + word
    return choice.swizzle(linear) if choice.swizzle else linear


def block_wavefronts(tile: Tile, choice: Choice) -> tuple[int, int]:
    """(wavefronts, minimum) of reading (or writing) every block with an x4."""
    total = minimum = 0
    for block_row, block_column in itertools.product(range(tile.rows // 16), range(tile.row_words // 8)):
        for matrix in range(4):  # mma order: (rows +8) fastest, then (words +4); .trans reads the same rows
            rows = [WORD_BYTES * _offset(choice, 16 * block_row + 8 * (matrix & 1) + r, 8 * block_column + 4 * (matrix >> 1))
                    for r in range(8)]
            total += matrix_wavefronts(rows)
            minimum += 1
    return total, minimum


def writer_wavefronts(tile: Tile, choice: Choice) -> tuple[int, int]:
    """(wavefronts, minimum) of the writer filling the tile with 16-byte vectors, chunk k by lane k % 32."""
    chunks, per_row = tile.rows * tile.row_words // CHUNK_WORDS, tile.row_words // CHUNK_WORDS
    total = 0
    for phase in range(0, chunks, 8):  # 8 lanes of 16 bytes a wavefront at best
        rows = [WORD_BYTES * _offset(choice, k // per_row, CHUNK_WORDS * (k % per_row)) for k in range(phase, phase + 8)]
        total += matrix_wavefronts(rows)
    return total, chunks // 8


def _cost(tile: Tile, choice: Choice, writer: bool) -> tuple[int, int]:
    """(wavefronts, minimum) of the block transfers and, if asked, the writer."""
    blocks = block_wavefronts(tile, choice)
    written = writer_wavefronts(tile, choice) if writer else (0, 0)
    return blocks[0] + written[0], blocks[1] + written[1]


def candidates(tile: Tile):
    """Swizzles first (no memory beyond the tile), then paddings of 4, 8, ... words a row."""
    words = tile.row_words
    yield None, words
    for bits in (1, 2, 3):
        for shift in range(bits, 8):
            yield Swizzle(bits, 2, shift), words
    for padding in range(CHUNK_WORDS, 8 * CHUNK_WORDS + 1, CHUNK_WORDS):
        yield None, words + padding


def synthesize(tile: Tile, writer: bool = True) -> Choice:
    """The least-memory conflict-free layout for the tile's x4 block transfers (and the writer), or the best."""
    if tile.rows % 16 or tile.row_words % 8 or tile.element_bits not in (8, 16):
        raise ValueError(f"{tile}: rows a multiple of 16 and 16-byte-aligned rows of 8-word blocks, of 8- or 16-bit elements")
    best = None
    for swizzle, pitch in candidates(tile):
        choice = Choice(swizzle, pitch, 0, 0)
        wavefronts, minimum = _cost(tile, choice, writer)
        choice = Choice(swizzle, pitch, wavefronts, minimum)
        if choice.conflict_free:
            return choice
        if best is None or choice.wavefronts < best.wavefronts:
            best = choice
    return best
