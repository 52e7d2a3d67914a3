"""The coverage proof of a set of transfers over a tile (pure Python, no MLIR): which lane moves each word of
the tile, found by following every coordinate of every transfer through the contract's own maps (shared word
at its address; register word of (repeat, matrix) in slot `register_slot`, lane 4*row + word). A tile is
covered when every one of its words is moved exactly once: the proof names the (warp, lane, slot) of each
word, and `CoverageError` names the first word that no lane moves, or that two lanes move, by its
coordinate in the tile. An operand that several warps read (A, when warps split the N dimension) is covered
`copies` times, once by each of that many warps. (CUTLASS once shipped an epilogue whose x2 stmatrix covered half of its fragment and
wrote incomplete tiles, NVIDIA/cutlass PR #3345; here that is this error, at compile time.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from mlir_tile.contract import WORDS, Transfer
from mlir_tile.algebra.layout import Layout


class CoverageError(ValueError):
    """A word of the tile is moved by no lane, or by more than one."""


@dataclass(frozen=True)
class Mover:
    transfer: int  # which transfer of the set
    warp: int  # the warp of the transfer's scope
    lane: int
    slot: int  # the register slot of that lane


@dataclass(frozen=True)
class Coverage:
    """Every word of the tile (by its shared offset) and the lanes that move it, one per copy."""

    movers: dict[int, tuple[Mover, ...]]


def movers(transfer: Transfer, index: int = 0) -> Iterable[tuple[int, Mover]]:
    """(shared word offset, who moves it) for every word the transfer moves."""
    count = transfer.opcode.count
    for warp in range(transfer.scope.warps):
        for repeat in transfer.repeats():
            for matrix in range(count):
                slot = transfer.register_slot(repeat, matrix)
                for row in range(8):
                    for word in range(WORDS):
                        yield (transfer.shared_offset(warp, repeat, matrix, row, word),
                               Mover(index, warp, WORDS * row + word, slot))


def prove_coverage(transfers: Sequence[Transfer], tile: Layout, copies: int = 1) -> Coverage:
    """The proof that `transfers` move every word of `tile` (a layout of the tile's coordinates onto shared
    word offsets, the one the transfers address) exactly `copies` times, each by another warp; CoverageError
    otherwise."""
    where = {}
    for coordinate in tile.coordinates():
        where.setdefault(tile.offset(*coordinate), coordinate)
    found: dict[int, list[Mover]] = {}
    for index, transfer in enumerate(transfers):
        for offset, mover in movers(transfer, index):
            if offset not in where:
                raise CoverageError(f"transfer {index} moves shared word {offset} (warp {mover.warp}, lane "
                                    f"{mover.lane}, slot {mover.slot}), which is outside the tile {tile}")
            earlier = found.setdefault(offset, [])
            same_warp = [m for m in earlier if (m.transfer, m.warp) == (index, mover.warp) or len(earlier) >= copies]
            if same_warp:
                first = same_warp[0]
                raise CoverageError(f"tile word {_text(where[offset])} (shared word {offset}) is moved "
                                    f"{len(earlier) + 1} times where {copies} {'is' if copies == 1 else 'are'} "
                                    f"needed: by transfer {first.transfer} (warp {first.warp}, lane {first.lane}, "
                                    f"slot {first.slot}) and transfer {index} (warp {mover.warp}, lane {mover.lane}, "
                                    f"slot {mover.slot})")
            earlier.append(mover)
    for coordinate in tile.coordinates():
        offset = tile.offset(*coordinate)
        moved = len(found.get(offset, ()))
        if moved < copies:
            raise CoverageError(f"tile word {_text(coordinate)} (shared word {offset}) is moved by "
                                f"{'no lane' if not moved else f'{moved} lanes'} where {copies} "
                                f"{'is' if copies == 1 else 'are'} needed: the transfers cover "
                                f"{sum(1 for m in found.values() if len(m) >= copies)} of the tile's {tile.size} words")
    return Coverage({offset: tuple(moved) for offset, moved in found.items()})


def _text(coordinate: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, coordinate)) + ")"

