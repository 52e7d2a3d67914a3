"""Attention's forward pass on Hopper's data path (sm_90a), written with the builder alone: O = softmax(Q K^T *
scale (+ causal mask)) V and each row's log-sum-exp; f16 or bf16 with head dims 64, 128 and 256, and e4m3 with
per-tensor descales (O in bf16) at 128; any sequence length.

A CTA takes `rows` query rows of one (batch, head) (QueryTiles: causal, the longest rows first). Warpgroup 0
is the producer (`setmaxnreg` down to 24 registers a thread): its first thread loads each consumer's band of
Q's tile and then each key tile's K and V by TMA into a `TmaPipeline`'s stages (128-byte swizzled boxes of 128
bytes of columns side by side). Each consumer warpgroup takes 64 of the rows, in FlashAttention-3's order: key tile t's S = Q
K^T (wgmma from shared memory, K as the N x K operand) is issued beside tile t - 1's O += P V (P in registers
as the RS form's A, `accumulators_as_a`: the layouts prove every element stays in its thread; V read MN-major
from its [keys, d] tile); the online softmax of S (log2 domain, a row's max and sum over its quad, exp2) runs
under that P V, then the stage is released, O rescaled and P packed. Two consumers may take turns issuing
their GEMMs (`pingpong`: named barriers), so that one's softmax runs under the other's. Keys past the sequence, and
causal keys past a row, are masked only in the tiles that may hold them (`KeyTiles.unmasked`); causal tiles
past the CTA's last row are not loaded. The epilogue divides O by the row sums, stores the log-sum-exp
(natural log) of the rows inside the sequence, and writes O by stmatrix into shared memory and TMA stores
through a 3-D map, which stops each box at its head's last row.

e4m3 (wgmma reads 8-bit operands K-major only): V's tiles land in a staging ring, and the producer warpgroup
(56 registers) rewrites each as V^T in its stage (`transposition`: ldmatrix.trans, byte permutes, stmatrix,
proven conflict-free), each key at the column in which P's registers hold it (`atoms.a_key_order`), so that
P packs into e4m3 in its threads and wgmma reads V^T through that order.

Q, K and V are read through 2-D tensor maps over [batch * heads * seq, d]: a tile reaching past its head's
sequence reads the next head's rows (or TMA's zeros past the last), whose keys the mask sets to -inf (their
probabilities 0) and whose query rows are never stored.

Persistent (16-bit): one CTA an SM walks the (head, row tile) items c, c + grid, ... (causal: each head's row
tiles paired longest with shortest and dealt two at a time, `QueryTiles(paired=True)`, so that the CTAs' walks
weigh alike, the K/V index carried on across items of unequal key tiles); O's tile is not written over Q's but
into bytes of its own (or, where there are none, over the item's last key tile's stage), so each consumer
releases its band of Q once its last S is done, and the producer loads the next item's first K/V tiles and Q's
bands as the item's last tiles free their bytes: the next item's first S waits for nothing that loads under
this item's epilogue. The ping-pong turns run on across items.

Kernel parameters: `attention(q_map, k_map, v_map, o_map, lse, seq, batch_heads[, descale_q, descale_k,
descale_v])`: four pointers to CUtensorMaps (`boxes` lists their boxes: Q's, K's and V's 2-D over [batch * heads
* seq, d], O's 3-D over [batch * heads, seq, d], O 16-bit: the inputs' type, bf16 for e4m3), lse [batch * heads,
seq] f32, seq and batch x heads (64-bit), e4m3's three descales (f32, one element each). Grid
`HopperAttentionConfig.grid`, block `threads`, `shared_bytes` of dynamic shared memory.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, fields

from mlir_tile.kernels.hopper_gemm import BARRIER_BYTES, check_shared, output_element, raised_registers
from mlir_tile.isa.targets import SHARED_RESERVED_BYTES, max_shared_bytes, sm_shared_bytes

KERNEL = "attention"
LOG2E = 1.4426950408889634
ROW_BYTES = 128  # a 128-byte swizzled row: each tile is boxes of 128 bytes of columns side by side
BAND_BYTES = 64 * ROW_BYTES  # consumer c's 64 rows of Q's or O's tile start c times this many bytes in
# a persistent producer holds its walk's item beside the loads (at 24 it spilled); fp8's transposes V
PRODUCER_REGISTERS, PERSISTENT_PRODUCER_REGISTERS, TRANSPOSING_PRODUCER_REGISTERS = 24, 32, 56
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1}
HEAD_DIMS = (64, 128, 256)
PERSISTENT_HEAD_DIMS = (64, 128)
FP8_HEAD_DIMS, FP8_KEYS = (128,), 128  # fp8: V^T's rows one 128-byte swizzled row of keys
# each (head dim, causal)'s fields where not the defaults, as measured on the H200
# (benchmarks/results/attention_hopper.json): at 256, O takes 128 registers a thread and Q 64 KB a 128-row CTA: 64
# keys a tile and one consumer of 64 rows with 3 stages (224 KB) ran 1.10-1.25x two consumers with 2 stages (two of 64
# rows and 64 keys with 2 stages: 0.82-0.90x, session 30). At 64, three consumers (192 rows) of 64 keys ran 1.02-1.07x
# two of 128 (session 27), and three of 128 keys (FlashAttention-3's d 64 tile: the softmax's per-tile instructions
# spread over twice the scores, 6.4 a score, not 8.0) 1.13-1.16x three of 64 without the mask, 1.04-1.07x causal at S
# 4096 and 8192 (4 stages 0.98-1.02x 3, 2 stages 0.86-0.93x; two consumers of 192 or 256 keys spilled, 0.69-0.86x; the
# persistent grid 0.94-0.96x without the mask, 1.01x causal at 4096, 0.96x at 8192) (session 30). (With ping-pong, d
# 128 ran 0.93-1.03x without it (1.00-1.03x causal), d 64 0.92-0.97x (sessions 27 and 25).) At 128 without the mask,
# the persistent grid (O apart from Q, its indices in 32 bits) ran 1.03-1.10x the launched one at S 2048 to 8192, with
# uniform_q 1.05-1.08x without at S 1024, 1.00-1.02x at 2048 to 8192; causal, its row tiles paired, 1.19x at S 1024,
# 1.09x at 4096, 1.04x at 8192 (one consumer at d 64 causal: 0.67-0.72x its launched grid) (session 28). Q's
# descriptors in uniform registers (`uniform_q`) ran 1.04-1.06x without at d 64 (three consumers), 0.98-1.05x at d 64
# causal (two), 1.00-1.07x at d 128 causal, 0.98-1.03x at d 256 (left off) and 0.87-0.98x at d 128 without the mask on
# the launched grid (session 27) (d 64 causal: three consumers 1.06-1.11x two at S 4096 and 8192, 0.97x at 1024;
# before uniform_q 0.86-0.89x). The launched grid's pipeline indices divided in 32 bits (`narrow`) ran 1.02-1.06x at d
# 64, 1.03-1.07x at d 256 and 0.93-0.96x at d 128 (session 28).
_ONE_CONSUMER = {"keys": 64, "consumers": 1, "stages": 3, "narrow": True}
_THREE_CONSUMERS = {"keys": 128, "consumers": 3, "uniform_q": True, "narrow": True}
_PERSISTENT = {"persistent": True, "uniform_q": True}
SHAPES = {(256, False): _ONE_CONSUMER, (256, True): _ONE_CONSUMER, (128, False): _PERSISTENT, (128, True): _PERSISTENT,
          (64, False): _THREE_CONSUMERS, (64, True): _THREE_CONSUMERS}
# Fields over SHAPES' for sequences up to a length (`HopperAttentionConfig.picked`: the first length the sequence is
# within). At d 64 up to S 1024: without the mask the persistent grid with two consumers of 128 keys ran
# 1.07-1.09x three consumers (of 64 keys) launched (and their persistent one); at d 64 causal one consumer (64 rows a
# CTA) 1.25-1.27x three at S 1024 (1.02x at 4096, 0.94x at 8192) (session 28); there without the mask, uniform_q off
# ran 1.05-1.06x on (session 29); then the persistent grid of three consumers of 128 keys with uniform_q 1.03x two
# (session 30); then three CTAs an SM of one consumer (ctas_per_sm, launched) 1.04x that and, causal, 1.25x one CTA
# (its persistent grid 1.19-1.20x; at S 4096 1.02x the three consumers causal, 0.91x without the mask; at d 128 two
# CTAs of one consumer 0.83-0.91x) (session 31). At S 2048 the three CTAs ran 1.11-1.13x the three consumers causal
# (1.00-1.03x at 4096 in four runs, 0.94x at 8192), and without the mask the persistent grid of three consumers 1.06x
# them, the three CTAs 0.98x (session 31).
_THREE_CTAS = {"consumers": 1, "keys": 64, "ctas_per_sm": 3, "persistent": False}
SEQ_SHAPES = {(64, False): ((1024, _THREE_CTAS), (2048, {"persistent": True})), (64, True): ((4096, _THREE_CTAS),)}

# e4m3 (d 128): 4 stages ran 1.13-1.31x 3 (the loader of tile t + staged waits for that tile's stage, which frees
# later with fewer stages); without ping-pong, 4 stages ran 1.12-1.19x 5 and 1.03-1.06x 4 with it (session 26). The
# persistent grid with uniform_q ran 1.12-1.26x the launched one (1.25x at S 1024, 1.12-1.16x at 4096 and 8192,
# causal and not), uniform_q 1.04-1.07x without it there; lazy_rescale 1.06-1.07x without it (at 16 bits 0.94-1.01x:
# left off) (session 29; benchmarks/results/attention_hopper_fp8.json)
FP8_SHAPE = {"stages": 4, "uniform_q": True, "persistent": True, "lazy_rescale": True}
PINGPONG_BARRIERS = 2  # named barriers 2 and 3: consumer c waits on 2 + c for its turn to issue
O_BARRIERS = 4  # named barrier 4 + c: consumer c's warps have written their band of O
STAGE_FREED_BARRIER = 1  # O over the last key tile's stage (`o_in_stage`): every consumer is done reading it
O_BOX_COLUMNS = 64  # O's boxes: 64 columns of 16-bit elements (128 bytes), 64 rows (a consumer's)
# lazy_rescale: a row's max (in log2 units) lags its scores' by at most this, so a probability is at most 2^8 (e4m3's
# largest is 448; the row sums and O are fp32)
RESCALE_SLACK = 8.0


def seq_band(head_dim: int, causal: bool, seq: int) -> int:
    """Which of SEQ_SHAPES' lengths for this head dim and mask is the first `seq` is within (their count where
    none is)."""
    return sum(seq > longest for longest, _ in SEQ_SHAPES.get((head_dim, causal), ()))


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
        check_shared("hopper attention", self, self.shared_bytes, "fewer stages or keys")
        if not 1 <= self.ctas_per_sm <= 4:
            raise ValueError(f"hopper attention: 1 to 4 CTAs an SM, got {self.ctas_per_sm}")
        resident = self.ctas_per_sm * (self.shared_bytes + BARRIER_BYTES + SHARED_RESERVED_BYTES)
        if resident > sm_shared_bytes("sm_90a"):
            raise ValueError(f"hopper attention: {self.ctas_per_sm} CTAs an SM of {self}'s shared memory take "
                             f"{resident} bytes, more than an SM's {sm_shared_bytes('sm_90a')}: fewer CTAs or stages")

    @classmethod
    def of(cls, head_dim: int, causal: bool = False, element: str = "f16", **shape) -> "HopperAttentionConfig":
        """The configuration of a head dim, mask and element: `SHAPES`' for the head dim and mask (and FP8_SHAPE
        for e4m3), `shape`'s fields over them."""
        return cls(head_dim, causal, element,
                   **{**SHAPES.get((head_dim, causal), {}), **(FP8_SHAPE if element == "e4m3" else {}), **shape})

    @classmethod
    def picked(cls, head_dim: int, causal: bool, element: str, seq: int, **shape) -> "HopperAttentionConfig":
        """What `HopperAttention` runs on sequences of `seq`: `of`'s configuration with `shape`'s fields over it,
        or where no field is given, SEQ_SHAPES' for the first length `seq` is within. (A caller's field
        beside SEQ_SHAPES' need not fit: two consumers in three CTAs an SM would run out of registers.)"""
        lengths, band = SEQ_SHAPES.get((head_dim, causal), ()), seq_band(head_dim, causal, seq)
        fitted = lengths[band][1] if band < len(lengths) else {}
        return cls.of(head_dim, causal, element, **(shape or fitted))

    @property
    def may_persist(self) -> bool:
        """Whether this configuration may walk a persistent grid: d in PERSISTENT_HEAD_DIMS."""
        return self.head_dim in PERSISTENT_HEAD_DIMS

    @classmethod
    def fields_of(cls, text: str) -> dict:
        """The shape fields of "name=value,..." (e.g. "consumers=3,keys=64", "persistent=true"): ints and
        booleans (true/false); head_dim, causal and element are not among them. ValueError naming the field."""
        kinds = {f.name: f.type for f in fields(cls) if f.name not in ("head_dim", "causal", "element")}
        given = {}
        for item in filter(None, text.split(",")):
            name, _, value = item.partition("=")
            name, value = name.strip(), value.strip().lower()
            if name not in kinds:
                raise ValueError(f"hopper attention: a config field is one of {', '.join(kinds)}; got {name!r}")
            if kinds[name] == "bool" and value in ("true", "false"):
                given[name] = value == "true"
            elif kinds[name] == "int" and value.isdigit():
                given[name] = int(value)
            else:
                wanted = "true or false" if kinds[name] == "bool" else "an integer"
                raise ValueError(f"hopper attention: {name} takes {wanted}, got {value!r}")
        return given

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
        return PERSISTENT_PRODUCER_REGISTERS if self.persistent else PRODUCER_REGISTERS

    @property
    def consumer_registers(self) -> int:
        """What a consumer thread raises its registers to (`hopper_gemm.raised_registers`), at most 240."""
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
        return self.persistent and self.tiles_bytes + self.o_bytes + BARRIER_BYTES > max_shared_bytes("sm_90a")

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
                f"{'_persistent' if self.persistent else ''}_sm90a")


