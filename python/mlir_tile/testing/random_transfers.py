"""Random legal transfers (pure Python): for property tests and GPU differential testing.

Each transfer draws ld/st, .x1/.x2/.x4, .trans, warp/warpgroup scope, up to two repeat axes, register
strides with gaps and shared strides with gaps and interleaving (matrix stride below the row stride), all
through mixed radices so loaded slots and stored rows never collide."""
from __future__ import annotations

import random
from dataclasses import dataclass

from mlir_tile import contract
from mlir_tile.layout import Layout, ThreadStride


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
        return self.register_layout if self.is_load else self.shared_layout

    @property
    def src_layout(self) -> Layout:
        return self.shared_layout if self.is_load else self.register_layout

    @property
    def threads(self) -> int:
        return 32 * (contract.WARPGROUP_WARPS if self.scope == "warpgroup" else 1)


def _mixed_radix(rng: random.Random, extents: list[int], unit: int, max_gap: int) -> list[int]:
    """Strides that keep distinct coordinates apart: a random axis order, each stride the span of the
    axes before it times `unit`, times a random gap."""
    order = list(range(len(extents)))
    rng.shuffle(order)
    strides = [0] * len(extents)
    span = unit
    for axis in order:
        strides[axis] = span * rng.randint(1, max_gap)
        span = strides[axis] * extents[axis]
    return strides


def random_transfer(rng: random.Random) -> RandomTransfer:
    load = rng.random() < 0.6
    count = rng.choice([1, 2, 4])
    trans = rng.random() < 0.4
    scope = "warpgroup" if rng.random() < 0.2 else "warp"
    opcode = f"{'ldmatrix' if load else 'stmatrix'}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    repeats = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
    group = [contract.WARPGROUP_WARPS] if scope == "warpgroup" else []

    register_strides = _mixed_radix(rng, repeats + [count], 1, 2)
    slots = sum((n - 1) * s for n, s in zip(repeats + [count], register_strides)) + 1 + rng.randint(0, 2)
    register_layout = Layout(
        tuple(group + repeats + [count, 8, 4]),
        tuple(([ThreadStride(1, "warpid")] if group else []) + register_strides
              + [ThreadStride(4, "laneid"), ThreadStride(1, "laneid")]),
    )

    # Shared: group (stores need each warp its own rows; loads may share), repeats, matrix and row axes.
    share_rows = bool(group) and load and rng.random() < 0.5
    axes = ([] if share_rows else group) + repeats + [count, 8]
    strides = _mixed_radix(rng, axes, 4, 2)
    if share_rows:
        strides = [0] + strides
    shared_layout = Layout(tuple(group + repeats + [count, 8, 4]), tuple(strides) + (1,))
    words = shared_layout.cosize + 4 * rng.randint(0, 2)
    return RandomTransfer(opcode, scope, register_layout, shared_layout, slots, words)
