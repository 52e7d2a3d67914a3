"""C = A x B on Hopper's data path (sm_90a), written with the builder alone: TMA loads of A's and B's k-tiles
into 128-byte-swizzled stages completing on mbarriers, wgmma reading them through descriptors derived from
the stages' layouts, the accumulators (after an optional epilogue) packed and stored by stmatrix into a
swizzled C tile, and TMA stores of it. No address is computed by hand: tiles are layouts, TMA boxes and wgmma
descriptors are derived from them and proven (`mlir_tile.isa.tma`, `mlir_tile.isa.wgmma`), the stmatrix transfer is
checked by the contract and the C tile proven to be the TMA stores' boxes (`tma.column_boxes`).

f16 or bf16 in, fp32 accumulate, the input type out; or fp8 e4m3 in, scaled per tensor or per row, bf16 out
(`ScaledMatmul`). A row-major M x K, B row-major [N, K] (`b_major` "nk", the weight of
torch.nn.functional.linear: K-major, as wgmma reads it) or [K, N] ("kn": 16-bit read MN-major in boxes of 64
columns; fp8 rewritten K-major in the kernel by the producer warpgroup, `byte_transpose`), C row-major M x N;
any M, N, K >= 1 with N and K multiples of 8 (16 for fp8's K, and N with B [K, N]: TMA's rows on 16 bytes).
Tails need no predicate: TMA zero-fills the loads past the matrices and clips the stores.

Kernel parameters: `gemm(a_map, b_map, c_map, m, n, k)`: three pointers to 128-byte CUtensorMaps in global
memory (`tensor_maps` encodes them for the boxes `boxes` lists) and the three sizes. Grid: the C tiles, in
Triton's grouped order; block: `HopperConfig.threads`, 128 a warpgroup: consumers of 64 rows of C each, or
(tiles "...w") of 128 rows in two batches a k-tile, and, specialized, a producer first;
`HopperConfig.shared_bytes` of dynamic shared memory. The library's tile for each dtype and B layout is the
one `benchmarks/gemm.py` measured fastest (`measured_tile`, data in MEASURED_TILES).

Warp-specialized (`HopperConfig.specialized`, CUTLASS's and FlashAttention-3's form): warpgroup 0 is the
producer, lowered to 40 registers a thread (`setmaxnreg`), one thread of it issuing every k-tile's TMA loads
into the `TmaPipeline`'s stages as they are released; the consumers, raised to what the register file leaves,
wait for each k-tile, issue its wgmma batch and wait until only that batch is in flight (`wgmma_wait(1)`), so
the batch of k-tile t - 1 has read its stage, which each consumer warp then releases. The consumers meet on a
named barrier (the producer never reaches it) before stmatrix and before the TMA stores. Unspecialized, every
warpgroup is a consumer and thread 0 also refills each released stage between its batches.

Persistent (tiles "...p"): one CTA an SM walks C tiles cta, cta + grid, ..., the pipeline's k-tile count
running on across its tiles, C in its own region after the stages. Clusters (tiles "...c2", "...c4"): the
cluster's CTAs take adjacent row tiles of one column of C; each producer loads its A and its rank's rows of
each of B's boxes, multicast to every CTA of the cluster (`TmaPipeline(multicast=True)`: a stage is free once
every CTA's consumers released it).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir_tile.kernels.epilogues import Choice, Epilogue
from mlir_tile.isa.targets import REGISTER_FILE, max_shared_bytes

KERNEL = "gemm"
ELEMENT_BYTES = 2  # of C, and of A and B but with fp8 inputs
SWIZZLE_COLUMNS = 64  # 16-bit elements in a 128-byte swizzle's row: a box's width
SWIZZLE_BITS = 1024  # a 128-byte swizzle's row: BK is this many bits of A's and B's elements
# what the producer keeps a thread: TMA's issue alone; with fp8 B [K, N] also the transposition (ptxas spills
# its byte permutes' words below 56)
PRODUCER_REGISTERS, TRANSPOSING_PRODUCER_REGISTERS = 40, 56
BARRIER_BYTES = 1024  # the mbarriers' static shared memory, as ptxas lays it out beside the dynamic
# ping-pong's named barriers: 2 + c lets consumer c start its main loop, 4 + c meets consumer c's warps alone
PINGPONG_ORDER, PINGPONG_MEET = 2, 4
TRANSPOSE_STAGES = 2  # fp8 B [K, N]: k-tiles of B as TMA wrote them, waiting for the producer's transposition


def check_shared(kernel: str, config, shared_bytes: int, fix: str) -> None:
    """ValueError where `config`'s dynamic shared memory and the mbarriers' BARRIER_BYTES exceed a block's on
    sm_90a."""
    if shared_bytes + BARRIER_BYTES > max_shared_bytes("sm_90a"):
        raise ValueError(f"{kernel}: {config} needs {shared_bytes} bytes of shared memory and its barriers' "
                         f"{BARRIER_BYTES}, more than the {max_shared_bytes('sm_90a')} a block may use on sm_90a: "
                         f"{fix}")


def raised_registers(threads: int, producer: int, consumers: int) -> int:
    """What each consumer thread of a warp-specialized block raises its registers to (setmaxnreg.inc): the
    entry count (the register file over the block, in multiples of 8) and its share of what the producer
    warpgroup gave back going down to `producer`; asking for more waits forever."""
    entry = REGISTER_FILE // threads // 8 * 8
    return (entry + (entry - producer) // consumers) // 8 * 8


@dataclass(frozen=True)
class HopperConfig:
    bm: int = 128  # 64 rows a warpgroup
    bn: int = 128  # wgmma's N (8 to 256)
    bk: int = 64  # one 128-byte swizzled row of K a k-tile
    stages: int = 4
    b_major: str = "nk"
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
    uniform: bool = False  # the warpgroup's index broadcast from lane 0 (`Kernel.broadcast`): ptxas then keeps the
    # consumers' descriptors in uniform registers, not moved there (R2UR) before each wgmma (launched grids: no
    # moves left in the main loop, 104 -> 72 instructions a k-tile at 256 x 128; persistent ones keep theirs; not
    # yet timed)

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
        return self.bm * self.bn * ELEMENT_BYTES

    def grid(self, m: int, n: int, sms: int) -> int:
        """CTAs to launch: one per C tile, or (persistent) one per SM at most; whole clusters (a cluster's last
        rows of tiles may lie past M: its CTAs there load zeros and store nothing)."""
        clusters = -(-m // (self.bm * self.cluster)) * -(-n // self.bn)
        return self.cluster * (min(clusters, sms // self.cluster) if self.persistent else clusters)

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_g{self.group}_{self.b_major}"
                f"{'_ws' if self.specialized else ''}{'_persistent' if self.persistent else ''}"
                f"{f'_c{self.cluster}' if self.cluster > 1 else ''}{'_fp8' if self.element_bits == 8 else ''}"
                f"{'_rowscales' if self.row_scales else ''}{'_r128' if self.consumer_rows == 128 else ''}"
                f"{'_splitk' if self.split_k else ''}{'_pingpong' if self.pingpong else ''}"
                f"{'_uniform' if self.uniform else ''}_sm90a")


@functools.lru_cache(maxsize=None)  # (its proofs take seconds: a launcher asks for every new shape)
def tiles(config: HopperConfig) -> dict:
    """The shared tiles' layouts, in elements: A (BM x BK) and B (N x K coordinates) as TMA writes them, C
    (BM x BN) as TMA stores read it. A and B [N, K]: K-major rows of 128 bytes, `Sw<3,3,3>` (one box each);
    B [K, N]: boxes of BK rows by 64 columns side by side (MN-major for wgmma); C: boxes of BM rows by 64
    columns side by side. fp8 B [K, N] (`transposed`): "b_staging" (K x N: boxes of BK rows by 128 bytes side
    by side, as TMA writes them) and "b" as B [N, K]'s, which the transposer writes."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.isa.tma import Box

    swizzle = Box(64, SWIZZLE_COLUMNS, 16, 128).layout.swizzle
    boxes_of = config.bn // SWIZZLE_COLUMNS
    a = Box(config.bm, config.bk, config.element_bits, 128).layout
    staging = {}
    if config.transposed:
        columns = SWIZZLE_BITS // 8
        staging["b_staging"] = Layout((config.bk, (columns, config.bn // columns)), (columns, (1, config.bk * columns)),
                                      Box(config.bk, columns, 8, 128).layout.swizzle)
    if config.b_major == "nk" or config.transposed:
        b = Box(config.bn, config.bk, config.element_bits, 128).layout
    else:  # (n, k): n runs along a box's 64 columns, the boxes BK x 64 apart
        b = Layout(((SWIZZLE_COLUMNS, boxes_of), config.bk), ((1, config.bk * SWIZZLE_COLUMNS), SWIZZLE_COLUMNS), swizzle)
    return {"a": a, "b": b, **stored_tile(config.bm, config.bn), **staging}


def stored_tile(rows: int, columns: int, box_columns: int = SWIZZLE_COLUMNS) -> dict:
    """A 16-bit rows x columns tile as TMA stores read it ("c": boxes of rows x `box_columns` side by side,
    128-byte swizzled), its 32-bit words as stmatrix writes them ("c_words", `words_of`), and one warpgroup's
    64 rows of those words from its first word ("c_band"), proven to be every 64-row band's layout."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.words import words_of
    from mlir_tile.isa.tma import Box

    swizzle, boxes_of = Box(64, box_columns, 16, 128).layout.swizzle, columns // box_columns
    c = Layout((rows, (box_columns, boxes_of)), (box_columns, (1, rows * box_columns)), swizzle)
    c_words = words_of(c, 2)
    words = box_columns // 2
    c_band = Layout((64, (words, boxes_of)), (words, (1, rows * words)), c_words.swizzle)
    for group in range(rows // 64):
        if any(c_band.offset(r, w) + 64 * words * group != c_words.offset(64 * group + r, w)
               for r in range(64) for w in range(words * boxes_of)):
            raise ValueError(f"row band {group}'s rows of {c_words} are not {c_band} from its first word")
    return {"c": c, "c_words": c_words, "c_band": c_band}


@functools.lru_cache(maxsize=None)
def transposition(config: HopperConfig):
    """fp8 B [K, N]'s k-tile rewritten K-major: `byte_transpose` of the staging tile's words into B's, each
    word layout proven to hold its tile's bytes."""
    from mlir_tile.tiling.byte_transpose import byte_transpose
    from mlir_tile.algebra.words import words_of

    layouts = tiles(config)
    return byte_transpose(words_of(layouts["b_staging"], 4), words_of(layouts["b"], 4))


@functools.lru_cache(maxsize=None)
def boxes(config: HopperConfig):
    """The TMA boxes of A, B and C whose tensor maps the kernel takes: those its tiles' layouts prove (a tile
    of several boxes side by side: the first's, all alike; B's: a cluster CTA's part of one)."""
    from mlir_tile.isa.tma import box_for, column_boxes

    layouts = tiles(config)
    return {"a": box_for(layouts["a"], config.element_bits), "b": b_parts(config)[0][1],
            "c": column_boxes(layouts["c"], 16, SWIZZLE_COLUMNS)[0][1]}


@functools.lru_cache(maxsize=None)
def b_parts(config: HopperConfig) -> list:
    """What each CTA of a cluster loads of a stage's B tile and multicasts to all: (first element, box) of
    rank 0's part of each of the tile's boxes (B [N, K]: one box; [K, N]: one per 64 columns), rank r's
    r x the part's rows further down the box (rows and elements): the box's rows split in `cluster` bands,
    each band proven to be a box's layout from its first element."""
    from mlir_tile.isa.tma import Box, box_for, column_boxes

    layouts = tiles(config)
    whole = ([(0, box_for(layouts["b"], config.element_bits))] if config.b_major == "nk" else
             column_boxes(layouts["b_staging"], 8, SWIZZLE_BITS // 8) if config.transposed else
             column_boxes(_as_kn(layouts["b"]), 16, SWIZZLE_COLUMNS))
    parts = []
    for first, box in whole:
        part = Box(box.rows // config.cluster, box.columns, box.element_bits, box.swizzle_bytes)
        box_layout, part_layout = box.layout, part.layout
        for rank in range(1, config.cluster):  # (rank 0's part is the box's first rows, as any box's)
            if any(box_layout.offset(rank * part.rows + i, j) != rank * part.rows * part.columns + part_layout.offset(i, j)
                   for i in range(part.rows) for j in range(part.columns)):
                raise ValueError(f"hopper gemm: rows {rank * part.rows} on of B's box {box} are not the box {part}")
        parts.append((first, part))
    return tuple(parts)


def build_module(element: str = "f16", config: HopperConfig = HopperConfig(), context=None,
                 epilogue: Epilogue | Choice | None = None):
    """The kernel (see the module's text); `epilogue` applied to each accumulator before it is rounded, its
    operands the kernel's arguments after the sizes. e4m3 (`config.element_bits` 8): C is bf16, the
    accumulators scaled by scale_a x scale_b before the epilogue: two fp32 arrays after the sizes, of one
    element (per-tensor scales, as torch._scaled_mm takes them) or, with `config.row_scales`, scale_a [M] (A's
    rows) and scale_b [N] (B's rows: C's columns)."""
    from mlir_tile.builder import Global, Kernel, TensorMap
    from mlir_tile.kernels.gemm import operand_parameters

    if (element, config.element_bits) not in (("f16", 16), ("bf16", 16), ("e4m3", 8)):
        raise ValueError(f"hopper gemm: f16 or bf16 with 16-bit configurations, e4m3 with 8-bit ones; got "
                         f"{element!r} and {config}")
    if config.split_k and epilogue is not None:
        raise ValueError("hopper gemm: a split-K kernel writes fp32 partials; gemm_reduce applies the epilogue")
    parameters = [TensorMap(), TensorMap(), Global("f32") if config.split_k else TensorMap(), "index", "index", "index"]
    parameters += [Global("f32"), Global("f32")] if element == "e4m3" else []
    parameters += ["index"] if config.split_k else []  # the splits
    parameters += operand_parameters(epilogue, output_element(element)) if epilogue is not None else []
    with Kernel(KERNEL, parameters, block=(config.threads, 1, 1), chip="sm_90a", context=context,
                cluster=(config.cluster, 1, 1) if config.cluster > 1 else None) as k:
        _HopperGemm(k, element, config, epilogue).build()
    return k.module


def output_element(element: str) -> str:
    """C's element type for inputs of `element`: bf16 for fp8 (as torch._scaled_mm's out_dtype), else theirs."""
    return "bf16" if element == "e4m3" else element


def packed_slot(block: int, half: int) -> int:
    """The register slot of n8 block `block`'s packed pair `half` (c0 c1, or c2 c3 eight rows down) in the C
    stmatrix transfer (`tiled_store_c`'s c_slots(0, block)): the accumulator slots 4 block + 2 half, + 1."""
    return 4 * (block // 2) + 2 * (block % 2) + half


class _HopperGemm:
    def __init__(self, k, element: str, config: HopperConfig, epilogue):
        from mlir.dialects import arith

        from mlir_tile.isa.atoms import wgmma
        from mlir_tile.builder.schedule import StageRing, TileOrder, TmaPipeline
        from mlir_tile.builder.tensor import ceil_div, in_units

        self.k, self.element, self.config, self.epilogue = k, element, config, epilogue
        self.out, self.storage = output_element(element), "i8" if config.element_bits == 8 else element
        self.a_map, self.b_map, self.c_map, self.m, n_units, k_units = k.arguments[:6]
        self.scales = k.arguments[6:8] if element == "e4m3" else []
        self.extras = [] if config.split_k else k.arguments[6 + len(self.scales):]
        # rows on 16 bytes, proven
        self.n, self.depth = in_units(k, n_units, config.unit), in_units(k, k_units, config.k_unit)
        self.tiles, self.atom = tiles(config), wgmma(config.bn, element)
        # a cluster's CTAs take adjacent row tiles of one column (one C tile of cluster x BM rows to the order)
        self.order = TileOrder(k, (self.m, self.n), (config.bm * config.cluster, config.bn),
                               max(1, config.group // config.cluster))
        self.rank = k.cluster_rank() if config.cluster > 1 else None
        self.k_tiles = k.as_index(ceil_div(k, self.depth, config.bk))
        if config.split_k:
            self._split(k.arguments[6])
        self.shared = k.dynamic_shared(alignment=1024)
        self.ring = StageRing(k, self.shared, config.stages, [(self.storage, part) for part in config.parts])
        b_loads = 1 if config.b_major == "nk" else 0 if config.transposed else config.bn // SWIZZLE_COLUMNS
        self.pipeline = TmaPipeline(k, self.ring, config.stage_readers, 1 + b_loads, multicast=config.cluster > 1,
                                    writers=4 if config.transposed else 0)
        if config.transposed:  # B's k-tiles as TMA writes them, read by the transposing warpgroup
            self.staging_ring = StageRing(k, self.shared, TRANSPOSE_STAGES, [("i8", config.bk * config.bn)],
                                          start=config.stage_bytes)
            self.staging = TmaPipeline(k, self.staging_ring, 4, len(b_parts(config)), name="staging")
        self.warpgroup = k.broadcast(k.warpgroup_id()) if config.uniform else k.warpgroup_id()
        # the consumer's index (its 64 rows of A and C), and its threads counted from 0
        first = k.index(128 * config.specialized)
        self.consumer = arith.remui(arith.subi(self.warpgroup, k.index(int(config.specialized))), k.index(config.consumers))
        self.consumer_thread = arith.subi(k.thread_id(), first)
        # (ping-pong: each consumer takes all BM rows of its own tiles, its threads counted from its first)
        self.row_group = k.index(0) if config.pingpong else self.consumer
        if config.pingpong:
            self.consumer_thread = arith.remui(self.consumer_thread, k.index(128))
        self.side = None  # the ping-pong consumer being built
        self.producer = k.compare("eq", k.thread_id(), 0)
        # the first consumer thread issues C's TMA stores; ping-pong: each consumer's first, for its own tiles
        self.storer = (k.compare("eq", self.consumer_thread, 0) if config.pingpong
                       else k.compare("eq", k.thread_id(), first))
        # one per 64-row batch of the consumer's rows; batch b at A's row block consumer x batches + b
        self.accumulators = [k.accumulators(self.atom) for _ in range(config.consumer_rows // 64)]

    def _split(self, splits) -> None:
        """Split-K: this CTA's C tile and split (`SplitK`: the grid is splits x the tiles), its run of k-tiles
        from `k_first` (`k_tiles` of them, none where K has no more), and its fp32 slice of the workspace."""
        from mlir.dialects import arith

        from mlir_tile.builder.schedule import SplitK
        from mlir_tile.builder.tensor import ceil_div

        k, bk = self.k, self.config.bk
        split_k = SplitK(k, self.order.count, self.depth, bk, splits)
        self.split, self.split_tile = split_k.of_block(k.block_id())
        start, end = split_k.columns(self.split)
        self.k_first = arith.divui(start, k.index(bk))
        self.k_tiles = k.as_index(ceil_div(k, arith.subi(end, start), bk))
        self.partials = k.tensor(self.c_map, (splits, self.m, self.n))[self.split, None, None]

    def build(self) -> None:
        from mlir.dialects import arith

        k, config = self.k, self.config
        if not config.specialized:  # every warpgroup a consumer; thread 0 also loads, between its batches
            origin = self.origin(k.block_id())
            for k_tile in range(config.stages):  # the first k-tiles, each where K has it
                with k.if_(arith.andi(self.producer, k.compare("ult", k_tile, self.k_tiles))):
                    self.load(k.index(k_tile), origin, k.index(k_tile))
            self.consume(origin, k.index(0), 0)
            return
        first, own = (self.order.persistent(config.cluster) if config.persistent else
                      (self.split_tile, k.index(1)) if config.split_k else
                      (arith.divui(k.block_id(), k.index(config.cluster)), k.index(1)))
        with k.if_(k.compare("eq", self.warpgroup, 0)):  # the producer: one thread loads every k-tile
            if config.rebalanced:
                k.set_max_registers(config.producer_registers, "decrease")
            if config.transposed:
                self.produce_transposed(self.origin(first))
            else:
                with k.if_(self.producer):
                    with k.loop(0, own) as turn:
                        origin = self.origin(self._tile(first, turn))
                        with k.loop(0, self.k_tiles) as k_tile:
                            self.load(self._in_ring(turn, k_tile), origin, k_tile)
        if config.pingpong:
            self.consume_in_turns(first, own)
        else:
            with k.if_(k.compare("ne", self.warpgroup, 0)):
                if config.rebalanced:
                    k.set_max_registers(config.consumer_registers, "increase")
                with k.loop(0, own) as turn:
                    self.consume(self.origin(self._tile(first, turn)), turn,
                                 config.stage_bytes if config.persistent else 0)
        if config.cluster > 1:  # no CTA leaves while a peer may still arrive on its barriers
            k.cluster_barrier()

    def origin(self, tile):
        """The first element of this CTA's C tile of tile `tile` of the order (its rank's rows of a cluster's)."""
        from mlir.dialects import arith

        row0, col0 = self.order.origin(tile)
        if self.rank is None:
            return row0, col0
        return arith.addi(row0, arith.muli(self.rank, self.k.index(self.config.bm))), col0

    def _tile(self, first, turn):
        """The C tile of this CTA's walk at `turn`: first + turn x the grid's clusters (one turn unless
        persistent)."""
        from mlir.dialects import arith

        if not self.config.persistent:
            return first
        walkers = self.k.grid_size()
        if self.config.cluster > 1:
            walkers = arith.divui(walkers, self.k.index(self.config.cluster))
        return arith.addi(first, arith.muli(turn, walkers))

    def _in_ring(self, turn, k_tile):
        """The pipeline's count of `k_tile` of the walk's tile `turn`: the stages and phases run on across tiles."""
        from mlir.dialects import arith

        return arith.addi(arith.muli(self.k.as_index(turn), self.k_tiles), self.k.as_index(k_tile))

    def consume_in_turns(self, first, own) -> None:
        """Ping-pong: consumer c (warpgroup 1 + c) takes the walk's turns c, c + 2, ..., each with all BM rows
        and its own C tile after the stages; built once for each, so that its barriers are constants."""
        k, config = self.k, self.config
        for side in range(2):
            with k.if_(k.compare("eq", self.warpgroup, 1 + side)):
                if config.rebalanced:
                    k.set_max_registers(config.consumer_registers, "increase")
                self.side = side
                with k.loop(side, own, 2) as turn:
                    self.consume(self.origin(self._tile(first, turn)), turn, config.stage_bytes + side * config.c_bytes,
                                 own)
                self.side = None

    def consume(self, origin, turn, region: int, turns=None) -> None:
        """The consumers' main loop over one C tile (walk turn `turn`) and its epilogue through the C tile at
        byte `region`; a persistent walk then releases the tile's last stage and clears the accumulators.
        Ping-pong (`turns`: the walk's): the main loop starts once the other consumer's, of the turn before,
        has waited for all its k-tiles (so that every stage's phases this one waits on are the next ones), and
        lets the other consumer's next main loop start once it has waited for its own; the epilogue then runs
        under the other's main loop."""
        from mlir.dialects import arith

        k, config = self.k, self.config
        if self.side is not None:
            with k.if_(k.compare("uge", turn, 1)):
                k.named_barrier(PINGPONG_ORDER + self.side, 256)
        with k.loop(0, self.k_tiles) as k_tile:
            self.step(self._in_ring(turn, k_tile), k_tile, origin)
        if self.side is not None:
            with k.if_(k.compare("ult", arith.addi(turn, k.index(1)), turns)):
                k.named_barrier_arrive(PINGPONG_ORDER + 1 - self.side, 256)
        k.wgmma_wait(0, self.accumulators)
        if config.persistent:  # the producer's next tile needs every stage back
            self.pipeline.release(self._in_ring(turn, arith.subi(self.k_tiles, k.index(1))))
        if config.split_k:
            self.store_partials(origin)
        else:
            self.store_c(origin, region)
        if config.persistent:
            zero = k.constant(0.0, "f32")
            for accumulators in self.accumulators:
                for slot in range(config.bn // 2):
                    k.store(zero, accumulators.registers, [slot])

    def produce_transposed(self, origin) -> None:
        """fp8 B [K, N]: the producer warpgroup transposes each k-tile of B (`transpose`), its first thread
        loading k-tile t + TRANSPOSE_STAGES after transposing k-tile t (the staging stage it fills was freed by
        that transposition; its main stage needs the consumers past k-tile t + TRANSPOSE_STAGES - stages,
        whose stage t's transposition has filled: stages > TRANSPOSE_STAGES)."""
        from mlir.dialects import arith

        k = self.k
        with k.if_(self.producer):
            for k_tile in range(TRANSPOSE_STAGES):
                with k.if_(k.compare("ult", k_tile, self.k_tiles)):
                    self.load(k.index(k_tile), origin, k.index(k_tile))
        with k.loop(0, self.k_tiles) as k_tile:
            self.transpose(k_tile)
            later = self.ring.later(k_tile, TRANSPOSE_STAGES)
            with k.if_(arith.andi(self.producer, k.compare("ult", later, self.k_tiles))):
                self.load(later, origin, later)

    def transpose(self, k_tile) -> None:
        """fp8 B [K, N]: the producer warpgroup's turn at k-tile `k_tile`: once TMA wrote it into its staging
        stage and its stage is free, B's tile rewritten K-major there (`transposition`), counted on the stage's
        full barrier beside A's load; the staging stage then released."""
        k, ring, staging = self.k, self.staging_ring, self.staging
        staging.wait(k_tile)
        self.pipeline.acquire(k_tile)
        k.transpose_bytes(transposition(self.config), self.shared, ring.offset(ring.stage(k_tile)),
                          self.ring.offset(self.ring.stage(k_tile), 1))
        self.pipeline.written(k_tile)
        staging.release(k_tile)

    def load(self, in_ring, origin, k_tile) -> None:
        """k-tile `k_tile` of the C tile at `origin` (the pipeline's `in_ring`-th) into its stage, once free."""
        from mlir.dialects import arith

        k, config, pipeline = self.k, self.config, self.pipeline
        pipeline.acquire(in_ring)
        a_view, b_view = self.ring.views(self.ring.stage(in_ring))
        column = arith.muli(arith.addi(self.k_first, k_tile) if config.split_k else k_tile, k.index(config.bk))
        row0, col0 = origin
        pipeline.load(in_ring, k.tensor(a_view, self.tiles["a"]), self.a_map, (row0, column))
        if config.transposed:  # into the staging stage, once the transposer released it
            self.staging.acquire(in_ring)
            staged = self.staging_ring.offset(self.staging_ring.stage(in_ring))
            for first, box in b_parts(config):
                view = k.view(self.shared, (box.rows * box.columns,), "i8", arith.addi(staged, k.index(first)))
                self.staging.load(in_ring, k.tensor(view, box.layout), self.b_map,
                                  (column, arith.addi(col0, k.index(first // config.bk))))
            return
        if config.b_major == "nk" and config.cluster == 1:
            pipeline.load(in_ring, k.tensor(b_view, self.tiles["b"]), self.b_map, (col0, column))
            return
        b_at = self.ring.offset(self.ring.stage(in_ring), 1)
        for first, part in b_parts(config):  # B [K, N]: a box every 64 columns; this CTA's rows of each
            box_row, box_column = (col0, column) if config.b_major == "nk" else (column, arith.addi(
                col0, k.index(first // config.bk)))
            if self.rank is not None:
                first = arith.addi(k.index(first), arith.muli(self.rank, k.index(part.rows * part.columns)))
                box_row = arith.addi(box_row, arith.muli(self.rank, k.index(part.rows)))
            view = k.view(self.shared, (part.rows * part.columns,), self.storage,
                          arith.addi(b_at, arith.muli(k.as_index(first), k.index(config.element_bits // 8))))
            pipeline.load(in_ring, k.tensor(view, part.layout), self.b_map, (box_row, box_column),
                          multicast=None if self.rank is None else (1 << config.cluster) - 1)

    def step(self, in_ring, k_tile, origin) -> None:
        """k-tile `k_tile` (the pipeline's `in_ring`-th): its batch once its stage is full; then, the batch
        before retired, the stage before released by every consumer warp (and, unspecialized, refilled by
        thread 0 with the k-tile `stages` after that one)."""
        from mlir.dialects import arith

        k, config, ring, pipeline = self.k, self.config, self.ring, self.pipeline
        pipeline.wait(in_ring)
        a_view, b_view = ring.views(ring.stage(in_ring))
        a_tile, b_tile, batches = k.tensor(a_view, self.tiles["a"]), k.tensor(b_view, self.tiles["b"]), len(self.accumulators)
        first_block = arith.muli(self.row_group, k.index(batches)) if batches > 1 else self.row_group
        for batch, accumulators in enumerate(self.accumulators):
            k.wgmma(self.atom, a_tile, b_tile, accumulators,
                    a_row_block=arith.addi(first_block, k.index(batch)) if batch else first_block)
        k.wgmma_wait(batches)  # this k-tile's batches may run on; the previous one's have read their stage
        with k.if_(k.compare("uge", k_tile, 1)):
            pipeline.release(arith.subi(in_ring, k.index(1)))
            if not config.specialized:  # thread 0 refills the released stage (in_ring is k_tile here)
                refill = ring.later(arith.subi(k_tile, k.index(1)), config.stages)
                with k.if_(arith.andi(self.producer, k.compare("ult", refill, self.k_tiles))):
                    self.load(refill, origin, refill)

    def store_c(self, origin, region: int) -> None:
        """The accumulators (the epilogue applied) packed, each consumer's stmatrix into its 64-row bands of the
        C tile over the stages' bytes (one a batch), then one TMA store per 64-column box of it by the first
        consumer thread."""
        from mlir.dialects import arith

        from mlir_tile.builder import transfer
        from mlir_tile.kernels.gemm import for_each_arm
        from mlir_tile.tiling.tiled import tiled_store_c
        from mlir_tile.isa.tma import column_boxes

        k, config = self.k, self.config
        band = tiled_store_c(4, self.tiles["c_band"])  # 64 rows, one warpgroup's transfer
        packed = [k.registers(band.whole.slots) for _ in self.accumulators]
        c_c = k.identity_tensor((self.m, self.n))
        places = [self._place(c_c, origin, batch) for batch in range(len(self.accumulators))]

        def pack(finish):
            for accumulators, registers, place in zip(self.accumulators, packed, places):
                scaled = self.scaling(place)  # (its loads inside the arm's branch: one a scale, each arm)
                for block in range(config.bn // 8):
                    for half in range(2):  # (c0, c1) row l / 4, (c2, c3) eight rows further: register slot
                        values = []
                        for value_slot in (4 * block + 2 * half, 4 * block + 2 * half + 1):
                            value = scaled(k.load(accumulators.registers, [value_slot]), value_slot)
                            values.append(value if finish is None else
                                          finish(value, *place[self.consumer_thread, value_slot]))
                        k.store(k.pack_f16(*values, self.out), registers, [packed_slot(block, half)])

        for_each_arm(k, self.epilogue, self.extras, c_c.extent, pack)
        self.consumers_meet()  # every consumer's batches have read the stages the C tile overwrites
        band_bytes = 64 * SWIZZLE_COLUMNS * ELEMENT_BYTES
        for batch, registers in enumerate(packed):
            first_band = arith.muli(self.row_group, k.index(len(packed))) if len(packed) > 1 else self.row_group
            at = arith.addi(arith.muli(first_band, k.index(band_bytes)), k.index(region + batch * band_bytes))
            transfer(band.whole.opcode, k.view(self.shared, (self.tiles["c_band"].cosize,), "i32", at), registers,
                     dst_layout=band.whole.shared, src_layout=band.whole.registers, scope="warpgroup")
        k.async_proxy_fence()
        self.consumers_meet()
        row0, col0 = origin  # ([tma-store-coordinate]: tile indices, block ids and quotients and remainders of
        with k.if_(self.storer):  # them, times the tile's extents: non-negative by construction)
            for first, box in column_boxes(self.tiles["c"], 16, SWIZZLE_COLUMNS):
                view = k.view(self.shared, (box.rows * box.columns,), self.out, region + first * ELEMENT_BYTES)
                k.tma_store(k.tensor(view, box.layout), self.c_map,
                            (row0, arith.addi(col0, k.index(first // config.bm))))
            k.tma_store_wait(0)

    def store_partials(self, origin) -> None:
        """Split-K: each accumulator pair (one row, two adjacent columns) stored as 8 bytes into this split's fp32
        slice of the workspace where it lies inside C; gemm_reduce sums the splits into C."""
        from mlir import ir
        from mlir.dialects import vector

        k, pair = self.k, ir.VectorType.get([2], ir.F32Type.get())
        c_c = k.identity_tensor((self.m, self.n))
        for batch, accumulators in enumerate(self.accumulators):
            place = self._place(c_c, origin, batch)
            for slot in range(0, self.config.bn // 2, 2):  # (c0, c1), (c2, c3) of each n8 block
                row, column = place[self.consumer_thread, slot]
                values = [k.load(accumulators.registers, [s]) for s in (slot, slot + 1)]
                with k.if_(c_c.inside((row, column))):
                    k.store_vector(vector.from_elements(pair, values), self.partials.memory,
                                   [self.partials.offset((row, column))])

    def _place(self, c_c, origin, batch: int):
        """(consumer thread, accumulator slot) -> C's (row, column) of batch `batch` of this CTA's consumers: the
        atom's accumulator layout, each consumer `consumer_rows` further down, the batch 64 x `batch` rows."""
        from mlir.dialects import arith

        from mlir_tile.algebra.layout import Layout

        rows, columns = self.atom.c.rows, self.atom.c.columns
        consumers, step = self.config.consumers, 0 if self.config.pingpong else self.config.consumer_rows
        thread_values = [Layout((rows.shape[0] + (consumers,), rows.shape[1]), (rows.stride[0] + (step,), rows.stride[1])),
                         Layout((columns.shape[0] + (consumers,), columns.shape[1]),
                                (columns.stride[0] + (0,), columns.stride[1]))]
        row0, col0 = origin
        first = (arith.addi(row0, self.k.index(64 * batch)) if batch else row0, col0)
        return c_c.domain_offset(first).partition(thread_values)

    def scaling(self, place):
        """`scaled(value, slot)`: accumulator slot's value times its scales (fp8), each scale loaded once: the
        per-tensor product, or (row scales) the row's scale_a and the column's scale_b, rows and columns past
        C read at its last (their results are clipped; beside a 128 x 256 tile's accumulators ptxas spills
        352 bytes a thread: row scales take FP8_ROWS_TILE)."""
        from mlir.dialects import arith

        k, cached = self.k, {}
        if not self.scales:
            return lambda value, slot: value
        if not self.config.row_scales:
            scale = arith.mulf(*(k.load(s, [0]) for s in self.scales))
            return lambda value, slot: arith.mulf(value, scale)

        def scaled(value, slot):
            row, column = place[self.consumer_thread, slot]
            for key, array, at, extent in (("row", self.scales[0], row, self.m), ("column", self.scales[1], column, self.n)):
                key = (key, slot % 4 // 2) if key == "row" else (key, slot // 4, slot % 2)  # a row: c0 c1, or c2 c3
                if key not in cached:
                    cached[key] = k.load(array, [k.minimum(at, arith.subi(k.as_index(extent), k.index(1)))])
                value = arith.mulf(value, cached[key])
            return value
        return scaled

    def consumers_meet(self) -> None:
        """A barrier of the consumer warpgroups (the producer, specialized, never reaches it; ping-pong: of the
        consumer being built, named barrier 4 or 5)."""
        if self.side is not None:
            self.k.named_barrier(PINGPONG_MEET + self.side, 128)
        elif self.config.specialized:
            self.k.named_barrier(1, 128 * self.config.consumers)
        else:
            self.k.barrier()


DEFAULT_TILE, FP8_TILE, FP8_ROWS_TILE = "128x128x64s4", "128x256x128s4", "128x128x128s4"
FP8_KN_TILE = "128x256x128s3"  # fp8 B [K, N]: the staging stages take the fourth stage's shared memory


def default_tile(element: str, b_major: str = "nk") -> str:
    if element == "e4m3":
        return FP8_KN_TILE if b_major == "kn" else FP8_TILE
    return DEFAULT_TILE


def configure(b_major: str = "nk", tile: str = DEFAULT_TILE, element: str = "f16", row_scales: bool = False) -> HopperConfig:
    """The Hopper kernel of a tile named BMxBNxBKsSTAGES (warp-specialized; then "w": consumers of 128 rows,
    "k": split-K, "u": unspecialized, "p": persistent, "g": persistent ping-pong; "cN": clusters of N CTAs
    sharing B by multicast; "b": `uniform`) for B's layout and the inputs' `element` (e4m3: BK 128); ValueError for one it does
    not take."""
    import re

    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)s(\d+)(w?)(k?)([upg]?)(?:c(\d+))?(b?)", tile)
    if match is None:
        raise ValueError(f"hopper gemm: a tile is BMxBNxBKsSTAGES[w][k][u|p|g][cCLUSTER][b] (e.g. {DEFAULT_TILE}, "
                         f"256x128x64s4w, 128x128x64s4k, 128x256x64s3c2), got {tile!r}")
    bm, bn, bk, stages = map(int, match.groups()[:4])
    return HopperConfig(bm, bn, bk, stages, b_major, specialized=match.group(7) != "u",
                        persistent=match.group(7) in ("p", "g"), pingpong=match.group(7) == "g",
                        cluster=int(match.group(8) or 1),
                        element_bits=8 if element == "e4m3" else 16, row_scales=row_scales,
                        consumer_rows=128 if match.group(5) else 64, split_k=bool(match.group(6)),
                        uniform=bool(match.group(9)))


# The tile where the measured one leaves SMs idle (twice the CTAs of the widest), and a `Choice`'s: its arms'
# registers beside 128-row consumers' accumulators spill (3.8 KB a thread with `selectable` on 256 x 128)
SMALL_TILE = "128x128x64s4"
# bias + these, shipped as chains of their own on the measured tiles (on the H200 at issue 40's shapes bias +
# silu 1.08-1.15x and bias + gelu_tanh 1.00-1.03x torch's unfused, and 1.03-1.08x the same on SMALL_TILE)
SHIPPED_ACTIVATIONS = ("gelu_tanh", "silu")
MEASURED_TILES = "hopper_tiles.json"  # beside this module: written by `benchmarks/gemm.py hopper-table`


@functools.lru_cache(maxsize=None)
def measured_tile(element: str, b_major: str) -> str:
    """The tile benchmarks/gemm.py's `hopper` measured fastest at the most shapes for `element` and B's layout
    on the H200 (MEASURED_TILES, data the benchmark writes: `hopper-table`)."""
    import json
    from pathlib import Path

    table = json.loads((Path(__file__).parent / MEASURED_TILES).read_text())["tiles"]
    key = f"{element}:{b_major}"
    if key not in table:
        raise ValueError(f"hopper gemm: {MEASURED_TILES} has no measured tile for {key}; it has {sorted(table)}")
    return table[key]


def library_config(m: int, n: int, b_major: str, sms: int, fill: float, epilogue=None,
                   element: str = "f16") -> HopperConfig:
    """`Matmul`'s kernel for an M x N product: the measured tile (`measured_tile`) where its CTAs cover `fill`
    of the `sms` multiprocessors and the epilogue is none or one `Epilogue`, else SMALL_TILE."""
    measured = configure(b_major, measured_tile(element, b_major))
    fills = measured.grid(m, n, sms) >= fill * sms
    return measured if fills and not isinstance(epilogue, Choice) else configure(b_major, SMALL_TILE)


def kernel_name(element: str, config: HopperConfig, epilogue: Epilogue | Choice | None = None) -> str:
    """The name the library keeps the kernel's PTX under (beside the mma.sync kernels: its config ends _sm90a)."""
    from mlir_tile.kernels.gemm import epilogue_suffix

    return f"{KERNEL}_{element}_{config}{epilogue_suffix(epilogue)}"


def shipped_kernels(epilogues) -> list:
    """(name, build) of the Hopper kernels `Matmul` and `ScaledMatmul` pick: each element, B layout and
    epilogue of `epilogues` (None: plain) with the tiles `library_config` takes for it (a `Choice`: SMALL_TILE
    only); bias + each of SHIPPED_ACTIVATIONS as a chain on the measured tiles (not on SMALL_TILE: there the
    operators take `selectable`); fp8's with either B layout and either kind of scales (`scaled_config`)."""
    from functools import partial

    from mlir_tile.kernels.epilogues import chain

    def tiles_for(element, major, epilogue, chained=False):
        measured = measured_tile(element, major)
        return [SMALL_TILE] if isinstance(epilogue, Choice) else [measured] if chained else [measured, SMALL_TILE]

    chains = [chain(True, activation) for activation in SHIPPED_ACTIVATIONS]
    sixteen = [(element, configure(major, tile), epilogue) for element in ("f16", "bf16") for major in ("nk", "kn")
               for epilogue, chained in [(e, False) for e in epilogues] + [(c, True) for c in chains]
               for tile in tiles_for(element, major, epilogue, chained)]
    eight = [("e4m3", scaled_config(major, rows), None) for major in ("nk", "kn") for rows in (False, True)]
    named = {kernel_name(element, config, epilogue): partial(build_module, element, config, epilogue=epilogue)
             for element, config, epilogue in sixteen + eight}  # (an epilogue given that is a shipped chain: once)
    return list(named.items())


def scaled_config(b_major: str, row_scales: bool) -> HopperConfig:
    """`ScaledMatmul`'s kernel: the fp8 tile measured fastest for B's layout (`measured_tile`), or with per-row
    scales FP8_ROWS_TILE (beside 128 x 256's accumulators the scales spill)."""
    return configure(b_major, FP8_ROWS_TILE if row_scales else measured_tile("e4m3", b_major), "e4m3", row_scales)


class ScaledMatmul:
    """C = (A x B) * scale_a * scale_b in bf16 from fp8 e4m3 torch tensors, as torch._scaled_mm computes it, on
    Hopper's path (the sm_90 library): A [M, K] and B [N, K] (`b_major` "nk") or [K, N] ("kn", transposed in
    the kernel, where torch._scaled_mm needs a transposed copy), row-major; scale_a and scale_b fp32, one
    element each (per tensor) or [M] and [N] (per row). K a multiple of 16 and N of 16 (B [K, N]) or 8, every
    address on 16 bytes (TMA). On torch's current stream; the tensor maps kept (`TensorMaps`). ValueError for
    what the kernels do not take."""

    def __init__(self, library):
        if library.chip != "sm_90":
            raise ValueError(f"scaled matmul: fp8 runs on Hopper's path (the sm_90 library), not {library.chip}")
        self.library, self.maps, self.plans = library, TensorMaps(library.runtime), {}
        self.sms = library.runtime.device.properties.multiprocessor_count

    def __call__(self, a, b, scale_a, scale_b, *, b_major: str = "nk", out=None):
        import torch

        from mlir_tile.runtime import torch_stream

        m, n, depth, row_scales = _scaled_sizes(a, b, scale_a, scale_b, b_major)
        if (b_major, row_scales) not in self.plans:  # (the kernel and its boxes, once)
            config = scaled_config(b_major, row_scales)
            self.plans[b_major, row_scales] = (config, boxes(config), self.library.module(
                kernel_name("e4m3", config), lambda: build_module("e4m3", config)))
        config, box, module = self.plans[b_major, row_scales]
        if n % config.unit or depth % config.k_unit:
            raise ValueError(f"scaled matmul: N a multiple of {config.unit} and K of {config.k_unit} (TMA: rows on 16 "
                             f"bytes), got {m} x {n} x {depth} with B {b_major}")
        if out is None:
            out = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
        elif out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_cuda or not out.is_contiguous():
            raise ValueError(f"scaled matmul: out is a contiguous {m} x {n} CUDA tensor of bfloat16, got "
                             f"{tuple(out.shape)} {out.dtype}")
        if any(t.data_ptr() % 16 for t in (a, b, out)):
            raise ValueError("scaled matmul: A, B and out start on 16 bytes (TMA)")
        maps = [self.maps(tensor, box[name], store=name == "c") for name, tensor in (("a", a), ("b", b), ("c", out))]
        module.launch(KERNEL, [*maps, m, n // config.unit, depth // config.k_unit, scale_a, scale_b],
                      grid=config.grid(m, n, self.sms), block=config.threads, shared_bytes=config.shared_bytes,
                      stream=torch_stream(a))
        return out


def _scaled_sizes(a, b, scale_a, scale_b, b_major: str) -> tuple[int, int, int, bool]:
    """(M, N, K, per-row scales) of ScaledMatmul's operands, or ValueError."""
    import torch

    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"scaled matmul: A and B are float8_e4m3fn, got {a.dtype} and {b.dtype}")
    if b_major not in ("kn", "nk") or a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"scaled matmul: 2-D A and B, b_major 'nk' (B [N, K]) or 'kn' (B [K, N]); got {b_major!r}")
    if not all(t.is_cuda and t.is_contiguous() for t in (a, b, scale_a, scale_b)):
        raise ValueError("scaled matmul: A, B and the scales are contiguous CUDA tensors")
    (m, depth), (n, b_depth) = a.shape, (b.shape if b_major == "nk" else b.shape[::-1])
    if b_depth != depth or 0 in (m, n, depth):
        raise ValueError(f"scaled matmul: A is {tuple(a.shape)} and B ({b_major}) {tuple(b.shape)}: the K extents "
                         f"differ or a size is 0")
    per_tensor = scale_a.numel() == 1 and scale_b.numel() == 1
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32 or not (
            per_tensor or (scale_a.numel(), scale_b.numel()) == (m, n)):
        raise ValueError(f"scaled matmul: float32 scales of one element each or of [M] = [{m}] and [N] = [{n}], got "
                         f"{scale_a.dtype} {tuple(scale_a.shape)} and {scale_b.dtype} {tuple(scale_b.shape)}")
    return m, n, depth, not per_tensor


class TensorMaps:
    """The device tensor maps a Hopper kernel is launched with, one per (address, shape, row stride, box),
    the `kept` most recent kept (a training loop's weights and buffers come back at the same addresses, so
    each is encoded once). A new one is copied on torch's current stream, before the launch that reads it."""

    def __init__(self, runtime, kept: int = 256):
        from collections import OrderedDict

        self.runtime, self.kept, self.maps = runtime, kept, OrderedDict()

    def __call__(self, tensor, box, store: bool = False):
        """The map of 2-D row-major CUDA `tensor` (rows on 16 bytes, 16-byte aligned) in boxes of `box`, as a
        device tensor of its 128 bytes; of a 3-D one, a stack of such matrices (`Runtime.tensor_map`'s 3-D map).
        `store`: a map the kernel's TMA stores write through (`Runtime.tensor_map(store=True)`)."""
        import torch

        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), box, tensor.device.index, store)
        found = self.maps.pop(key, None)
        if found is None:
            size = tensor.element_size()
            encoded = self.runtime.tensor_map(tensor.data_ptr(), tuple(tensor.shape), tensor.stride(-2) * size, box,
                                              tensor.stride(0) * size if tensor.dim() == 3 else None, store=store)
            found = torch.from_numpy(encoded.view("uint8").copy()).to(tensor.device)
        self.maps[key] = found
        while len(self.maps) > self.kept:
            self.maps.popitem(last=False)
        return found


def tensor_maps(runtime, a, b, c, m: int, n: int, depth: int, config: HopperConfig) -> list:
    """The tensor maps (device copies) of device matrices a (M x K), b ([N, K] or [K, N]) and c (M x N; None
    for a split-K kernel, which writes fp32 partials) for the kernel's boxes; keep them alive until the launch
    is done."""
    box = boxes(config)
    b_shape = (n, depth) if config.b_major == "nk" else (depth, n)
    shapes = {"a": (a, (m, depth)), "b": (b, b_shape), **({"c": (c, (m, n))} if c is not None else {})}
    return [runtime.to_device(runtime.tensor_map(int(matrix.handle), shape, shape[1] * box[name].element_bits // 8,
                                                 box[name], store=name == "c"))
            for name, (matrix, shape) in shapes.items()]


def fp8_scales(m: int, n: int, row_scales: bool) -> tuple:
    """The scales fp8 products are checked with (powers of two: exact): 0.5 and 0.25 per tensor, or per row
    2^-(r mod 3) for A's rows r and 2^-(c mod 4) / 2 for B's rows (C's columns) c."""
    import numpy as np

    if not row_scales:
        return np.array([0.5], np.float32), np.array([0.25], np.float32)
    return (2.0 ** -(np.arange(m) % 3)).astype(np.float32), (2.0 ** -(np.arange(n) % 4 + 1)).astype(np.float32)


def inputs_and_check(m: int, n: int, depth: int, element: str, seed: int = 5, row_scales: bool = False):
    """(A bits M x K, B bits K x N, the fp8 scales, check(C bits) -> (ok, largest error)) of a product of
    `element`: 16-bit uniform values against numpy (`gemm.inputs`, `gemm.check`; no scales); e4m3 small
    integers (exact products and sums), C the bf16 of the product times `fp8_scales`'."""
    import numpy as np

    from mlir_tile.isa import fp8
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode
    from mlir_tile.kernels.gemm import check, inputs

    if element != "e4m3":
        a, b = inputs(m, n, depth, seed=seed, element=element)
        return a, b, (), lambda c: check(c, a, b, element)
    rng = np.random.default_rng(seed)
    a, b = (fp8.encode_integers(rng.integers(-3, 4, shape), element) for shape in ((m, depth), (depth, n)))
    scales = fp8_scales(m, n, row_scales)

    def check_fp8(c):
        exact = fp8.decode(a, element) @ fp8.decode(b, element) * scales[0][:, None] * scales[1][None, :]
        error = np.abs(decode(c, "bf16") - exact)
        return bool((error <= UNIT_ROUNDOFF["bf16"] * np.abs(exact)).all()), float(error.max())
    return a, b, scales, check_fp8


def run_and_check(ptx: str, dtype: str = "f16", b_major: str = "nk", tile: str = DEFAULT_TILE,
                  shape: tuple[int, int, int] = (1000, 1016, 504), ctas: int | None = None,
                  row_scales: bool = False, splits: int = 3) -> tuple[bool, str]:
    """The kernel in `ptx` on an M x N x K product of random values, against numpy (`inputs_and_check`);
    `ctas`: a persistent kernel's grid (default: one per SM, at most one per tile); `row_scales`: an fp8
    kernel's (`HopperConfig.row_scales`); `splits`: a split-K kernel's, its fp32 partials summed here and
    rounded as gemm_reduce rounds them."""
    import numpy as np

    from mlir_tile.runtime import Runtime

    config, (m, n, depth) = configure(b_major, tile, dtype, row_scales), shape
    if min(shape) < 1 or n % config.unit or depth % config.k_unit:
        raise ValueError(f"hopper gemm: M, N, K >= 1 with N a multiple of {config.unit} and K of {config.k_unit} (TMA: "
                         f"rows on 16 bytes), not {m} x {n} x {depth}")
    a, b, scales, check = inputs_and_check(m, n, depth, dtype, row_scales=config.row_scales)
    b_given = b if b_major == "kn" else np.ascontiguousarray(b.T)
    out = np.zeros((splits, m, n), np.float32) if config.split_k else np.zeros((m, n), np.uint16)
    with Runtime() as runtime:
        matrices = [runtime.to_device(x) for x in (a, b_given, out, *scales)]
        maps = tensor_maps(runtime, *matrices[:2], None if config.split_k else matrices[2], m, n, depth, config)
        module = runtime.load_ptx(ptx, name=KERNEL)
        grid = ctas or config.grid(m, n, runtime.device.properties.multiprocessor_count) * (splits if config.split_k else 1)
        pointers = [int(x.handle) for x in maps] + ([int(matrices[2].handle)] if config.split_k else [])
        module.launch(KERNEL, pointers + [m, n // config.unit, depth // config.k_unit] +
                      [int(x.handle) for x in matrices[3:]] + ([splits] if config.split_k else []), grid=grid,
                      block=config.threads, shared_bytes=config.shared_bytes,
                      cluster=config.cluster if config.cluster > 1 else None)
        c = runtime.to_host(matrices[2], out)
        for buffer in matrices + maps:
            buffer.close()
    if config.split_k:
        from mlir_tile.isa.halves import encode

        c = encode(c.sum(axis=0), output_element(dtype))
    ok, worst = check(c)
    return ok, (f"GPU: {m} x {n} x {depth} {dtype} GEMM on Hopper's path ({config}: TMA, wgmma, stmatrix, TMA "
                f"store) matches numpy: {ok} (largest error {worst:.2e})")


def emulate(config: HopperConfig = HopperConfig(), k_tiles: int = 2, element: str = "f16") -> str:
    """One CTA (BM x BN x k_tiles * BK) on the reference model, as the kernel runs it: each k-tile's boxes
    written into a stage by TMA's model, every warpgroup's wgmma operands fetched through the descriptors the
    kernel issues (`wgmma.descriptor_for` of the stage's layouts) by the ISA's model and multiplied, the
    accumulators (placed by the ISA's fragment) packed and written into the C tile by stmatrix's model, and the
    C boxes read by the TMA store's model: C against numpy. AssertionError otherwise."""
    import numpy as np

    from mlir_tile.tiling import byte_transpose

    from mlir_tile.isa import fp8, halves

    from mlir_tile.models import reference

    if config.split_k:
        raise ValueError("hopper gemm: a split-K CTA stores its accumulators as they are (no stmatrix, no TMA "
                         "store): `run_and_check` checks its partials on the GPU")
    from mlir_tile.tiling.tiled import tiled_store_c
    from mlir_tile.isa.tma import column_boxes
    from mlir_tile.isa.wgmma import descriptor_for

    layouts, depth, bits = tiles(config), k_tiles * config.bk, config.element_bits
    a, b, scales, check = inputs_and_check(config.bm, config.bn, depth, element, 3, config.row_scales)  # b: K x N
    decode = fp8.decode if element == "e4m3" else halves.decode
    scale = np.outer(np.resize(scales[0], config.bm), np.resize(scales[1], config.bn)) if scales else 1.0
    accumulators = np.zeros((config.bm // 64, 64, config.bn))  # by 64-row band (a consumer's batch)
    a_bytes, k_step = config.parts[0] * bits // 8, 256 // bits  # a wgmma's K: 32 bytes
    for k_tile in range(k_tiles):
        stage, columns = np.zeros(config.stage_bytes // config.stages, np.uint8), slice(k_tile * config.bk, (k_tile + 1) * config.bk)
        reference.tma_box_write(a[:, columns], 128, stage)
        given = b[columns].T if config.b_major == "nk" else b[columns]  # B's rows as its tensor map has them
        if config.transposed:  # TMA's boxes into the staging stage, rewritten K-major into the stage
            staged = np.zeros(config.bk * config.bn, np.uint8)
            for first, box in b_parts(config):
                reference.tma_box_write(np.ascontiguousarray(given[:, first // config.bk:first // config.bk + box.columns]),
                                        128, staged, first)
            plan = transposition(config)
            moved = byte_transpose.emulate(plan, staged.view(np.uint32), np.zeros(plan.target.cosize, np.uint32))
            stage[a_bytes:a_bytes + moved.nbytes] = moved.view(np.uint8)
        for first, part in b_parts(config) if not config.transposed else []:  # each cluster CTA's part of each box
            for rank in range(config.cluster):
                row0, column0 = rank * part.rows, 0 if config.b_major == "nk" else first // config.bk
                reference.tma_box_write(np.ascontiguousarray(given[row0:row0 + part.rows, column0:column0 + part.columns]),
                                        128, stage, a_bytes + (first + row0 * part.columns) * bits // 8)
        for group in range(config.bm // 64):
            for step in range(config.bk // k_step):
                fetched = []
                for name, rows, origin, at in (("a", 64, (64 * group, k_step * step), 0),
                                               ("b", config.bn, (0, k_step * step), a_bytes)):
                    fields, start = descriptor_for(layouts[name], bits, rows, k_step, origin)
                    fetched.append(decode(reference.wgmma_operand(stage, fields.bits(at + start), fields.major == "K",
                                                                  bits, rows), element))
                accumulators[group] += fetched[0] @ fetched[1].T
    band = tiled_store_c(4, layouts["c_band"])
    words = np.zeros(layouts["c_words"].cosize, np.uint32)
    for group in range(config.bm // 64):  # each consumer's stmatrix into its rows, from its first word
        packed = np.zeros((128, band.whole.slots), np.uint32)
        for thread in range(128):
            product = (accumulators[group] * (scale[64 * group:64 * (group + 1)] if scales else 1.0)).astype(np.float32)
            for block in range(config.bn // 8):
                for half in range(2):
                    pair = [product[reference.wgmma_accumulator_position(thread, 4 * block + 2 * half + i)]
                            for i in range(2)]
                    pair = halves.encode(np.array(pair), output_element(element))
                    packed[thread, packed_slot(block, half)] = int(pair[0]) | int(pair[1]) << 16
        start = 64 * SWIZZLE_COLUMNS // 2 * group
        words[start:] = reference.emulate(band.whole.opcode, band.whole.shared, band.whole.registers, words[start:],
                                          packed, "warpgroup")
    shared = words.view(np.uint8)
    out = np.zeros((config.bm, config.bn), np.uint16)
    for first, box in column_boxes(layouts["c"], 16, SWIZZLE_COLUMNS):
        read = reference.tma_box_read(shared, 128, box.rows, box.columns * ELEMENT_BYTES, first * ELEMENT_BYTES)
        out[:, first // config.bm:first // config.bm + box.columns] = read.view(np.uint16)
    ok, worst = check(out)
    assert ok, f"C differs from numpy by up to {worst}"
    return (f"reference model: a {config.bm} x {config.bn} x {depth} {element} CTA on Hopper's path ({config}): TMA's "
            f"box writes, wgmma's operand fetches through the kernel's descriptors, stmatrix into the C tile and the "
            f"TMA stores' reads give C as numpy does (largest error {worst:.2e})")


def _as_kn(b):
    """B's (n, k) tile layout as (k, n): the boxes TMA writes are rows of K."""
    from mlir_tile.algebra.layout import Layout

    return Layout((b.shape[1], b.shape[0]), (b.stride[1], b.stride[0]), b.swizzle)
