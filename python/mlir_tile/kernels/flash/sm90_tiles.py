"""Hopper attention's configurations (`HopperAttentionConfig`) and the shapes picked per head dim, mask and length
(data: no kernel)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from mlir_tile.isa.targets import SHARED_RESERVED_BYTES, WARPGROUP_CHIP, max_shared_bytes, sm_shared_bytes
from mlir_tile.kernels.common import BARRIER_BYTES, check_shared, raised_registers


ROW_BYTES = 128  # a 128-byte swizzled row: each tile is boxes of 128 bytes of columns side by side
BAND_BYTES = 64 * ROW_BYTES  # consumer c's 64 rows of Q's or O's tile start c times this many bytes in
# a persistent producer holds its walk's item beside the loads (at 24 it spilled), a paged one its boxes' pages;
# fp8's transposes V
PRODUCER_REGISTERS, PERSISTENT_PRODUCER_REGISTERS, TRANSPOSING_PRODUCER_REGISTERS = 24, 32, 56
SPLIT_PRODUCER_REGISTERS = 40  # a producer's walk of its split's share (d 256's spilled at 32 with pack_gqa)
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1}
HEAD_DIMS = (64, 128, 256)
PERSISTENT_HEAD_DIMS = (64, 128)
FP8_HEAD_DIMS, FP8_KEYS = (128,), 128  # fp8: V^T's rows one 128-byte swizzled row of keys
MEASURED_SHAPES = "hopper_shapes.json"  # beside this module: written by `benchmarks/attention.py hopper-table`
# lazy_rescale: a row's max (in log2 units) lags its scores' by at most this, so a probability is at most 2^8 (e4m3's
# largest is 448; the row sums and O are fp32)
RESCALE_SLACK = 8.0
# paged K/V: the fewest rows of a page box (two 128-byte swizzle atoms of 8 rows); pages of any multiple of it
PAGE_ROWS = 16
PAGE_BOXES = (PAGE_ROWS, 64)  # a paged key tile's box rows below the whole tile's: a box a page's rows at most (64:
# a page of 64 tokens in 2 boxes of a 128-key tile, not 8; an fp8 tile's 8 boxes ran at half its contiguous twin's
# bandwidth on the H100)


def page_box_rows(page_size: int, keys: int) -> int:
    """The rows of each box of a paged key tile of `keys` keys in pages of `page_size` tokens: the whole tile's
    where the pages hold whole tiles, else the most of PAGE_BOXES that divide both."""
    return max(rows for rows in (*PAGE_BOXES, keys) if page_size % rows == 0 and keys % rows == 0)


def band_lengths(head_dim: int, causal: bool, element: str) -> tuple[int, ...]:
    """The lengths up to which MEASURED_SHAPES picks other fields for this head dim, mask and element than for
    longer sequences, shortest first."""
    return tuple(up_to for up_to, _ in _bands(head_dim, causal, element)[:-1])


def seq_band(head_dim: int, causal: bool, element: str, seq: int) -> int:
    """Which of `band_lengths` is the first `seq` is within (their count where none is)."""
    return sum(seq > longest for longest in band_lengths(head_dim, causal, element))


def measured_fields(head_dim: int, causal: bool, element: str, seq: int | None = None) -> dict:
    """The fields MEASURED_SHAPES gives a head dim, mask and element on sequences of `seq` (None: longer than
    every band's), over the defaults; none where it has no row."""
    bands = _bands(head_dim, causal, element)
    if not bands:
        return {}
    return dict(bands[seq_band(head_dim, causal, element, seq) if seq is not None else -1][1])


@functools.lru_cache(maxsize=None)
def _table() -> list:
    """MEASURED_SHAPES' rows, read once."""
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / MEASURED_SHAPES).read_text())["shapes"]


@functools.lru_cache(maxsize=None)
def _bands(head_dim: int, causal: bool, element: str) -> tuple:
    """((up to, fields), ...) of MEASURED_SHAPES' rows for a head dim, mask and element (16-bit rows for f16 and
    bf16), shortest first; the last, up to any length (None)."""
    kind = "e4m3" if element == "e4m3" else "16-bit"
    rows = [row for row in _table() if (row["head_dim"], row["causal"], row["elements"]) == (head_dim, causal, kind)]
    bands = sorted(((row["up_to"], tuple(row["fields"].items())) for row in rows),
                   key=lambda band: math.inf if band[0] is None else band[0])
    if bands and [up_to is None for up_to, _ in bands] != [False] * (len(bands) - 1) + [True]:
        raise ValueError(f"hopper attention: {MEASURED_SHAPES}'s rows for d {head_dim}, causal {causal}, {kind} "
                         f"want one with no length (the longest sequences); got {[up_to for up_to, _ in bands]}")
    return tuple(bands)