def _swizzle(config: HopperAttentionConfig):
    """The 128-byte swizzle on elements of the config's type (TMA's and wgmma's)."""
    from mlir_tile.isa.tma import Box

    return Box(8, config.box_columns, 8 * config.element_bytes, ROW_BYTES).layout.swizzle


def _boxed(rows: int, config: HopperAttentionConfig):
    """A rows x d tile (row, column) as TMA writes boxes of rows x 128 bytes side by side, swizzled."""
    from mlir_tile.algebra.layout import Layout

    width = config.box_columns
    return Layout((rows, (width, config.head_dim // width)), (width, (1, rows * width)), _swizzle(config))


@functools.lru_cache(maxsize=None)
def tiles(config: HopperAttentionConfig) -> dict:
    """The shared tiles' layouts in elements: Q (rows x d) and K (keys x d) as TMA writes them, K-major for
    wgmma; V as wgmma's B of P V, (d, keys): 16-bit, of K's [keys, d] boxes, MN-major; fp8 (K-major only), V^T
    as the producer writes it from the staged V tile ("v_staged", K's layout), each key k at column
    key_order(k) of its row, the order in which P's registers hold the keys (`atoms.a_key_order`), so that
    wgmma reads it through that order K-major."""
    from mlir_tile.isa.atoms import a_key_order, wgmma
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.operations import composition

    kv, q = _boxed(config.keys, config), _boxed(config.rows, config)
    layouts = {"q": q, "q_band": _band(q), "k": kv, **_o_tiles(config)}
    if not config.fp8:
        (keys, columns), (key_stride, column_stride) = kv.shape, kv.stride
        return {**layouts, "v": Layout((columns, keys), (column_stride, key_stride), kv.swizzle)}
    order = a_key_order(wgmma(config.keys, config.element), wgmma(config.head_dim, config.element))
    v_t = Layout((config.head_dim, config.keys), (config.keys, 1), _swizzle(config))
    return {**layouts, "v_staged": kv, "v_t": v_t, "v": composition(v_t, (None, order)), "key_order": order}


def _o_tiles(config: HopperAttentionConfig) -> dict:
    """O's tile (rows x d, 16-bit, `hopper_gemm.stored_tile`): a consumer's 64 rows of it ("o", the TMA stores'
    boxes) and of its words from its first ("o_band", what its stmatrix writes)."""
    from mlir_tile.kernels.hopper_gemm import stored_tile
    from mlir_tile.algebra.layout import Layout

    tile = stored_tile(config.rows, config.head_dim, O_BOX_COLUMNS)
    return {"o": _band(tile["c"]), "o_band": tile["c_band"]}


def _band(tile):
    """A consumer's 64 rows of a (rows, columns) tile: the first's; consumer c's `BAND_BYTES` c further."""
    from mlir_tile.algebra.layout import Layout

    return Layout((64, tile.shape[1]), (tile.stride[0], tile.stride[1]), tile.swizzle)


@functools.lru_cache(maxsize=None)
def transposition(config: HopperAttentionConfig):
    """fp8: the staged V tile (keys x d bytes) rewritten as V^T in P's key order (`byte_transpose`), each word
    layout proven to hold its tile's bytes."""
    from mlir_tile.tiling.byte_transpose import byte_transpose
    from mlir_tile.algebra.words import words_of

    layouts = tiles(config)
    return byte_transpose(words_of(layouts["v_staged"], 4), words_of(layouts["v_t"], 4), layouts["key_order"])


def o_stores(config: HopperAttentionConfig) -> list:
    """A consumer's TMA stores of O: per box, (its first element in the band, its first column of O, the box)."""
    return _boxes_at(tiles(config)["o"], 16, O_BOX_COLUMNS)


def _boxes_at(layout, element_bits: int, columns: int) -> list:
    """A tile's TMA boxes of `columns` columns (`tma.column_boxes`): per box, (its first element in the tile,
    its first column, the box), the column read off the layout at that element."""
    from mlir_tile.isa.tma import column_boxes

    first_columns = {layout.offset(0, column): column for column in range(layout.sizes[1])}
    return [(offset, first_columns[offset], box) for offset, box in column_boxes(layout, element_bits, columns)]


@functools.lru_cache(maxsize=None)
def boxes(config: HopperAttentionConfig) -> dict:
    """The TMA box of each tensor map (Q's and O's: a consumer's 64 rows; K's and V's: a key tile's): the first
    of its tile's boxes."""
    layouts = tiles(config)
    return {**{name: _boxes_at(layouts[tile], 8 * config.element_bytes, config.box_columns)[0][2]
               for name, tile in (("q", "q_band"), ("k", "k"), ("v", "k"))}, "o": o_stores(config)[0][2]}


def build_module(config: HopperAttentionConfig = HopperAttentionConfig(), context=None):
    """The kernel of `config` (see the module's text)."""
    from mlir_tile.builder import Global, Kernel, TensorMap

    scales = [Global("f32")] * 3 if config.fp8 else []
    # four warpgroups: without the occupancy ptxas cannot tell a thread's registers at launch and ignores setmaxnreg
    # (C7508); up to three it can, and the measured kernels are left as they were built
    occupancy = config.ctas_per_sm if config.ctas_per_sm > 1 else 1 if config.consumers == 3 else None
    with Kernel(KERNEL, [TensorMap()] * 4 + [Global("f32"), "index", "index"] + scales, block=(config.threads, 1, 1),
                chip="sm_90a", fast_math=True, min_blocks_per_sm=occupancy, context=context) as k:
        _HopperAttention(k, config).build()
    return k.module


class _HopperAttention:
    def __init__(self, k, config: HopperAttentionConfig):
        from mlir.dialects import arith

        from mlir_tile.isa.atoms import wgmma
        from mlir_tile.builder.schedule import QueryTiles, StageRing, TmaPipeline

        self.k, self.config, self.d = k, config, config.head_dim
        self.q_map, self.k_map, self.v_map, self.o_map, self.lse, self.seq, batch_heads = k.arguments[:7]
        self.storage = "i8" if config.fp8 else config.element
        self.order = QueryTiles(k, self.seq, config.rows, reverse=config.causal, heads=batch_heads,
                                paired=config.causal and config.persistent)
        self.tiles = tiles(config)
        self.s_atom, self.o_atom = wgmma(config.keys, config.element), wgmma(self.d, config.element)
        self.s_halves, self.o_halves = _row_halves(self.s_atom), _row_halves(self.o_atom)  # (per atom: N / 2 slots)
        self.s_columns = _column_steps(self.s_atom)
        self.shared = k.dynamic_shared(alignment=1024)
        readers, boxes_across = 4 * config.consumers, self.d // config.box_columns
        tile_elements = config.keys * self.d
        # Q's bands: item j's band of consumer c is the ring's k-tile j * consumers + c (its stage c), released by
        # the consumer's storing warp once its last S is done (persistent) or once its TMA stores of O, written
        # over the band, have read it (narrow: j * consumers + c lies below 2^31, as Q's 64-row bands do)
        self.q_ring = StageRing(k, self.shared, config.consumers, [(self.storage, 64 * self.d)],
                                narrow=config.narrow_index)
        self.q_pipeline = TmaPipeline(k, self.q_ring, 1, boxes_across, name="q")
        # (narrow: the K/V index stays below 2 stages + the key tiles, `work`, and so below 2^31)
        self.ring = StageRing(k, self.shared, config.stages, [(self.storage, tile_elements)] * 2, start=config.q_bytes,
                              narrow=config.narrow_index)
        # fp8: V^T written by the producer warpgroup's 4 warps beside K's boxes; V's boxes into a staging ring
        self.pipeline = TmaPipeline(k, self.ring, readers, boxes_across * (2 - config.fp8), name="kv",
                                    writers=4 if config.fp8 else 0)
        if config.fp8:
            self.staging_ring = StageRing(k, self.shared, config.staged, [(self.storage, tile_elements)],
                                          start=config.staging_offset, narrow=config.narrow_index)
            self.staging = TmaPipeline(k, self.staging_ring, 4, boxes_across, name="staging")
        self.warpgroup = k.broadcast(k.warpgroup_id()) if config.uniform_q else k.warpgroup_id()
        # (its bound proven: wgmma's row block of Q)
        self.consumer = arith.remui(arith.subi(self.warpgroup, k.index(1)), k.index(config.consumers))
        self.scale = k.constant(LOG2E / math.sqrt(self.d), "f32")
        if config.fp8:  # S's scale times the descales of Q and K; O's, V's
            q_scale, k_scale, self.v_scale = (k.load(pointer, [0]) for pointer in k.arguments[7:10])
            self.scale = arith.mulf(self.scale, arith.mulf(q_scale, k_scale))
        self.negative_infinity = k.constant(float("-inf"), "f32")

    @contextlib.contextmanager
    def work(self):
        """`with self.work() as j:` the body once for each of this CTA's items (its block's; persistent, its walk:
        `QueryTiles.persistent`), j counting them, with the item's head, first row (`q0`), key tiles, and its key
        tiles' first index in the K/V pipeline (`kv`: the items before it took theirs, counted modulo
        `index_period`)."""
        from mlir import ir
        from mlir.dialects import arith

        from mlir_tile.builder.schedule import KeyTiles

        k, config = self.k, self.config
        first, count = self.order.persistent() if config.persistent else (k.block_id(), k.index(1))
        carried = None
        if config.persistent and config.causal:  # (items of unequal key tiles: the count carried on)
            carried = k.registers(1)
            k.store(k.constant(0), carried, [0])
        with k.loop(0, count) as j:
            item = self.order.walked(first, j) if config.persistent else first
            self.head, query_tile = self.order.of_block(item)
            self.q0 = arith.muli(query_tile, k.index(config.rows))
            self.head_row = arith.muli(self.head, k.as_index(self.seq))  # the head's first row of the 2-D maps
            self.g_lse = k.tensor(self.lse, (self.order.heads, self.seq))[self.head, None]
            self.key_tiles = KeyTiles(k, self.seq, config.keys, self.q0, config.rows, config.causal)
            # (the key tiles before the item counted modulo `index_period`: without the mask every item has as
            # many, j x that; causal, carried on)
            # (broadcast: else ptxas keeps the walk's K/V index, and the descriptors made from it, in vector
            # registers, moved to uniform ones for each wgmma: the persistent grid ran 1.05-1.28x with it)
            self.kv_base = None
            if carried is not None:
                self.kv_base = k.broadcast(arith.index_castui(ir.IndexType.get(), k.load(carried, [0])))
            elif config.persistent:
                self.kv_base = k.broadcast(arith.remui(arith.muli(j, self.key_tiles.count),
                                                       k.index(config.index_period)))
            self.first_item, self.last_item = k.compare("eq", j, 0), k.compare("eq", j, arith.subi(count, k.index(1)))
            self.item = j
            yield j
            if carried is not None:
                after = arith.remui(arith.addi(self.kv_base, self.key_tiles.count), k.index(config.index_period))
                k.store(arith.index_castui(ir.IntegerType.get_signless(32), after), carried, [0])

    def kv(self, tile):
        """Key tile `tile` of this item as the K/V pipeline (and fp8's staging pipeline) counts it."""
        from mlir.dialects import arith

        return tile if self.kv_base is None else arith.addi(self.kv_base, self.k.as_index(tile))

    def build(self) -> None:
        k, config = self.k, self.config
        with k.if_(k.compare("eq", self.warpgroup, 0)):
            k.set_max_registers(config.producer_registers, "decrease")
            if config.fp8:
                self.produce_transposed()
            else:
                with k.if_(k.compare("eq", k.thread_id(), 0)):
                    self.produce()
        with k.if_(k.compare("ne", self.warpgroup, 0)):
            k.set_max_registers(config.consumer_registers, "increase")
            self.consume()

    # ----- the producer -----
    def load_boxes(self, pipeline, index, tile_bytes, layout, tensor_map, row) -> None:
        """A tile's boxes (128 bytes of columns each, side by side in `layout`) from `row` of `tensor_map` into
        the shared bytes at `tile_bytes`, counted on `pipeline`'s stage of `index`."""
        from mlir.dialects import arith

        k, config = self.k, self.config
        for first, column, box in _boxes_at(layout, 8 * config.element_bytes, config.box_columns):
            view = k.view(self.shared, (box.rows * box.columns,), self.storage,
                          arith.addi(tile_bytes, k.index(first * config.element_bytes)))
            pipeline.load(index, k.tensor(view, box.layout), tensor_map, (row, k.index(column)))

    def produce(self) -> None:
        """Per item, Q's bands, then each key tile's K and V once its stage is free; after the first item, the
        first `stages` - 1 key tiles before Q, in the order their bytes free up under the item before: the
        stages of its last tiles but one, Q's bands once its last S is done, the last tile's stage once its
        P V is (or, `o_in_stage`, once its epilogue has stored O from it)."""
        from mlir.dialects import arith

        k = self.k
        with self.work():
            ahead = arith.select(self.first_item, k.index(0),
                                 k.minimum(self.key_tiles.count, self.config.stages - 1))
            with k.loop(0, ahead) as tile:
                self.load(tile)
            self.load_q()
            with k.loop(ahead, self.key_tiles.count) as tile:
                self.load(tile)

    def load_q(self) -> None:
        """This item's band of Q for each consumer, once its stage is free."""
        from mlir.dialects import arith

        k, consumers = self.k, self.config.consumers
        for consumer in range(consumers):
            band = self.q_band(k.index(consumer))
            self.q_pipeline.acquire(band)
            self.load_boxes(self.q_pipeline, band, k.index(consumer * BAND_BYTES), self.tiles["q_band"],
                            self.q_map, arith.addi(self.head_row, arith.addi(self.q0, k.index(64 * consumer))))

    def load(self, tile) -> None:
        """Key tile `tile`'s K into its stage once free, and its V there too (fp8: into its staging stage once
        the transposer is done with that)."""
        from mlir.dialects import arith

        k, ring, index = self.k, self.ring, self.kv(tile)
        self.pipeline.acquire(index)
        row = arith.addi(self.head_row, arith.muli(tile, k.index(self.config.keys)))
        stage = ring.stage(index)
        self.load_boxes(self.pipeline, index, ring.offset(stage, 0), self.tiles["k"], self.k_map, row)
        if not self.config.fp8:
            self.load_boxes(self.pipeline, index, ring.offset(stage, 1), self.tiles["k"], self.v_map, row)
            return
        self.staging.acquire(index)
        staged = self.staging_ring.offset(self.staging_ring.stage(index))
        self.load_boxes(self.staging, index, staged, self.tiles["v_staged"], self.v_map, row)

    def produce_transposed(self) -> None:
        """fp8: per item, the producer warpgroup transposes each key tile's V into its stage (`transpose`), its
        first thread loading Q and the first `staged` key tiles (persistent: those tiles first, as Q's bands
        free only once the item before's last S is done), then key tile t + `staged` after transposing tile t
        (the staging stage it fills was freed by that transposition)."""
        from mlir.dialects import arith

        k, persistent = self.k, self.config.persistent
        loader = k.compare("eq", k.thread_id(), 0)
        with self.work():
            count = self.key_tiles.count
            with k.if_(loader):
                if not persistent:
                    self.load_q()
                for tile in range(self.config.staged):
                    with k.if_(k.compare("ult", tile, count)):
                        self.load(k.index(tile))
                if persistent:
                    self.load_q()
            with k.loop(0, count) as tile:
                self.transpose(tile)
                later = arith.addi(tile, k.index(self.config.staged))
                with k.if_(arith.andi(loader, k.compare("ult", later, count))):
                    self.load(later)

    def transpose(self, tile) -> None:
        """fp8: once TMA wrote key tile `tile`'s V into its staging stage and its stage is free, V^T written
        there in P's key order (`transposition`), counted on the stage's full barrier beside K's boxes; the
        staging stage then released."""
        k, index = self.k, self.kv(tile)
        self.staging.wait(index)
        self.pipeline.acquire(index)
        k.transpose_bytes(transposition(self.config), self.shared,
                          self.staging_ring.offset(self.staging_ring.stage(index)),
                          self.ring.offset(self.ring.stage(index), 1))
        self.pipeline.written(index)
        self.staging.release(index)

    # ----- the consumers -----
    def consume(self) -> None:
        """The accumulators and row statistics; per item: the statistics and O cleared, the consumer's band of Q
        waited for, key tile 0's S and its softmax into P; then each further key tile (unmasked ones first) in
        FlashAttention-3's order, its S = Q K^T issued beside the previous tile's P V; the last P V; the
        epilogue."""
        k = self.k
        self.o_acc, self.s_acc = k.accumulators(self.o_atom), k.accumulators(self.s_atom)
        self.row_max, self.row_sum = k.registers(2, "f32"), k.registers(2, "f32")
        q_view = k.view(self.shared, (self.config.rows * self.d,), self.storage)
        self.q_tile = k.tensor(q_view, self.tiles["q"])
        with self.work():
            self.attend()
        if self.config.persistent and not self.config.o_in_stage:  # (the last item's stores read O's tile)
            with k.if_(k.compare("eq", self.consumer_thread(), 0)):
                k.tma_store_wait(0)

    def attend(self) -> None:
        from mlir.dialects import arith

        k = self.k
        for half in range(2):
            k.store(self.negative_infinity, self.row_max, [half])
            k.store(k.constant(0.0, "f32"), self.row_sum, [half])
        for slot in range(self.d // 2):  # (the item before's O)
            k.store(k.constant(0.0, "f32"), self.o_acc.registers, [slot])
        self.q_pipeline.wait(self.q_band())
        first = self.kv(0)
        self.pipeline.wait(first)
        self.wait_turn(first=True)
        k.wgmma(self.s_atom, self.q_tile, self.operand(first, 0), self.s_acc, accumulate=False,
                a_row_block=self.consumer)
        self.pass_turn()
        k.wgmma_wait(0, [self.s_acc])
        mine = self.own_key_tiles()
        if self.config.causal or not self.config.persistent:  # (O is still 0: nothing to rescale)
            self.softmax(0, masked=True)
        else:  # (tile 0 has no key past the sequence where S >= keys: the walk's short items ran 1.02-1.06x with
            # the unmasked softmax there; d 64's launched grid 0.98x, and d 128's causal walk spilled)
            whole = k.compare("ult", 0, mine.unmasked)
            with k.if_(whole):
                self.softmax(0, masked=False)
            with k.if_(arith.xori(whole, k.constant(True, "i1"))):
                self.softmax(0, masked=True)
        self.p = k.accumulators_as_a(self.s_acc, self.o_atom)
        split = arith.maxui(mine.unmasked, k.index(1))
        with k.loop(1, split) as tile:
            self.key_tile(tile, masked=False)
        with k.loop(split, mine.count) as tile:
            self.key_tile(tile, masked=True)
        if self.config.persistent:  # (the item's last S is done: the next item's Q may load under its last P V)
            self.release_q_band()
        last = self.kv(arith.subi(mine.count, k.index(1)))
        self.wait_turn()
        k.wgmma(self.o_atom, self.p, self.operand(last, 1), self.o_acc)
        self.pass_turn(last=True)
        k.wgmma_wait(0, [self.o_acc])
        if not self.config.o_in_stage:
            self.pipeline.release(last)
        with k.loop(mine.count, self.key_tiles.count) as tile:  # (the CTA's tiles past this consumer's diagonal)
            index = self.kv(tile)
            self.pipeline.wait(index)  # (its release then counts in this tile's phase of the stage)
            self.pipeline.release(index)
        self.epilogue(last)

    def own_key_tiles(self):
        """The key tiles this consumer walks: causal, 16-bit, on the launched grid, those up to its own last row
        (`KeyTiles` of its 64 rows), the CTA's others only released; else the CTA's (`key_tiles`). (Ping-pong's
        consumers take as many turns; fp8's O goes over the staged V tiles, which the producer may still be
        transposing for the other consumers; on the persistent grid d 64's walk spilled.)"""
        from mlir.dialects import arith

        from mlir_tile.builder.schedule import KeyTiles

        config = self.config
        if not config.causal or config.fp8 or config.pingpong or config.persistent or config.consumers == 1:
            return self.key_tiles
        first_row = arith.addi(self.q0, arith.muli(self.consumer, self.k.index(64)))
        return KeyTiles(self.k, self.seq, config.keys, first_row, 64, causal=True)

    def release_q_band(self) -> None:
        """This consumer's first warp (its storing thread's) releases its band of Q."""
        k = self.k
        with k.if_(k.compare("ult", self.consumer_thread(), 32)):
            self.q_pipeline.release(self.q_band())

    def consumer_thread(self):
        """This thread within its consumer warpgroup."""
        from mlir.dialects import arith

        return arith.remui(self.k.thread_id(), self.k.index(128))

    def q_band(self, consumer=None):
        """A consumer's band of Q in this item (this thread's consumer's by default), as Q's pipeline counts it."""
        from mlir.dialects import arith

        k = self.k
        return arith.addi(arith.muli(self.item, k.index(self.config.consumers)),
                          self.consumer if consumer is None else consumer)

    def wait_turn(self, first: bool = False) -> None:
        """Ping-pong: wait until the other consumer has issued its GEMMs of the same turn (consumer 1) or of the
        turn before (consumer 0: on an item's first turn, unless the item is the CTA's first)."""
        if self.config.pingpong:
            self.as_consumer([0, 1], lambda c: self._unless(self.first_item if first and c == 0 else None,
                                                            self.k.named_barrier, PINGPONG_BARRIERS + c))

    def pass_turn(self, last: bool = False) -> None:
        """Ping-pong: this consumer's GEMMs issued, the other's turn (each arrival met by one `wait_turn`: consumer
        1's last turn of the CTA's last item has no turn of consumer 0 after it)."""
        if self.config.pingpong:
            self.as_consumer([0, 1], lambda c: self._unless(self.last_item if last and c == 1 else None,
                                                            self.k.named_barrier_arrive, PINGPONG_BARRIERS + 1 - c))

    def _unless(self, skip, barrier, index: int) -> None:
        """barrier(index, 256) of the two consumers, where `skip` (an i1, or None: never) is false."""
        from mlir.dialects import arith

        if skip is None:
            barrier(index, 256)
            return
        with self.k.if_(arith.xori(skip, self.k.constant(True, "i1"))):
            barrier(index, 256)

    def as_consumer(self, consumers, act) -> None:
        """act(c) in consumer c's threads, for each c of `consumers` (a named barrier's index is a constant)."""
        for consumer in consumers:
            with self.k.if_(self.k.compare("eq", self.consumer, consumer)):
                act(consumer)

    def operand(self, index, part: int):
        """The K (part 0, S's N x K operand) or V (1, P V's: MN-major; fp8, V^T K-major in P's key order) in the
        stage of the K/V pipeline's tile `index` (`kv`)."""
        k, ring, config = self.k, self.ring, self.config
        view = k.view(self.shared, (config.keys * self.d,), self.storage, ring.offset(ring.stage(index), part))
        return k.tensor(view, self.tiles["kv"[part]])

    def key_tile(self, tile, masked: bool) -> None:
        """S = Q K^T of `tile` issued, then O += P V of the tile before; once S is in, its softmax (under that
        P V); once P V is done, its stage released, O rescaled and S's probabilities packed into P."""
        from mlir.dialects import arith

        k, index = self.k, self.kv(tile)
        before = arith.subi(index, k.index(1))
        self.pipeline.wait(index)
        self.wait_turn()
        k.wgmma(self.s_atom, self.q_tile, self.operand(index, 0), self.s_acc, accumulate=False,
                a_row_block=self.consumer)
        k.wgmma(self.o_atom, self.p, self.operand(before, 1), self.o_acc)
        self.pass_turn()
        k.wgmma_wait(1, [self.s_acc])
        corrections, moved = self.softmax(tile, masked)
        k.wgmma_wait(0, [self.o_acc])
        self.pipeline.release(before)

        def rescale():  # O's rows by exp2(old max - new max)
            for slot in range(self.d // 2):
                scaled = arith.mulf(k.load(self.o_acc.registers, [slot]), corrections[self.o_halves[slot]])
                k.store(scaled, self.o_acc.registers, [slot])
        if self.config.lazy_rescale:  # (where no max of the warp's rows moved, every factor is exp2(0) = 1)
            with k.if_(k.any_lane(moved)):
                rescale()
        else:
            rescale()
        k.accumulators_as_a(self.s_acc, self.o_atom, into=self.p)

    def softmax(self, tile, masked: bool) -> tuple[list, object]:
        """Each of the thread's two rows: its scores (masked: keys past the sequence, and causal past the row,
        at -inf), the new max (over the row's quad; lazy_rescale: the old one unless the scores pass it by more
        than RESCALE_SLACK), the probabilities exp2(s * scale - max) written over S's accumulators, the sum moved
        on. Returns the rows' corrections exp2(old max - new max) and whether either row's max moved (an i1)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, registers = self.k, self.s_acc.registers
        corrections, moved = [], []
        for half in range(2):
            slots = [slot for slot in range(self.config.keys // 2) if self.s_halves[slot] == half]
            scores = [k.load(registers, [slot]) for slot in slots]
            if masked:
                bound = self.key_bound(tile, half)
                scores = [arith.select(arith.cmpi(arith.CmpIPredicate.slt, k.constant(self.s_columns[slot]), bound),
                                       score, self.negative_infinity) for slot, score in zip(slots, scores)]
            peak = k.warp_reduce(_tree(scores, arith.maximumf), "max", lanes=4)
            old_max = k.load(self.row_max, [half])
            new_max = arith.maximumf(old_max, arith.mulf(peak, self.scale))
            if self.config.lazy_rescale:  # (from -inf any finite max moves on)
                passed = arith.cmpf(arith.CmpFPredicate.OGT, new_max,
                                    arith.addf(old_max, k.constant(RESCALE_SLACK, "f32")))
                new_max = arith.select(passed, new_max, old_max)
                moved.append(passed)
            # a row with no valid key yet keeps -inf: its probabilities exp2(-inf) = 0, not exp2(nan)
            finite = arith.cmpf(arith.CmpFPredicate.ONE, new_max, self.negative_infinity)
            safe_max = arith.select(finite, new_max, k.constant(0.0, "f32"))
            correction = k.exp2(arith.subf(old_max, safe_max))
            negative = arith.negf(safe_max)
            probabilities = [k.exp2(math_dialect.fma(score, self.scale, negative)) for score in scores]
            for slot, probability in zip(slots, probabilities):
                k.store(probability, registers, [slot])
            total = arith.addf(arith.mulf(k.load(self.row_sum, [half]), correction), _tree(probabilities, arith.addf))
            k.store(new_max, self.row_max, [half])
            k.store(total, self.row_sum, [half])
            corrections.append(correction)
        return corrections, arith.ori(*moved) if moved else None

    def key_bound(self, tile, half: int):
        """How many keys of tile `tile`, from this thread's first column of S (slot 0's), are valid for its row
        `half`: up to the sequence's end and, causal, its row's diagonal (an i32, negative where none is).
        Accumulator slot s holds a valid key where its column step `s_columns[s]` lies below it: one compare a
        score, not the key's and the row's."""
        from mlir import ir
        from mlir.dialects import arith

        k = self.k
        row, _ = self.s_acc.coordinate(self.s_halves.index(half))
        _, column = self.s_acc.coordinate(0)
        limit = k.as_index(self.seq)
        if self.config.causal:
            limit = k.minimum(limit, arith.addi(self._query(row), k.index(1)))
        first_key = arith.addi(arith.muli(k.as_index(tile), k.index(self.config.keys)), column)
        return arith.index_cast(ir.IntegerType.get_signless(32), arith.subi(limit, first_key))

    # ----- the epilogue -----
    def epilogue(self, last) -> None:
        """O / the row sums (fp8: times V's descale) and the row's log-sum-exp (natural log, by the first lane of
        its quad where the row lies inside the sequence); O through shared memory (`store_o`; `last`: the item's
        last key tile in the K/V pipeline)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, seq = self.k, self.k.as_index(self.seq)
        inverses, numerator = [], self.v_scale if self.config.fp8 else k.constant(1.0, "f32")
        for half in range(2):
            total = k.warp_reduce(k.load(self.row_sum, [half]), "add", lanes=4)
            inverses.append(k.divide(numerator, total))
            row, _ = self.o_acc.coordinate(self._first_slot(half))
            query = self._query(row)
            log_sum = arith.mulf(arith.addf(k.load(self.row_max, [half]), math_dialect.log2(total)),
                                 k.constant(1 / LOG2E, "f32"))
            with k.if_(arith.andi(k.leads_lanes(4), k.compare("ult", query, seq))):
                self.g_lse[query] = log_sum
        self.store_o(inverses, last)

    def store_o(self, inverses, last) -> None:
        """O's pairs packed and written by stmatrix into this consumer's 64-row band of the O tile
        (`HopperAttentionConfig.o_offset`), then one TMA store a box of 64 columns by the consumer's first thread
        once its warps have written (fenced, its named barrier): through the 3-D map of O [batch * heads, seq,
        d], so that rows past the sequence are not written. The band's bytes are free to write once: over Q,
        always (one item a CTA); O's own tile, once the item before's stores have read it; over the last key
        tile's stage, once every consumer's last P V is done. One item a CTA, once the stores have read the
        band, that thread's warp releases its band of Q; over the stage, the stage is released then."""
        from mlir.dialects import arith

        from mlir_tile.builder import transfer
        from mlir_tile.kernels.hopper_gemm import packed_slot
        from mlir_tile.tiling.tiled import tiled_store_c

        k, config, out = self.k, self.config, output_element(self.config.element)
        band = tiled_store_c(4, self.tiles["o_band"])
        packed = k.registers(band.whole.slots)
        for block in range(self.d // 8):
            for half in range(2):  # (c0, c1) of row l / 4, (c2, c3) eight rows further
                values = [arith.mulf(k.load(self.o_acc.registers, [4 * block + 2 * half + i]), inverses[half])
                          for i in range(2)]
                k.store(k.pack_f16(*values, out), packed, [packed_slot(block, half)])
        thread, own_o = self.consumer_thread(), config.persistent and not config.o_in_stage
        if own_o:
            with k.if_(k.compare("eq", thread, 0)):
                k.tma_store_wait(0)
            self.consumers_meet(O_BARRIERS)
        if config.o_in_stage:
            k.named_barrier(STAGE_FREED_BARRIER, 128 * config.consumers)
            tile = self.ring.offset(self.ring.stage(last), 0)
        else:
            tile = k.index(config.o_offset)
        first = arith.addi(tile, arith.muli(self.consumer, k.index(BAND_BYTES)))
        transfer(band.whole.opcode, k.view(self.shared, (self.tiles["o_band"].cosize,), "i32", first), packed,
                 dst_layout=band.whole.shared, src_layout=band.whole.registers, scope="warpgroup")
        k.async_proxy_fence()
        self.consumers_meet(O_BARRIERS)
        # [tma-store-coordinate]: the head a quotient of the item, q0 its row tile (a remainder, or the tiles
        # less one less a remainder or half of one) times the tile's rows: non-negative by construction
        row = arith.addi(self.q0, arith.muli(self.consumer, k.index(64)))
        with k.if_(k.compare("eq", thread, 0)):
            for offset, column, box in o_stores(config):
                view = k.view(self.shared, (box.rows * box.columns,), out, arith.addi(first, k.index(2 * offset)))
                k.tma_store(k.tensor(view, box.layout), self.o_map, (self.head, row, k.index(column)))
            if not own_o:  # (O's own tile: the next item's epilogue waits, or the walk's end)
                k.tma_store_wait(0)
        if config.o_in_stage:  # (the storing thread's warp arrives once its stores have read the stage)
            self.pipeline.release(last)
        elif not config.persistent:
            self.release_q_band()

    def consumers_meet(self, first_barrier: int) -> None:
        """Each consumer's 4 warps meet at named barrier `first_barrier` + its index."""
        self.as_consumer(range(self.config.consumers), lambda c: self.k.named_barrier(first_barrier + c, 128))

    def _query(self, row):
        from mlir.dialects import arith

        return arith.addi(self.q0, arith.addi(arith.muli(self.consumer, self.k.index(64)), row))

    def _first_slot(self, half: int) -> int:
        return next(slot for slot, h in enumerate(self.o_halves) if h == half)


def _slot_steps(atom, layout, what: str) -> list[int]:
    """Per accumulator slot, its coordinate in `layout` (the atom's accumulator rows or columns) less slot 0's,
    proven the same for every thread of the warpgroup; ValueError naming `what` otherwise."""
    steps = []
    for slot in range(atom.shape[1] // 2):
        offsets = {layout.offset(thread, slot) - layout.offset(thread, 0) for thread in range(128)}
        if len(offsets) != 1:
            raise ValueError(f"hopper attention: accumulator slot {slot} of {atom.name} is not {what}")
        steps.append(offsets.pop())
    return steps


def _row_halves(atom) -> list[int]:
    """Per accumulator slot, which of a thread's two rows it holds (0: its row, 1: eight further), proven on
    the atom's accumulator layout for every thread; ValueError otherwise."""
    steps = _slot_steps(atom, atom.c.rows, "one of a thread's two rows")
    if not set(steps) <= {0, 8}:
        raise ValueError(f"hopper attention: an accumulator slot of {atom.name} is not one of a thread's two rows")
    return [step // 8 for step in steps]


def _column_steps(atom) -> list[int]:
    """Per accumulator slot, its column less slot 0's, the same for every thread (proven on the atom's
    accumulator layout); ValueError otherwise."""
    return _slot_steps(atom, atom.c.columns, "a column step of every thread's")


def _tree(values, combine):
    """The values combined as a tree of pairs (depth log2 n)."""
    while len(values) > 1:
        values = [combine(*values[i:i + 2]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]



def shipped_kernels(chip: str):
    """(name, build) of the kernels `HopperAttention` picks (sm_90: each head dim, mask and element, and where
    SEQ_SHAPES changes it up to a length, those too)."""
    if chip != "sm_90":
        return
    for d in HEAD_DIMS:
        for causal in (False, True):
            for element in ("f16", "bf16", "e4m3") if d in FP8_HEAD_DIMS else ("f16", "bf16"):
                seqs = {1} | {longest + 1 for longest, _ in SEQ_SHAPES.get((d, causal), ())}
                configs = {HopperAttentionConfig.picked(d, causal, element, seq) for seq in seqs}
                for config in sorted(configs, key=str):
                    yield str(config), functools.partial(build_module, config)


class HopperAttention:
    """(O, log-sum-exp) of torch tensors q, k, v [batch, heads, seq, d] (contiguous; f16 or bf16 with d 64, 128
    or 256; float8_e4m3fn with d 128 and per-tensor descales, O in bf16) on Hopper's path, on torch's current
    stream; kernels from `library` (a `KernelLibrary`), the tensor maps kept (`hopper_gemm.TensorMaps`).
    ValueError for what the kernel does not take."""

    def __init__(self, library, shape: dict | None = None):
        """`shape`: HopperAttentionConfig's fields other than d, the mask and the element (keys, consumers,
        stages) where not the defaults."""
        from mlir_tile.kernels.hopper_gemm import TensorMaps

        self.library, self.maps, self.kernels, self.shape = library, TensorMaps(library.runtime), {}, shape or {}
        self.sms = library.runtime.device.properties.multiprocessor_count

    def __call__(self, q, k, v, *, causal: bool = False, descales=None):
        """`descales` (fp8 only, required there): fp32 tensors of one element each on q's device, (q's, k's,
        v's): the scores are (q k^T) * descale_q * descale_k / sqrt(d), O is P v * descale_v (FlashAttention-3's
        descale_q, descale_k, descale_v)."""
        import torch

        from mlir_tile.runtime import torch_stream

        element = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3"}.get(q.dtype)
        if element is None or k.dtype != q.dtype or v.dtype != q.dtype or q.dim() != 4 or not (
                q.shape == k.shape == v.shape):
            raise ValueError(f"hopper attention: q, k, v of one shape [batch, heads, seq, d], all float16, bfloat16 "
                             f"or float8_e4m3fn; got {tuple(q.shape)} {q.dtype}, {tuple(k.shape)} {k.dtype}, "
                             f"{tuple(v.shape)} {v.dtype}")
        batch, heads, seq, d = q.shape
        if d not in (FP8_HEAD_DIMS if element == "e4m3" else HEAD_DIMS):
            raise ValueError(f"attention: head dim {', '.join(map(str, HEAD_DIMS))} (256 on Hopper's path only; "
                             f"float8_e4m3fn: {', '.join(map(str, FP8_HEAD_DIMS))}), got {d}")
        if not all(x.is_cuda and x.is_contiguous() and x.data_ptr() % 16 == 0 for x in (q, k, v)) or seq == 0:
            raise ValueError("hopper attention: contiguous CUDA tensors on 16 bytes (TMA) with seq >= 1")
        scales = _descales(descales, element, q.device)
        key = (d, bool(causal), element, seq_band(d, bool(causal), seq))
        if key not in self.kernels:
            config = HopperAttentionConfig.picked(d, bool(causal), element, seq, **self.shape)
            self.kernels[key] = config, boxes(config), self.library.module(str(config),
                                                                           functools.partial(build_module, config))
        config, box, module = self.kernels[key]
        o = torch.empty(q.shape, dtype=torch.bfloat16 if config.fp8 else q.dtype, device=q.device)
        maps = [self.maps(x.view(batch * heads * seq, d), box[name]) for x, name in zip((q, k, v), "qkv")]
        maps.append(self.maps(o.view(batch * heads, seq, d), box["o"], store=True))
        lse = torch.empty(batch, heads, seq, dtype=torch.float32, device=q.device)
        module.launch(KERNEL, [*maps, lse, seq, batch * heads, *scales], grid=config.grid(batch * heads, seq, self.sms),
                      block=config.threads, shared_bytes=config.shared_bytes, stream=torch_stream(q))
        return o, lse


def _descales(descales, element: str, device) -> list:
    """fp8's three descales, checked: fp32 tensors of one element on `device`; none for 16-bit inputs."""
    import torch

    if element != "e4m3":
        if descales is not None:
            raise ValueError("hopper attention: descales are for float8_e4m3fn inputs")
        return []
    if (not isinstance(descales, (tuple, list)) or len(descales) != 3 or any(
            not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.numel() != 1 or x.device != device
            for x in descales)):
        raise ValueError(f"hopper attention: float8_e4m3fn inputs take descales (q's, k's, v's), each a float32 "
                         f"tensor of one element on {device}")
    return [x.contiguous() for x in descales]


def _inputs(config: HopperAttentionConfig, shape: tuple, rng) -> tuple[list, list]:
    """Random q, k, v of `shape` as the kernel takes them, and their values: 16-bit, uniform in [-1, 1); fp8,
    normal with std 2 (peaked rows, so that a key misplaced in P V shows) quantized with per-tensor scales
    (descale = max |x| / 448), the values descaled."""
    import numpy as np

    from mlir_tile.isa import fp8, halves

    if not config.fp8:
        raw = [halves.encode(rng.uniform(-1, 1, shape), config.element) for _ in range(3)]
        return raw, [halves.decode(x, config.element) for x in raw]
    raw, values, descales = [], [], []
    for _ in range(3):
        real = rng.normal(0, 2, shape)
        descale = np.float32(np.abs(real).max() / 448)
        raw.append(fp8.encode(real / descale, "e4m3"))
        values.append(fp8.decode(raw[-1], "e4m3") * descale)
        descales.append(np.array([descale], np.float32))
    return raw + descales, values


def run_and_check(ptx: str, config: HopperAttentionConfig, batch: int = 1, heads: int = 3,
                  seq: int = 200, sms: int | None = None) -> tuple[bool, str]:
    """The kernel of `config` in `ptx` on batch x heads x seq x d random q, k, v (`_inputs`) against numpy's
    fp32 attention of their values (`flash_attention.reference`): O within 8 units of the element's roundoff,
    the log-sum-exp within 1e-3; fp8: O within (2^-4 + 2 e) max |v| (P rounded to e4m3, each weight moved by
    the scores' error e, `fp8_score_error`), the log-sum-exp within 1e-3 + e. `sms`: the SMs a persistent grid
    fills, `ctas_per_sm` CTAs each at most (by default the device's multiprocessors; fewer: each CTA walks more
    items)."""
    import numpy as np

    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode
    from mlir_tile.kernels.flash_attention import reference
    from mlir_tile.runtime import Runtime

    if min(batch, heads, seq) < 1:
        raise ValueError(f"hopper attention: batch, heads and seq >= 1, got {batch}, {heads}, {seq}")
    d, out = config.head_dim, output_element(config.element)
    inputs, values = _inputs(config, (batch * heads, seq, d), np.random.default_rng(1))
    o, lse = np.zeros((batch * heads, seq, d), np.uint16), np.zeros((batch * heads, seq), np.float32)
    with Runtime() as runtime:
        buffers = [runtime.to_device(x) for x in inputs[:3] + [o, lse] + inputs[3:]]
        box = boxes(config)
        maps = [runtime.to_device(runtime.tensor_map(int(buffer.handle), (batch * heads * seq, d),
                                                     d * config.element_bytes, box[name]))
                for buffer, name in zip(buffers, "qkv")]
        maps.append(runtime.to_device(runtime.tensor_map(int(buffers[3].handle), (batch * heads, seq, d), 2 * d, box["o"],
                                                         2 * seq * d, store=True)))
        module = runtime.load_ptx(ptx, name=KERNEL)
        grid = config.grid(batch * heads, seq, sms or runtime.device.properties.multiprocessor_count)
        module.launch(KERNEL, [int(x.handle) for x in maps + buffers[4:5]] + [seq, batch * heads]
                      + [int(x.handle) for x in buffers[5:]],
                      grid=grid, block=config.threads, shared_bytes=config.shared_bytes)
        o, lse = runtime.to_host(buffers[3], o), runtime.to_host(buffers[4], lse)
        for buffer in buffers + maps:
            buffer.close()
    expected, expected_lse = reference(*values, config.causal)
    error, lse_error = float(np.abs(decode(o, out) - expected).max()), float(np.abs(lse - expected_lse).max())
    bound, lse_bound = 8 * UNIT_ROUNDOFF[out], 1e-3
    if config.fp8:  # P rounded to e4m3, and the scores' error (`fp8_score_error`)
        scores = fp8_score_error(values[0], values[1])
        bound = (2 ** -4 + 2 * scores) * float(np.abs(values[2]).max()) + 2 * UNIT_ROUNDOFF[out]
        lse_bound += scores
    ok = error <= bound and lse_error <= lse_bound
    return ok, (f"GPU: attention {batch} x {heads} x {seq} x {d} {config.element}{' causal' if config.causal else ''} "
                f"on Hopper's path ({config}: TMA, wgmma; {grid} CTAs) matches numpy: {ok} (O {error:.1e} of {bound:.1e}, lse "
                f"{lse_error:.1e} of {lse_bound:.1e})")


FP8_ACCUMULATION = 2.0 ** -12  # fp8 wgmma's sums: about 13 bits (cuBLAS's fp8 product on the H200 was off by 1.5e-4
# of the sum of |products| at K 128; DeepSeek-V3 reports about 14 bits on the H800)


def fp8_score_error(q, k) -> float:
    """A bound on how far fp8 wgmma's scores (q k^T / sqrt(d), [heads, seq, d] values) are from exact:
    FP8_ACCUMULATION times the largest sum of |products|; the log-sum-exp moves by as much."""
    import numpy as np

    largest = max(float((np.abs(q[h]) @ np.abs(k[h]).T).max()) for h in range(q.shape[0]))
    return FP8_ACCUMULATION * largest / math.sqrt(q.shape[-1])
