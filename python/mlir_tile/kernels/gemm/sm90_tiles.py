"""The Hopper GEMM's configurations (`HopperConfig`), tile names and the measured table (data: no kernel)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from mlir_tile.isa.targets import REGISTER_FILE
from mlir_tile.kernels.common import SWIZZLE_COLUMNS, check_shared, raised_registers
from mlir_tile.kernels.epilogues import Choice


ELEMENT_BYTES = 2  # of C, and of A and B but with fp8 inputs
SWIZZLE_BITS = 1024  # a 128-byte swizzle's row: BK is this many bits of A's and B's elements
# what the producer keeps a thread: TMA's issue alone; with fp8 B [K, N] also the transposition (ptxas spills
# its byte permutes' words below 56)
PRODUCER_REGISTERS, TRANSPOSING_PRODUCER_REGISTERS = 40, 56
TRANSPOSE_STAGES = 2  # fp8 B [K, N]: k-tiles of B as TMA wrote them, waiting for the producer's transposition
BLOCK = 128  # fp8 blockwise scales' block: a row's 1 x 128 of A, 128 x 128 of B
MAX_PROMOTED_REGISTERS = 192  # fp8's promoted accumulation: accumulators and partials of a consumer thread, of its
# 232-240 (DeepGEMM takes BLOCK_N up to 160 for the same reason)


@dataclass(frozen=True)
class HopperConfig:
    bm: int = 128  # 64 rows a warpgroup
    bn: int = 128  # wgmma's N (8 to 256)
    bk: int = 64  # one 128-byte swizzled row of K a k-tile
    stages: int = 4
    b_major: str = "nk"
    a_major: str = "mk"  # A [M, K] (K-major, as wgmma reads it) or [K, M] ("km": MN-major, 16-bit: A^T of a backward)
    group: int = 8  # Triton's GROUP_SIZE_M
    specialized: bool = True  # a producer warpgroup (TMA, 40 registers a thread) beside the consumers (wgmma)
    persistent: bool = False  # one CTA an SM walking C tiles cta, cta + grid, ... (specialized; C its own tile)
    cluster: int = 1  # CTAs of a cluster, on adjacent row tiles of one column: each loads 1/cluster of B for all
    element_bits: int = 16  # A's and B's: 16 (f16, bf16: C of the same type) or 8 (e4m3: C bf16, BK 128)
    row_scales: bool = False  # fp8: scale_a per row of A ([M]) and scale_b per row of B ([N]), not per tensor
    consumer_rows: int = 64  # rows of C a consumer warpgroup: 64 (one m64 batch a k-tile) or 128 (two)
    split_k: bool = False  # `splits` CTAs a C tile, each a run of k-tiles, fp32 partials for gemm_reduce to sum
    pingpong: bool = False  # persistent, two consumers of all BM rows taking the walk's tiles in turn, one's
    # epilogue under the other's main loop (CUTLASS's ping-pong)
    promote: bool = False  # fp8 `precise` accumulation: each k-tile's products summed by wgmma into partials of
    # their own, then added into the fp32 accumulators (cuBLASLt's default and DeepGEMM's promotion: wgmma's fp8
    # sums keep fewer bits than fp32 over a long K); else `fast`, the products summed in the accumulators
    paired: bool = False  # promoted with two partial sets: k-tile t's batch issued into set t mod 2, then k-tile
    # t - 1's waited for (`wgmma_wait` of this one's groups) and added in under it (the k-loop unrolled by two)
    block_scales: bool = False  # fp8 blockwise scales (DeepGEMM's): scale_a [M, K / 128] (a row's 1 x 128 block
    # of K), scale_b [N / 128, K / 128] (128 x 128 blocks), applied to each k-tile's partials as they are added in
    row_blocks: bool = False  # blockwise, scale_b a row's 1 x 128 blocks of K too ([N, K / 128], as scale_a's): a
    # weight gradient's (dW = dY^T X, both read along the tokens, DeepGEMM's 1d1d); each column's own a k-tile
    swiglu: bool = False  # fused SwiGLU: B's rows gate and up weights interleaved a block of 8 at a time
    # (`swiglu_weights`), C = silu(gate) * up, BN / 2 columns a tile (a thread holds each output's two factors)
    grouped: bool = False  # masked grouped GEMM (MoE decode, DeepGEMM's masked layout): A [E x T, K] and C [E x T,
    # N] the experts' T rows each, B [E x N, K] their weights, each expert's first counts[e] rows computed (the
    # counts on the device: a CUDA graph holds the call), T a multiple of BM; a tile past its count does nothing
    contiguous: bool = False  # grouped, contiguous layout (MoE training and prefill): A [tokens, K] and C [tokens,
    # N] sorted by expert, expert e's rows [offsets[e - 1], offsets[e]) (torch._grouped_mm's offsets: int32 [E], on
    # the device), B [E x N, K]; row tiles made per expert (none straddles two), C's stores clipped at its last row
    ragged_k: bool = False  # grouped, the experts' rows the reduction (a contiguous grouped GEMM's weight gradient,
    # dW_e = dY_e^T X_e): A [tokens, M] read as [K, M] ('km'), B [tokens, N] as [K, N] ('kn'), C [E, M, N], expert
    # e summing its rows [offsets[e - 1], offsets[e]), the k-tile past its last row read as zeros (a 3-D map)
    uniform: bool = False  # the warpgroup's index broadcast from lane 0 (`Kernel.broadcast`): ptxas then keeps the
    # consumers' descriptors in uniform registers, not moved there (R2UR) before each wgmma (launched grids: no
    # moves left in the main loop, 104 -> 72 instructions a k-tile at 256 x 128; persistent ones keep theirs; not
    # yet timed)
    a_rows: int = 0  # A's box rows where fewer than BM (a multiple of 8): the product's M is at most that (decode,
    # one row tile), and TMA fills only those rows of the tile, not BM - M rows of zeros (1 x 4096^2 took 22.1 us
    # where 64 rows took 16.4 on one grid: docs/notes/operators.md, session 49); the tile's other rows keep what
    # they held and reach only C's rows past M, which its store clips. Not yet picked by the library, not yet run

    def __post_init__(self) -> None:
        if self.bm % 64 or not 64 <= self.bm <= 256 or self.bn % SWIZZLE_COLUMNS or not 64 <= self.bn <= 256:
            raise ValueError(f"hopper gemm: BM 64 to 256 (64 a warpgroup) and BN 64 to 256, multiples of 64; got "
                             f"{self.bm} x {self.bn}")
        if self.consumer_rows not in (64, 128) or self.bm % self.consumer_rows or (
                self.consumer_rows > 64 and (not self.specialized or self.accumulator_registers > 128)):
            raise ValueError(f"hopper gemm: a consumer takes 64 or 128 rows of BM (128: warp-specialized, its "
                             f"accumulators at most 128 registers a thread, BN <= 128); got {self.consumer_rows} of "
                             f"{self.bm} x {self.bn}{'' if self.specialized else ', unspecialized'}")
        if self.split_k and (not self.specialized or self.persistent or self.cluster > 1 or self.element_bits != 16):
            raise ValueError(f"hopper gemm: split-K is warp-specialized, not persistent, one CTA a cluster, 16-bit; "
                             f"got {self}")
        if self.pingpong and (not self.persistent or self.cluster > 1 or self.consumer_rows != self.bm
                              or self.element_bits != 16 or self.split_k):
            raise ValueError(f"hopper gemm: ping-pong consumers are persistent, one CTA a cluster, each of all BM rows "
                             f"(BM 128, 'w'), 16-bit, not split; got {self}")
        if self.persistent and not self.specialized:
            raise ValueError("hopper gemm: a persistent kernel is warp-specialized (its producer runs ahead into "
                             "the next tile)")
        if self.cluster not in (1, 2, 4) or self.cluster > 1 and not self.specialized:
            raise ValueError(f"hopper gemm: clusters of 1, 2 or 4 CTAs, warp-specialized (a producer multicasts "
                             f"its part of B); got {self.cluster}{'' if self.specialized else ', unspecialized'}")
        if self.cluster > 1 and self.b_major == "kn" and self.bn > SWIZZLE_COLUMNS:
            raise ValueError(f"hopper gemm: clusters with B [K, N] take BN {SWIZZLE_COLUMNS} (one multicast box a "
                             f"stage): with more boxes the H200 gave wrong products in the CTAs of rank 1 and up "
                             f"(docs/notes/hopper-path.md); got BN {self.bn}")
        if self.a_major not in ("mk", "km") or self.a_major == "km" and (self.element_bits != 16 or self.cluster > 1):
            raise ValueError(f"hopper gemm: A 'mk' ([M, K]) or 'km' ([K, M], read MN-major: 16-bit, one CTA a "
                             f"cluster); got {self}")
        if self.promote and (self.element_bits != 8 or not self.specialized or self.persistent
                             or 2 * self.accumulator_registers > MAX_PROMOTED_REGISTERS):
            raise ValueError(f"hopper gemm: promoted accumulation is fp8's, warp-specialized, not persistent, the "
                             f"accumulators and the partials at most {MAX_PROMOTED_REGISTERS} registers a thread "
                             f"(BN <= {MAX_PROMOTED_REGISTERS} a 64-row consumer); got {self}")
        if self.paired and (not self.promote or self.block_scales or self.grouped
                            or 3 * self.accumulator_registers > MAX_PROMOTED_REGISTERS):
            raise ValueError(f"hopper gemm: paired partials are the promoted accumulation's (no blockwise scales, "
                             f"not grouped), the accumulators and two partial sets at most {MAX_PROMOTED_REGISTERS} "
                             f"registers a thread (BN <= 128 a 64-row consumer); got {self}")
        if self.block_scales and (not self.promote or self.row_scales or self.bn != BLOCK or self.bk != BLOCK):
            raise ValueError(f"hopper gemm: blockwise scales are applied where each k-tile's partials are added in "
                             f"(promote), BN and BK {BLOCK} (one block of B's scales a k-tile), not beside row "
                             f"scales; got {self}")
        if self.row_blocks and (not self.block_scales or self.grouped):
            raise ValueError(f"hopper gemm: scale_b by rows' 1 x 128 blocks is blockwise scaling's (block_scales), "
                             f"of a dense product; got {self}")
        if self.swiglu and (self.element_bits != 16 or self.split_k or self.bn % (2 * SWIZZLE_COLUMNS)):
            raise ValueError(f"hopper gemm: fused SwiGLU takes 16-bit inputs, no split-K, BN a multiple of "
                             f"{2 * SWIZZLE_COLUMNS} (C's tile BN / 2 wide, in boxes of {SWIZZLE_COLUMNS}); got {self}")
        if self.grouped and ((self.b_major != "nk" and (self.element_bits != 16 or not (self.contiguous or self.ragged_k)))
                             or not self.specialized
                             or self.persistent or self.split_k or self.cluster > 1):
            raise ValueError(f"hopper gemm: a grouped GEMM takes B [N, K] a group (16-bit contiguous ones [K, N] too), "
                             f"warp-specialized, launched (not persistent, not split, one CTA a cluster); got {self}")
        if self.ragged_k and (not self.grouped or self.contiguous or self.a_major != "km" or self.b_major != "kn"):
            raise ValueError(f"hopper gemm: a ragged reduction is a grouped GEMM's (not contiguous) with A 'km' and "
                             f"B 'kn' (the experts' rows of both); got {self}")
        if self.a_rows and (self.a_rows % 8 or not 8 <= self.a_rows < self.bm or self.a_major != "mk"
                            or self.cluster > 1 or self.grouped or self.persistent):
            raise ValueError(f"hopper gemm: A's box rows (a_rows) a multiple of 8 below BM, of A [M, K], one CTA a "
                             f"cluster, launched, not grouped; got {self}")
        if self.contiguous and not self.grouped:
            raise ValueError("hopper gemm: the contiguous layout is a grouped GEMM's (grouped=True)")
        if self.row_scales and self.element_bits != 8:
            raise ValueError("hopper gemm: row scales are fp8's (16-bit inputs take no scales)")
        if self.transposed and (not self.specialized or self.persistent or self.cluster > 1 or self.bn % 128
                                or self.stages <= TRANSPOSE_STAGES):
            raise ValueError(f"hopper gemm: fp8 with B [K, N] (each k-tile of B rewritten K-major by the producer "
                             f"warpgroup: wgmma reads 8-bit operands K-major only) is warp-specialized, not persistent, "
                             f"one CTA a cluster, BN a multiple of 128 (TMA boxes of 128 bytes), more than "
                             f"{TRANSPOSE_STAGES} stages; got {self}")
        if (self.element_bits not in (8, 16) or self.bk != SWIZZLE_BITS // self.element_bits or self.stages < 2
                or self.b_major not in ("nk", "kn")):
            raise ValueError(f"hopper gemm: elements of 16 or 8 bits, BK {SWIZZLE_BITS // 16} or "
                             f"{SWIZZLE_BITS // 8} (a 128-byte swizzled row), 2 stages or more, B 'nk' or 'kn'; got "
                             f"{self}")
        check_shared("hopper gemm", self, self.shared_bytes, "fewer stages or a smaller tile")

    @property
    def unit(self) -> int:  # N a multiple of it (TMA: C's rows on 16 bytes, fp8 B [K, N]'s too); the kernel takes N / unit
        return 16 if self.transposed else 8

    @property
    def k_unit(self) -> int:  # K is a multiple of it (A's and B's rows on 16 bytes); the kernel takes K / k_unit
        return 128 // self.element_bits

    @property
    def a_boxes(self) -> int:  # TMA boxes of A a k-tile: one K-major box, or (A [K, M]) one per 64 rows of BM
        return self.bm // SWIZZLE_COLUMNS if self.a_major == "km" else 1

    @property
    def c_columns(self) -> int:  # C's tile: BN columns, or (SwiGLU) one an interleaved gate and up pair
        return self.bn // 2 if self.swiglu else self.bn

    @property
    def consumers(self) -> int:  # warpgroups issuing wgmma, `consumer_rows` rows of C each (ping-pong: 2 in turn)
        return 2 if self.pingpong else self.bm // self.consumer_rows

    @property
    def stage_readers(self) -> int:  # consumer warps that read each stage: all, or (ping-pong) one consumer's
        return 4 if self.pingpong else 4 * self.consumers

    @property
    def accumulator_registers(self) -> int:  # fp32 accumulators a consumer thread: BN / 2 a 64-row batch
        return self.consumer_rows // 64 * self.bn // 2

    @property
    def transposed(self) -> bool:
        """fp8 with B [K, N]: the producer warpgroup rewrites each k-tile of B K-major (`byte_transpose`)."""
        return self.element_bits == 8 and self.b_major == "kn"

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + self.specialized)

    @property
    def rebalanced(self) -> bool:
        """Whether the producer gives its registers to the consumers (`setmaxnreg`): where the block could not
        have 255 a thread (with one consumer it can, and ptxas then knows no count to start from) and the
        consumers' accumulators are 64 registers a thread or more (with fewer, ptxas allocates below the
        entry count and ignores setmaxnreg: C7508)."""
        return self.specialized and self.threads * 255 > REGISTER_FILE and self.accumulator_registers >= 64

    @property
    def entry_registers(self) -> int:
        """What ptxas gives each thread at launch in a kernel that runs setmaxnreg: the register file over the
        block (its .maxntid), in multiples of 8."""
        return REGISTER_FILE // self.threads // 8 * 8

    @property
    def consumer_registers(self) -> int:
        """What each consumer thread raises its registers to: the pool setmaxnreg.inc draws on is only what this
        block's producer gave back (its 128 threads from `entry_registers` to `producer_registers`), shared out
        among the consumers in multiples of 8 (with 2 consumers 168 -> 232, CUTLASS's); asking for more waits
        forever."""
        return raised_registers(self.threads, self.producer_registers, self.consumers)

    @property
    def producer_registers(self) -> int:
        return TRANSPOSING_PRODUCER_REGISTERS if self.transposed else PRODUCER_REGISTERS

    @property
    def parts(self) -> list[int]:
        """Elements of a stage's A tile and B tile."""
        return [self.bm * self.bk, self.bn * self.bk]

    @property
    def stage_bytes(self) -> int:
        return self.stages * sum(self.parts) * self.element_bits // 8

    @property
    def staging_bytes(self) -> int:  # fp8 B [K, N]'s k-tiles as TMA wrote them, after the stages
        return TRANSPOSE_STAGES * self.bk * self.bn if self.transposed else 0

    @property
    def shared_bytes(self) -> int:  # the stages; the C tile reuses their bytes, persistent has its own after them
        c_tiles = (2 if self.pingpong else 1) if self.persistent else 0  # (a ping-pong consumer's C tile each)
        return self.stage_bytes + c_tiles * self.c_bytes + self.staging_bytes

    @property
    def c_bytes(self) -> int:
        return self.bm * self.c_columns * ELEMENT_BYTES

    @property
    def tile(self) -> dict:
        """The fields `hopper_config` takes as a tile (all but B's layout and the elements)."""
        return {name: getattr(self, name) for name in TILE_FIELDS}

    def grid(self, m: int, n: int, sms: int) -> int:
        """CTAs to launch: one per C tile, or (persistent) one per SM at most; whole clusters (a cluster's last
        rows of tiles may lie past M: its CTAs there load zeros and store nothing)."""
        clusters = -(-m // (self.bm * self.cluster)) * -(-n // self.bn)
        return self.cluster * (min(clusters, sms // self.cluster) if self.persistent else clusters)

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_g{self.group}_{self.b_major}"
                f"{'_akm' if self.a_major == 'km' else ''}"
                f"{'_ws' if self.specialized else ''}{'_persistent' if self.persistent else ''}"
                f"{f'_c{self.cluster}' if self.cluster > 1 else ''}{'_fp8' if self.element_bits == 8 else ''}"
                f"{'_rowscales' if self.row_scales else ''}{'_r128' if self.consumer_rows == 128 else ''}"
                f"{'_splitk' if self.split_k else ''}{'_pingpong' if self.pingpong else ''}"
                f"{'_promote' if self.promote else ''}{'_paired' if self.paired else ''}"
                f"{'_blockscales' if self.block_scales else ''}"
                f"{'_rowblocks' if self.row_blocks else ''}"
                f"{'_swiglu' if self.swiglu else ''}{'_grouped' if self.grouped else ''}"
                f"{'_contiguous' if self.contiguous else ''}{'_raggedk' if self.ragged_k else ''}"
                f"{'_uniform' if self.uniform else ''}{f'_a{self.a_rows}' if self.a_rows else ''}_sm90a")


# A tile: HopperConfig's fields other than B's layout and the elements (`HopperConfig.of`), as data
DEFAULT_TILE = {"bm": 128, "bn": 128, "bk": 64, "stages": 4}
FP8_TILE = {"bm": 128, "bn": 256, "bk": 128, "stages": 4}
FP8_ROWS_TILE = {"bm": 128, "bn": 128, "bk": 128, "stages": 4}
# (promoted: accumulators and partials, BN 192 at most; 128 x 192 measured 0.82-0.96x cuBLASLt's default on an H100,
# 128 x 128 0.77-0.88x: docs/notes/fp8-moe-plan.md)
FP8_PRECISE_TILE = {**FP8_ROWS_TILE, "bn": 192, "promote": True}
FP8_BLOCKS_TILE = {**FP8_ROWS_TILE, "promote": True, "block_scales": True}  # (blockwise: one block of B's scales a tile)
GROUPED_TILE = {"bm": 128, "bn": 256, "bk": 64, "stages": 3}  # 16-bit grouped GEMMs: bf16's measured tile, BM 128 (a
# masked group's T a multiple of it; a contiguous expert's last tile at most 127 rows short)
FP8_KN_TILE = {"bm": 128, "bn": 256, "bk": 128, "stages": 3}  # fp8 B [K, N]: the staging stages take the fourth stage's
TILE_FIELDS = tuple(name for name in HopperConfig.__dataclass_fields__ if name not in ("b_major", "a_major",
                                                                                    "element_bits", "row_scales"))


def default_tile(element: str, b_major: str = "nk") -> dict:
    if element == "e4m3":
        return FP8_KN_TILE if b_major == "kn" else FP8_TILE
    return DEFAULT_TILE


def hopper_config(b_major: str = "nk", tile: dict | None = None, element: str = "f16",
                  row_scales: bool = False, a_major: str = "mk") -> HopperConfig:
    """The Hopper kernel of `tile` (HopperConfig's fields but A's and B's layouts and the elements; default: the
    element's `default_tile`) for A's and B's layouts and the inputs' `element` (e4m3: 8-bit, BK 128);
    ValueError for a field it has not, or a kernel it does not take."""
    tile = default_tile(element, b_major) if tile is None else tile
    unknown = sorted(set(tile) - set(TILE_FIELDS))
    if unknown:
        raise ValueError(f"hopper gemm: a tile's fields are {', '.join(TILE_FIELDS)}; got {', '.join(unknown)}")
    return HopperConfig(**tile, b_major=b_major, element_bits=8 if element == "e4m3" else 16, row_scales=row_scales,
                        a_major=a_major)


# The tile where the measured one leaves SMs idle (twice the CTAs of the widest), and a `Choice`'s: its arms'
# registers beside 128-row consumers' accumulators spill (3.8 KB a thread with `selectable` on 256 x 128)
SMALL_TILE = DEFAULT_TILE
# bias + these, shipped as chains of their own on the measured tiles (why these: docs/notes/benchmark-history.md,
# "The configuration tables' measurements")
SHIPPED_ACTIVATIONS = ("gelu_tanh", "silu")
MEASURED_TILES = "hopper_tiles.json"  # beside this module: written by `benchmarks/gemm.py hopper-table`


def measured_tile(element: str, b_major: str) -> dict:
    """The tile benchmarks/gemm.py's `hopper` measured fastest at the most shapes for `element` and B's layout
    (MEASURED_TILES, data the benchmark writes with its provenance: `hopper-table`)."""
    return dict(_measured_tiles(element, b_major))


@functools.lru_cache(maxsize=None)
def _measured_tiles(element: str, b_major: str) -> tuple:
    import json
    from pathlib import Path

    table = json.loads((Path(__file__).parent / MEASURED_TILES).read_text())["tiles"]
    key = f"{element}:{b_major}"
    if key not in table:
        raise ValueError(f"hopper gemm: {MEASURED_TILES} has no measured tile for {key}; it has {sorted(table)}")
    return tuple(table[key]["fields"].items())


# Decode-shaped products (M <= DECODE_ROWS, weights streamed once): smaller tiles whose CTAs come near the SMs'
# count, measured fastest in CUDA graphs on an H100 (benchmarks/decode_tiles.py, docs/notes/operators.md session 48:
# 0.82-1.01x cuBLAS against 0.65-0.94x on SMALL_TILE with split-K)
DECODE_ROWS = 128
DECODE_TILES = ({"bm": 64, "bn": 64, "bk": 64, "stages": 8}, {"bm": 64, "bn": 128, "bk": 64, "stages": 8},
                {"bm": 128, "bn": 128, "bk": 64, "stages": 6})
DECODE_SPLIT_COLUMNS = 4096  # K a decode tile's split takes at least (at K 4096 one split ran best, at 11008 two)
# A's box rows of a decode tile where M is no more (`HopperConfig.a_rows`): TMA's zero fill of a 64-row box past M
# made M = 1 the slowest row count (1 x 4096^2 22.7 us on 64 rows, 15.8 on 8 or 16; cuBLAS 15.6: H100, session 50)
DECODE_A_ROWS = (8, 16, 32)


def library_config(m: int, n: int, b_major: str, *, sms: int, fill: float, epilogue=None,
                   element: str = "f16", decode: bool = False) -> HopperConfig:
    """`Matmul`'s kernel for an M x N product: the measured tile (`measured_tile`) where its CTAs cover `fill`
    of the `sms` multiprocessors and the epilogue is none or one `Epilogue`; else, where `decode` (A [M, K], no
    epilogue) and M is at most DECODE_ROWS, the one of DECODE_TILES with the most tiles that the SMs hold at
    once (none: the last), loading A's first DECODE_A_ROWS rows where M is no more; else SMALL_TILE."""
    measured = hopper_config(b_major, measured_tile(element, b_major))
    if measured.grid(m, n, sms) >= fill * sms and not isinstance(epilogue, Choice):
        return measured
    if decode and epilogue is None and m <= DECODE_ROWS:
        configs = [hopper_config(b_major, tile) for tile in DECODE_TILES]
        held = [config for config in configs if config.grid(m, n, sms) <= sms]
        picked = max(held, key=lambda config: config.grid(m, n, sms)) if held else configs[-1]
        return replace(picked, a_rows=next((rows for rows in DECODE_A_ROWS if m <= rows), 0))
    return hopper_config(b_major, SMALL_TILE)


SPLIT_COLUMNS = 1024  # K each split of a split-K product on Hopper's path takes at least (16 k-tiles of 64)


def library_splits(m: int, n: int, depth: int, config: HopperConfig, *, sms: int, fill: float,
                   most: int) -> int:
    """How many CTAs share each C tile's k-tiles on Hopper's path (`config` as `library_config` picked it): 1
    where its tiles cover `fill` of the SMs, else as many as fill the SMs once, each with SPLIT_COLUMNS of K at
    least (a decode tile's, DECODE_SPLIT_COLUMNS), `most` at most."""
    tiles = config.grid(m, n, sms)
    if tiles >= fill * sms:
        return 1
    decode = any(replace(config, a_rows=0) == hopper_config(config.b_major, tile) for tile in DECODE_TILES)
    columns = DECODE_SPLIT_COLUMNS if decode else SPLIT_COLUMNS
    return max(1, min(sms // tiles, depth // columns, most))


SCALINGS = ("tensor", "rows", "blocks", "row_blocks")  # fp8's scales: one a tensor, one a row (scale_a [M], scale_b
# [N]), blockwise (scale_a [M, K / 128], scale_b [N / 128, K / 128]), and scale_b by rows' blocks too ([N, K / 128])


@functools.lru_cache(maxsize=None)  # (asked each call: a HopperConfig's checks cost a call's host time)
def scaled_config(b_major: str, scaling: str, precise: bool = False) -> HopperConfig:
    """`ScaledMatmul`'s kernel for `scaling` (SCALINGS): the fp8 tile measured fastest for B's layout
    (`measured_tile`), or with per-row scales FP8_ROWS_TILE (beside 128 x 256's accumulators the scales spill);
    `precise` (the promoted accumulation) FP8_PRECISE_TILE (BN 128 with row scales, which spill 412 bytes beside
    BN 192's, and with B [K, N], whose transposition takes boxes of 128); blockwise FP8_BLOCKS_TILE (promoted: the
    scales applied as each k-tile is added in), with B's rows' blocks too (`row_blocks`)."""
    if scaling in ("blocks", "row_blocks"):
        return hopper_config(b_major, {**FP8_BLOCKS_TILE, "row_blocks": scaling == "row_blocks"}, "e4m3")
    rows = scaling == "rows"
    promoted = FP8_PRECISE_TILE if b_major == "nk" and not rows else {**FP8_PRECISE_TILE, "bn": 128}
    tile = promoted if precise else FP8_ROWS_TILE if rows else measured_tile("e4m3", b_major)
    return hopper_config(b_major, tile, "e4m3", rows)


@functools.lru_cache(maxsize=None)  # (asked each call: a HopperConfig's checks cost a call's host time)
def swiglu_config(element: str):
    """`SwigluMatmul`'s kernel: the tile measured fastest for `element` with B [N, K], its epilogue fused SwiGLU."""
    return replace(hopper_config("nk", measured_tile(element, "nk"), element), swiglu=True)


@functools.lru_cache(maxsize=None)  # (asked each call: a HopperConfig's checks cost a call's host time)
def grouped_config(element: str, contiguous: bool = False, epilogue=None):
    """`GroupedMatmul`'s kernel, masked or `contiguous`, with B [N, K]: 16-bit GROUPED_TILE (SMALL_TILE for an
    `epilogue` that reads operands by column: beside 128 x 256's accumulators and the contiguous walk's values a
    bias spills 300 bytes), e4m3 the blockwise one (128 rows each: the masked groups' T a multiple of it)."""
    by_column = epilogue is not None and any(o.kind in ("column", "group_column", "matrix") for o in epilogue.operands)
    tile = FP8_BLOCKS_TILE if element == "e4m3" else SMALL_TILE if by_column else GROUPED_TILE
    return replace(hopper_config("nk", tile, element), grouped=True, contiguous=contiguous)


@functools.lru_cache(maxsize=None)  # (asked each call: a HopperConfig's checks cost a call's host time)
def grouped_gradient_configs(element: str) -> tuple:
    """The contiguous grouped GEMM's gradients' kernels (16-bit): dx's (contiguous, w read as B [K, N]) and dw's
    (`ragged_k`: grad and x read as A [K, M] and B [K, N], the reduction each expert's tokens)."""
    return (replace(grouped_config(element, contiguous=True), b_major="kn"),
            replace(grouped_config(element), a_major="km", b_major="kn", ragged_k=True))