@dataclass(frozen=True)
class HopperAttentionConfig:
    head_dim: int = 128
    causal: bool = False
    element: str = "f16"
    keys: int = 128  # keys a K/V tile: S's N (a consumer thread's S accumulators: keys / 2 fp32)
    consumers: int = 2  # consumer warpgroups, 64 query rows each
    stages: int = 3  # K/V tiles in flight (the stage of tile t is released once P V of t is done, under tile t + 1's
    # S: with 2 the producer waits; 3 ran 1.02-1.35x 2 on the H200)
    pingpong: bool = False  # two consumers take turns issuing their GEMMs (named barriers): one's softmax under the
    # other's GEMMs
    staged: int = 2  # fp8: V tiles as TMA wrote them, waiting for the producer's transposition
    persistent: bool = False  # one CTA an SM walking the (head, row tile) items (`QueryTiles.persistent`): the next
    # item's K and V load under this one's last tiles and epilogue
    uniform_q: bool = False  # the warpgroup's index broadcast from lane 0 (`Kernel.broadcast`), so that ptxas keeps
    # Q's d / 16 wgmma descriptors (each consumer's own) in uniform registers (63 a warp), not moved there (R2UR)
    # before each wgmma; where they crowd out the K/V pipeline's index, that one moves instead
    narrow: bool = False  # the launched grid's pipelines divide their indices by the stages in 32 bits
    # (`StageRing(narrow=True)`: a key tile's index is below 2^31, as the maps' rows are); a persistent walk's
    # always do
    lazy_rescale: bool = False  # a row's max moves on only where a tile's scores pass it by more than
    # RESCALE_SLACK (FlashAttention-4's: the probabilities stay below 2^RESCALE_SLACK), and O is rescaled only where
    # some max of the warp's rows moved (a branch the warp takes together)
    ctas_per_sm: int = 1  # CTAs an SM holds at once (`.minnctapersm`): a thread's registers at launch are the
    # register file over that many blocks, and the consumers raise theirs by what their producer gave back; where one
    # consumer's CTA is small (d 64 causal at S 1024), another CTA's GEMMs may run under its softmax
    varlen: bool = False  # packed sequences (`sm90_varlen`): q, k, v [tokens, heads, d] with cu_seqlens, a CTA a
    # (sequence, head, row tile) of the longest sequence's tiles, O stored by rows from the registers
    page_rows: int = 0  # paged K/V (`sm90_varlen.Pages`, packed sequences only): a key tile's K and V as boxes of
    # this many rows, each from its own page of the pool (the page size a multiple of it); 0: the packed rows
    pack_gqa: bool = False  # an item the query heads of one K/V head, its rows (query, head) pairs
    # (`sm90_varlen.PackedItems`, packed sequences only): a decode step's few queries fill a group's rows
    split_kv: bool = False  # an item's key tiles shared among `splits` CTAs (flash-decoding, packed sequences
    # only), each writing its rows' O and log-sum-exp in fp32, which `combine` sums

    def __post_init__(self) -> None:
        if self.head_dim not in HEAD_DIMS or self.element not in ELEMENT_BYTES:
            raise ValueError(f"hopper attention: head dims {', '.join(map(str, HEAD_DIMS))}, f16, bf16 and e4m3; got "
                             f"{self.head_dim}, {self.element}")
        if self.fp8 and (self.head_dim not in FP8_HEAD_DIMS or self.keys != FP8_KEYS):
            raise ValueError(f"hopper attention: e4m3 takes head dim {', '.join(map(str, FP8_HEAD_DIMS))} and "
                             f"{FP8_KEYS} keys a tile; got {self.head_dim}, {self.keys}")
        if self.keys % 64 or not 64 <= self.keys <= 256 or self.consumers not in (1, 2, 3) or self.stages < 1:
            raise ValueError(f"hopper attention: keys a multiple of 64 up to 256, 1 to 3 consumers, 1 stage or more; "
                             f"got {self}")
        if self.fp8 and not 1 <= self.staged < self.stages:
            raise ValueError(f"hopper attention: 1 staged V tile or more, fewer than the stages (the loader waits for "
                             f"key tile t + staged's stage, which tile t + 1's transposition must free first); got "
                             f"{self.staged} staged, {self.stages} stages")
        if self.pingpong and self.consumers != 2:
            raise ValueError(f"hopper attention: ping-pong takes two consumers, got {self.consumers}")
        if self.persistent and not self.may_persist:
            raise ValueError(f"hopper attention: a persistent grid takes head dims "
                             f"{', '.join(map(str, PERSISTENT_HEAD_DIMS))} (at d 256 O takes 128 of a consumer's 240 "
                             f"registers and the walk spilled)")
        if self.o_in_stage and 2 * self.tile_bytes < self.o_bytes:
            raise ValueError(f"hopper attention: a persistent walk writes O's tile over a stage where it has no bytes "
                             f"of its own: {self.o_bytes} bytes, got stages of {2 * self.tile_bytes}; fewer stages")
        if self.fp8 and self.o_offset == self.staging_offset and self.staged * self.tile_bytes < self.o_bytes:
            raise ValueError(f"hopper attention: e4m3's O tile (16-bit) is written over the staged V tiles: "
                             f"{self.o_bytes} bytes, got {self.staged} staged tiles of {self.tile_bytes}")
        if self.varlen and self.persistent:
            raise ValueError("hopper attention: packed sequences run on the launched grid (one row tile a CTA), "
                             "not a persistent walk")
        if self.pack_gqa and not self.varlen:
            raise ValueError("hopper attention: pack_gqa takes packed sequences (the query heads of a token lie "
                             "together in their rows)")
        if self.split_kv and not self.varlen:
            raise ValueError("hopper attention: split_kv takes packed sequences (O stored by rows)")
        if self.page_rows and (not self.varlen or self.page_rows % PAGE_ROWS or self.keys % self.page_rows):
            raise ValueError(f"hopper attention: paged K/V takes packed sequences and boxes of a multiple of "
                             f"{PAGE_ROWS} rows dividing the key tile's {self.keys}; got {self.page_rows} rows, "
                             f"varlen {self.varlen}")
        check_shared("hopper attention", self, self.shared_bytes, "fewer stages or keys")
        if not 1 <= self.ctas_per_sm <= 4:
            raise ValueError(f"hopper attention: 1 to 4 CTAs an SM, got {self.ctas_per_sm}")
        resident = self.ctas_per_sm * (self.shared_bytes + BARRIER_BYTES + SHARED_RESERVED_BYTES)
        if resident > sm_shared_bytes(WARPGROUP_CHIP):
            raise ValueError(f"hopper attention: {self.ctas_per_sm} CTAs an SM of {self}'s shared memory take "
                             f"{resident} bytes, more than an SM's {sm_shared_bytes('sm_90a')}: fewer CTAs or stages")

    @classmethod
    def of(cls, head_dim: int, causal: bool = False, element: str = "f16", **shape) -> "HopperAttentionConfig":
        """The configuration of a head dim, mask and element: MEASURED_SHAPES' for the longest sequences
        (`measured_fields`), `shape`'s fields over them."""
        return cls(head_dim, causal, element, **{**measured_fields(head_dim, causal, element), **shape})

    @classmethod
    def picked(cls, head_dim: int, causal: bool, element: str, seq: int, **shape) -> "HopperAttentionConfig":
        """What `HopperAttention` runs on sequences of `seq`: `of`'s configuration with `shape`'s fields over it,
        or where no field is given, MEASURED_SHAPES' for `seq`. (A caller's field beside a band's need not fit:
        two consumers in three CTAs an SM would run out of registers.)"""
        return cls.of(head_dim, causal, element, **shape) if shape else cls(
            head_dim, causal, element, **measured_fields(head_dim, causal, element, seq))

    @classmethod
    def packed(cls, head_dim: int, causal: bool, element: str, max_seqlen_q: int) -> "HopperAttentionConfig":
        """What `PackedAttention.packed` runs on sequences of at most `max_seqlen_q` queries: `picked`'s
        configuration for that length on the launched grid, for packed sequences."""
        return replace(cls.picked(head_dim, causal, element, max_seqlen_q), persistent=False, varlen=True)

    def decoding(self) -> "HopperAttentionConfig":
        """A decode step's configuration (pack_gqa: its group's heads fill the rows; `packed.packed_config`): d 128
        in 16 bits one consumer's 64 rows, key tiles of 64 on 3 stages, two CTAs an SM (H100, one process, 32 / 8
        heads: 9.64 us against the prefill's 128 x 128 tiles' 12.59 at batch 1 x 4,096 keys, 2-9% less at batch 1
        x 16,384 to 64 x 4,096: docs/notes/serving-plan.md); the others as they are (not measured)."""
        if self.head_dim != 128 or self.fp8:
            return self
        return replace(self, consumers=1, keys=64, stages=3, ctas_per_sm=2)

    @property
    def may_persist(self) -> bool:
        """Whether this configuration may walk a persistent grid: d in PERSISTENT_HEAD_DIMS."""
        return self.head_dim in PERSISTENT_HEAD_DIMS

    @property
    def rows(self) -> int:  # query rows a CTA
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def fp8(self) -> bool:
        """e4m3: V transposed in the kernel by the producer warpgroup, O in bf16, per-tensor scales."""
        return self.element == "e4m3"

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.element]

    @property
    def box_columns(self) -> int:
        return ROW_BYTES // self.element_bytes

    @property
    def producer_registers(self) -> int:
        if self.fp8:
            return TRANSPOSING_PRODUCER_REGISTERS
        if self.split_kv:
            return SPLIT_PRODUCER_REGISTERS
        # (paged: each box's block table entry and row; with pack_gqa's Q box, d 256's spilled at 24)
        return PERSISTENT_PRODUCER_REGISTERS if self.persistent or self.page_rows else PRODUCER_REGISTERS

    @property
    def consumer_registers(self) -> int:
        """What a consumer thread raises its registers to (`common.raised_registers`), at most 240."""
        return min(240, raised_registers(self.threads * self.ctas_per_sm, self.producer_registers, self.consumers))

    @property
    def q_bytes(self) -> int:
        return self.rows * self.head_dim * self.element_bytes

    @property
    def tile_bytes(self) -> int:  # a K, V or V^T tile
        return self.keys * self.head_dim * self.element_bytes

    @property
    def narrow_index(self) -> bool:  # (a persistent walk's indices are counted so as to stay small: `work`)
        return self.narrow or self.persistent

    @property
    def o_bytes(self) -> int:  # O's tile: rows x d, 16-bit
        return 2 * self.rows * self.head_dim

    @property
    def staging_offset(self) -> int:  # fp8's staged V tiles, after Q and the stages
        return self.q_bytes + 2 * self.stages * self.tile_bytes

    @property
    def tiles_bytes(self) -> int:  # Q, the stages (a K tile and a V tile each: V^T for fp8), fp8's staged V tiles
        return self.staging_offset + self.staged * self.fp8 * self.tile_bytes

    @property
    def o_in_stage(self) -> bool:
        """Persistent, where O's tile has no bytes of its own beside `tiles_bytes`: O is written over the last
        key tile's stage (its K and V, once every consumer is done with them), which is released once O's
        stores have read it."""
        return self.persistent and self.tiles_bytes + self.o_bytes + BARRIER_BYTES > max_shared_bytes(WARPGROUP_CHIP)

    @property
    def shared_bytes(self) -> int:
        """`tiles_bytes`, and a persistent walk's O tile where it has bytes of its own."""
        return self.tiles_bytes + (self.persistent and not self.o_in_stage) * self.o_bytes

    @property
    def o_offset(self) -> int | None:
        """Where the O tile is written before its TMA stores: one item a CTA, over Q's tile (16-bit: each
        consumer's band over its own rows of Q, which only it reads), fp8 over the staged V tiles; persistent,
        after `tiles_bytes`, so that the next item's Q and V load under this item's last key tile and epilogue
        (None: over the last key tile's stage, `o_in_stage`)."""
        if self.persistent:
            return None if self.o_in_stage else self.tiles_bytes
        return self.staging_offset if self.fp8 else 0

    @property
    def index_period(self) -> int:
        """A persistent walk counts the key tiles before an item modulo this: a multiple of twice each ring's
        stages (the K/V ring's and fp8's staging ring's), which leaves each tile's stage and phase parity as
        they are."""
        return 2 * math.lcm(self.stages, self.staged if self.fp8 else 1)

    def grid(self, batch_heads: int, seq: int, sms: int) -> int:
        """CTAs to launch: one a (head, row tile) item, or (persistent) `ctas_per_sm` an SM of the `sms` at most."""
        items = -(-seq // self.rows) * batch_heads
        return min(items, sms * self.ctas_per_sm) if self.persistent else items

    def __str__(self) -> str:
        return (f"attention_d{self.head_dim}_{self.element}{'_causal' if self.causal else ''}_r{self.rows}"
                f"k{self.keys}s{self.stages}{f't{self.staged}' if self.fp8 else ''}{'pp' if self.pingpong else ''}"
                f"{'u' if self.uniform_q else ''}{'n' if self.narrow_index and not self.persistent else ''}"
                f"{'l' if self.lazy_rescale else ''}{f'o{self.ctas_per_sm}' if self.ctas_per_sm > 1 else ''}"
                f"{'_persistent' if self.persistent else ''}{'_varlen' if self.varlen else ''}"
                f"{f'_paged{self.page_rows}' if self.page_rows else ''}{'_gqa' if self.pack_gqa else ''}"
                f"{'_splitkv' if self.split_kv else ''}_sm90a")
