"""Random legal transfers (pure Python): for property tests and GPU differential testing.

Each transfer draws ld/st, .x1/.x2/.x4, .trans, warp/warpgroup scope, up to two repeat axes, register
strides with gaps and shared strides with gaps and interleaving (matrix stride below the row stride), all
through mixed radices so loaded slots and stored rows never collide; nested matrix and row modes and
swizzled shared layouts (CuTe's Sw<B,M,S>, M >= 2) among them.

Every choice is one bounded integer from `integer(low, high)`, so the same generator serves a seeded
`random.Random` (`random_transfer`, for reproducible GPU bundles) and hypothesis (`transfers()`, whose
failing examples shrink towards the simplest transfer: lower integers are simpler choices)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from mlir_tile import contract

from mlir_tile.isa import targets
from mlir_tile.algebra.layout import Layout, Swizzle, ThreadStride


@dataclass(frozen=True)
class RandomTransfer:
    opcode: str
    scope: str
    register_layout: Layout
    shared_layout: Layout
    slots: int
    words: int

    @property
    def is_load(self) -> bool:
        return self.opcode.startswith("ldmatrix")

    @property
    def dst_layout(self) -> Layout:
        return contract.parse_opcode(self.opcode).dst_and_src(self.register_layout, self.shared_layout)[0]

    @property
    def src_layout(self) -> Layout:
        return contract.parse_opcode(self.opcode).dst_and_src(self.register_layout, self.shared_layout)[1]

    @property
    def threads(self) -> int:
        return 32 * (contract.WARPGROUP_WARPS if self.scope == "warpgroup" else 1)


Integer = Callable[[int, int], int]  # a choice in [low, high]
MAX_WORDS = targets.STATIC_SHARED_BYTES // 4 - 8  # the tile and its padding fit in a kernel's static shared memory


def _mixed_radix(integer: Integer, extents: list[int], unit: int, max_gap: int) -> list[int]:
    """Strides that keep distinct coordinates apart: a random axis order, each stride the span of the
    axes before it times `unit`, times a random gap."""
    order = list(range(len(extents)))
    for position in range(len(order) - 1, 0, -1):  # Fisher-Yates; all zeros keep the order
        other = position - integer(0, position)
        order[position], order[other] = order[other], order[position]
    strides = [0] * len(extents)
    span = unit
    for axis in order:
        strides[axis] = span * integer(1, max_gap)
        span = strides[axis] * extents[axis]
    return strides


def _chance(integer: Integer, percent: int) -> bool:
    """True with `percent`% probability; the simplest choice (0) is False."""
    return integer(0, 99) >= 100 - percent


def random_transfer(rng: random.Random) -> RandomTransfer:
    """A random legal transfer, reproducible from the generator's seed."""
    return draw_transfer(rng.randint)


def transfers():
    """A hypothesis strategy of random legal transfers that shrinks (hypothesis is imported only here, so
    GPU hosts without it can still read bundles)."""
    from hypothesis import strategies as st

    return st.composite(lambda draw: draw_transfer(lambda low, high: draw(st.integers(low, high))))()


def draw_transfer(integer: Integer) -> RandomTransfer:
    load = not _chance(integer, 40)
    count = (1, 2, 4)[integer(0, 2)]
    trans = _chance(integer, 40)
    scope = "warpgroup" if _chance(integer, 20) else "warp"
    opcode = f"{'ldmatrix' if load else 'stmatrix'}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    repeats = [integer(1, 3) for _ in range(integer(0, 2))]
    group = [contract.WARPGROUP_WARPS] if scope == "warpgroup" else []
    # Nested modes (CuTe): the matrix mode as (2,2), the row mode as (2,4) or (4,2), each sub-mode its own
    # stride; and a swizzle of the shared offsets that keeps 16-byte rows whole (M >= 2 in words).
    matrix_mode = [2, 2] if count == 4 and _chance(integer, 25) else [count]
    row_mode = [(2, 4), (4, 2)][integer(0, 1)] if _chance(integer, 20) else [8]
    row_mode = list(row_mode)
    swizzle = None
    if _chance(integer, 25):
        bits = integer(1, 3)
        swizzle = Swizzle(bits, integer(2, 3), bits + integer(0, 3))

    register_axes = repeats + matrix_mode
    register_strides = _mixed_radix(integer, register_axes, 1, 2)
    slots = sum((n - 1) * s for n, s in zip(register_axes, register_strides)) + 1 + integer(0, 2)
    register_layout = Layout(
        tuple(group + repeats + [_mode(matrix_mode), 8, 4]),
        tuple(([ThreadStride(1, "warpid")] if group else []) + register_strides[: len(repeats)]
              + [_mode(register_strides[len(repeats):]), ThreadStride(4, "laneid"), ThreadStride(1, "laneid")]),
    )

    # Shared: group (stores need each warp its own rows; loads may share), repeats, matrix and row axes.
    share_rows = bool(group) and load and _chance(integer, 50)
    axes = ([] if share_rows else group) + repeats + matrix_mode + row_mode
    strides = _mixed_radix(integer, axes, 4, 2)
    if math.prod(axes) * 4 * 2 ** len(axes) > MAX_WORDS:  # gaps could outgrow static shared memory: none
        strides = _mixed_radix(integer, axes, 4, 1)
    if share_rows:
        strides = [0] + strides
    head = len(group) + len(repeats)
    rows_from = head + len(matrix_mode)
    shared_layout = Layout(
        tuple(group + repeats + [_mode(matrix_mode), _mode(row_mode), 4]),
        tuple(strides[:head] + [_mode(strides[head:rows_from]), _mode(strides[rows_from:]), 1]),
        swizzle,
    )
    words = shared_layout.cosize + 4 * integer(0, 2)
    return RandomTransfer(opcode, scope, register_layout, shared_layout, slots, words)


def _mode(parts: list):
    """One mode of `parts`: the value itself when there is one, else a nested mode."""
    return parts[0] if len(parts) == 1 else tuple(parts)


def with_stride(layout: Layout, axis: int, stride) -> Layout:
    """`layout` with mode `axis`'s stride replaced (nesting and swizzle kept; a single stride for a nested mode
    goes to each of its sub-modes): one-rule mutations in tests."""
    if isinstance(layout.shape[axis], tuple) and not isinstance(stride, tuple):
        stride = (stride,) * len(layout.shape[axis])
    strides = list(layout.stride)
    strides[axis] = stride
    return Layout(layout.shape, tuple(strides), layout.swizzle)


def with_misaligned_rows(layout: Layout) -> Layout:
    """`layout` with its row mode's first stride one word longer: some row starts off a 16-byte boundary."""
    rows = layout.stride[-2]
    return with_stride(layout, -2, (rows[0] + 1,) + rows[1:] if isinstance(rows, tuple) else rows + 1)
