"""The FlashAttention-2-form kernel's configurations (`Config`) and the CTAs measured per shape (data: no kernel)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from mlir_tile.isa.targets import DEFAULT_CHIP, nvvm_requirement, requirement_problem
from mlir_tile.kernels.common import HALF


@dataclass(frozen=True)
class Config:
    head_dim: int = 64
    causal: bool = False
    element: str = "f16"
    warps: int = 4
    row_blocks: int = 0  # m16 blocks of query rows per warp; 0: 2 at d = 64, 1 at d = 128 (registers)
    keys: int = 64  # keys per K/V tile (32: half of S's accumulators, twice the barriers)
    q_in_registers: bool = True  # Q's fragments loaded once, or (False) one d16 block at a time from the Q tile
    # in every key tile (FA2's choice at d 128: registers for 32 rows a warp, at the price of Q's shared reads)
    maxima_first: bool = False  # every row's max (its shuffles) before the first row's probabilities, or row by row
    tree_reductions: bool = False  # a row's max and sum over the thread's values as a tree of pairs (depth log2 n,
    # the fp32 sum in another order), not a chain
    lazy_rescale: bool = False  # O's rows scaled by exp2(old max - new max) only where some max of the warp's
    # rows grew (a branch the warp takes together): else every factor is exp2(0) = 1 and the products are O itself
    stage_barriers: bool = False  # each K/V stage's mbarriers (its copies landed; every warp done reading it) in
    # place of the block's barrier a key tile: a warp waits only for what it reads and what it overwrites

    @property
    def blocks_per_warp(self) -> int:
        return self.row_blocks or (2 if self.head_dim == 64 else 1)

    @property
    def rows(self) -> int:  # query rows per CTA
        return 16 * self.blocks_per_warp * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def tile_bytes(self) -> tuple[int, int]:  # (Q tile, one K or V tile)
        return self.rows * self.head_dim * HALF, self.keys * self.head_dim * HALF

    @property
    def shared_bytes(self) -> int:
        q, kv = self.tile_bytes
        return q + 4 * kv  # Q, then K and V of two stages

    def grid(self, batch_heads: int, seq: int) -> int:
        return -(-seq // self.rows) * batch_heads

    def __str__(self) -> str:
        shape = "" if (self.warps, self.row_blocks) == (4, 0) else f"_w{self.warps}m{self.blocks_per_warp}"
        shape += "" if self.keys == 64 else f"_k{self.keys}"
        shape += "" if self.q_in_registers else "_qs"
        shape += "_lazy" if self.lazy_rescale else ""
        shape += "_mf" if self.maxima_first else ""
        shape += "_tree" if self.tree_reductions else ""
        shape += "_mbar" if self.stage_barriers else ""
        return f"attention_d{self.head_dim}_{self.element}{'_causal' if self.causal else ''}{shape}"


CONFIGS = [Config(d, causal, element) for d in (64, 128) for causal in (False, True) for element in ("f16", "bf16")]
# The CTA `Attention` takes per (head dim, causal) where not the default, as measured (docs/notes/
# benchmark-history.md, "The configuration tables' measurements").
TUNED = {(64, False): {"maxima_first": True, "tree_reductions": True, "stage_barriers": True},
         (64, True): {"maxima_first": True, "tree_reductions": True, "stage_barriers": True},
         (128, False): {"row_blocks": 2, "keys": 32, "q_in_registers": False, "lazy_rescale": True, "maxima_first": True},
         (128, True): {"maxima_first": True, "tree_reductions": True}}
def picked(head_dim: int, causal: bool, element: str, chip: str = DEFAULT_CHIP) -> Config:
    """The CTA `Attention` runs for a head dim, mask and element on `chip`: TUNED's fields, the stages' mbarriers
    (`stage_barriers`) only where the chip waits on an mbarrier's phase (sm_90; else the block's barrier)."""
    fields = dict(TUNED.get((head_dim, causal), {}))
    if requirement_problem(nvvm_requirement("nvvm.mbarrier.try_wait.parity"), chip, None):
        fields.pop("stage_barriers", None)
    return Config(head_dim, causal, element, **fields)


# other CTAs the benchmark measures: FA2's (32 rows a warp, 64-key tiles, Q from shared memory), the knobs alone
# and together
SHAPES = [{"row_blocks": 2, "q_in_registers": False}, TUNED[128, False], {"lazy_rescale": True}, {"maxima_first": True},
          {"tree_reductions": True}, TUNED[128, True], {"stage_barriers": True}, TUNED[64, False]]


def measured_kernels():
    """The CTAs the benchmark measures beside the picked ones (SHAPES on every configuration)."""
    return [replace(c, **shape) for c in CONFIGS for shape in SHAPES]
