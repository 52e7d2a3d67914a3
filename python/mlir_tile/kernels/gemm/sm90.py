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

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.kernels.common import SWIZZLE_COLUMNS, output_element, stored_tile, transposed
from mlir_tile.kernels.epilogues import Choice, Epilogue
from mlir_tile.kernels.gemm.sm90_fused import FusedSteps
from mlir_tile.kernels.gemm.sm90_grouped import GroupedSteps
from mlir_tile.kernels.gemm.sm90_tiles import (ELEMENT_BYTES, HopperConfig, SWIZZLE_BITS,
                                               TRANSPOSE_STAGES)


KERNEL = "gemm"


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
    if config.a_major == "mk":
        a = Box(config.bm, config.bk, config.element_bits, 128).layout
    else:  # (m, k): m runs along a box's 64 columns, the boxes BK x 64 apart (MN-major, as B [K, N]'s)
        a = Layout(((SWIZZLE_COLUMNS, config.a_boxes), config.bk), ((1, config.bk * SWIZZLE_COLUMNS), SWIZZLE_COLUMNS),
                   swizzle)
    staging = {}
    if config.transposed:
        columns = SWIZZLE_BITS // 8
        staging["b_staging"] = Layout((config.bk, (columns, config.bn // columns)), (columns, (1, config.bk * columns)),
                                      Box(config.bk, columns, 8, 128).layout.swizzle)
    if config.b_major == "nk" or config.transposed:
        b = Box(config.bn, config.bk, config.element_bits, 128).layout
    else:  # (n, k): n runs along a box's 64 columns, the boxes BK x 64 apart
        b = Layout(((SWIZZLE_COLUMNS, boxes_of), config.bk), ((1, config.bk * SWIZZLE_COLUMNS), SWIZZLE_COLUMNS), swizzle)
    return {"a": a, "b": b, **stored_tile(config.bm, config.c_columns), **staging}


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
    from mlir_tile.isa.tma import column_boxes

    layouts = tiles(config)
    return {"a": a_parts(config)[0][1], "b": b_parts(config)[0][1],
            "c": column_boxes(layouts["c"], 16, SWIZZLE_COLUMNS)[0][1]}


@functools.lru_cache(maxsize=None)
def a_parts(config: HopperConfig) -> tuple:
    """(first element, box) of each TMA box of a stage's A tile: A [M, K] one box; [K, M] one every 64 rows of
    BM (BK rows by 64 columns of A [K, M], side by side), each proven a box's layout from its first element."""
    from mlir_tile.isa.tma import Box, box_for, column_boxes

    layouts = tiles(config)
    if config.a_major == "km":
        return tuple(column_boxes(transposed(layouts["a"]), 16, SWIZZLE_COLUMNS))
    box = box_for(layouts["a"], config.element_bits)
    if not config.a_rows:
        return ((0, box),)
    part = Box(config.a_rows, box.columns, box.element_bits, box.swizzle_bytes)  # (the tile's first rows, proven)
    if any(box.layout.offset(i, j) != part.layout.offset(i, j) for i in range(part.rows) for j in range(part.columns)):
        raise ValueError(f"hopper gemm: A's first {part.rows} rows are not the box {part}")
    return ((0, part),)


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
             column_boxes(transposed(layouts["b"]), 16, SWIZZLE_COLUMNS))
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
    from mlir_tile.kernels.common import operand_parameters

    if config.swiglu and epilogue is not None:
        raise ValueError(f"hopper gemm: fused SwiGLU is the kernel's epilogue; got {epilogue!r} beside it")
    if (element, config.element_bits) not in (("f16", 16), ("bf16", 16), ("e4m3", 8)):
        raise ValueError(f"hopper gemm: f16 or bf16 with 16-bit configurations, e4m3 with 8-bit ones; got "
                         f"{element!r} and {config}")
    parameters = [TensorMap(), TensorMap(), TensorMap(), "index", "index", "index"]
    parameters += [Global("f32"), Global("f32")] if element == "e4m3" else []
    # split-K: the fp32 partials' workspace, the C tiles' flags and the splits
    parameters += [Global("f32"), Global("i32"), "index"] if config.split_k else []
    # grouped: the groups' row counts and T (masked), or the experts' offsets and E (contiguous)
    parameters += [Global("i32"), "index"] if config.grouped else []
    parameters += operand_parameters(epilogue, output_element(element)) if epilogue is not None else []
    with Kernel(KERNEL, parameters, block=(config.threads, 1, 1), chip=WARPGROUP_CHIP, context=context,
                cluster=(config.cluster, 1, 1) if config.cluster > 1 else None) as k:
        _HopperGemm(k, element, config, epilogue).build()
    return k.module


class _HopperGemm(FusedSteps, GroupedSteps):
    def __init__(self, k, element: str, config: HopperConfig, epilogue):
        from mlir_tile.isa.atoms import wgmma
        from mlir_tile.builder.schedule import ConsumerBarriers, StageRing, TileOrder, TmaPipeline
        from mlir_tile.builder.tensor import ceil_div, in_units

        self.k, self.element, self.config, self.epilogue = k, element, config, epilogue
        self.out, self.storage = output_element(element), "i8" if config.element_bits == 8 else element
        self.a_map, self.b_map, self.c_map, self.m, n_units, k_units = k.arguments[:6]
        self.scales = k.arguments[6:8] if element == "e4m3" else []
        self.extras = k.arguments[6 + len(self.scales) + 3 * config.split_k + 2 * config.grouped:]
        self.groups = k.arguments[6 + len(self.scales):8 + len(self.scales)] if config.grouped else None
        # rows on 16 bytes, proven
        self.n, self.depth = in_units(k, n_units, config.unit), in_units(k, k_units, config.k_unit)
        self.tiles, self.atom = tiles(config), wgmma(config.bn, element)
        # a cluster's CTAs take adjacent row tiles of one column (one C tile of cluster x BM rows to the order)
        self.order = TileOrder(k, (self.row_tiles(), self.n), (config.bm * config.cluster, config.bn),
                               max(1, config.group // config.cluster))
        self.rank = k.cluster_rank() if config.cluster > 1 else None
        self.k_tiles = k.as_index(ceil_div(k, self.depth, config.bk))
        if config.split_k:
            self._split(*k.arguments[6:9])
        self.shared = k.dynamic_shared(alignment=1024)
        self.ring = StageRing(k, self.shared, config.stages, [(self.storage, part) for part in config.parts])
        self.barriers = ConsumerBarriers(k, config.consumers)
        b_loads = 1 if config.b_major == "nk" else 0 if config.transposed else config.bn // SWIZZLE_COLUMNS
        self.pipeline = TmaPipeline(k, self.ring, config.stage_readers, config.a_boxes + b_loads, multicast=config.cluster > 1,
                                    writers=4 if config.transposed else 0)
        if config.transposed:  # B's k-tiles as TMA writes them, read by the transposing warpgroup
            self.staging_ring = StageRing(k, self.shared, TRANSPOSE_STAGES, [("i8", config.bk * config.bn)],
                                          start=config.stage_bytes)
            self.staging = TmaPipeline(k, self.staging_ring, 4, len(b_parts(config)), name="staging")
        self.warpgroup = k.broadcast(k.warpgroup_id()) if config.uniform else k.warpgroup_id()
        # the consumer's index (its 64 rows of A and C), and its threads counted from 0
        first = k.index(128 * config.specialized)
        self.consumer = (self.warpgroup - int(config.specialized)) % config.consumers
        self.consumer_thread = k.thread_id() - first
        # (ping-pong: each consumer takes all BM rows of its own tiles, its threads counted from its first)
        self.row_group = k.index(0) if config.pingpong else self.consumer
        if config.pingpong:
            self.consumer_thread = self.consumer_thread % 128
        self.side = None  # the ping-pong consumer being built
        self.producer = k.compare("eq", k.thread_id(), 0)
        # the first consumer thread issues C's TMA stores; ping-pong: each consumer's first, for its own tiles
        self.storer = (k.compare("eq", self.consumer_thread, 0) if config.pingpong
                       else k.compare("eq", k.thread_id(), first))
        # one per 64-row batch of the consumer's rows; batch b at A's row block consumer x batches + b
        self.accumulators = [k.accumulators(self.atom) for _ in range(config.consumer_rows // 64)]
        # (promoted accumulation: each k-tile's batch summed into partials of its own, then added in)
        self.promoted = [k.accumulators(self.atom) for _ in self.accumulators] if config.promote else None
        self.second = [k.accumulators(self.atom) for _ in self.accumulators] if config.paired else None

    def _split(self, partials, flags, splits) -> None:
        """Split-K: this CTA's C tile and split (`SplitK`: the grid is splits x the tiles), its run of k-tiles
        from `k_first` (`k_tiles` of them, none where K has no more), the workspace of every split but the
        last's fp32 partials ([splits - 1, M, N]) and the C tiles' flags (`reduce_splits`)."""
        from mlir_tile.builder.schedule import SplitK
        from mlir_tile.builder.tensor import ceil_div

        k, bk = self.k, self.config.bk
        split_k = SplitK(k, self.order.count, self.depth, bk, splits)
        self.split, self.split_tile = split_k.of_block(k.block_id())
        start, end = split_k.columns(self.split)
        self.k_first = start // bk
        self.k_tiles = k.as_index(ceil_div(k, end - start, bk))
        self.last_split = k.as_index(splits) - k.index(1)
        self.partials, self.flags = k.tensor(partials, (self.last_split, self.m, self.n)), flags

    def build(self) -> None:
        k, config = self.k, self.config
        if not config.specialized:  # every warpgroup a consumer; thread 0 also loads, between its batches
            origin = self.origin(k.block_id())
            for k_tile in range(config.stages):  # the first k-tiles, each where K has it
                with k.if_(self.producer & k.compare("ult", k_tile, self.k_tiles)):
                    self.load(k.index(k_tile), origin, k.index(k_tile))
            self.consume(origin, k.index(0), 0)
            return
        first, own = (self.order.persistent(config.cluster) if config.persistent else
                      (self.split_tile, k.index(1)) if config.split_k else
                      (k.block_id() // config.cluster, k.index(1)))
        if config.contiguous:  # (its expert's rows, before the roles split: every thread takes part)
            self.locate_segment(first)
            own = k.select(k.compare("ugt", self.segment[2], 0), k.index(1), k.index(0))
        elif config.ragged_k:  # (its expert's rows: its k-tiles, none for an expert without rows)
            self.locate_reduction(first)
        elif config.grouped:  # (a tile past its group's count: no turn for either role)
            own = k.select(self.counted(self.origin(first)), k.index(1), k.index(0))
        lowered = config.producer_registers if config.rebalanced else None  # (reallocated where the config says)
        with k.role(self.warpgroup, "producer", lowered):  # one thread loads every k-tile
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
            with k.role(self.warpgroup, "consumers", config.consumer_registers if config.rebalanced else None):
                with k.loop(0, own) as turn:
                    self.consume(self.origin(self._tile(first, turn)), turn,
                                 config.stage_bytes if config.persistent else 0)
        if config.cluster > 1:  # no CTA leaves while a peer may still arrive on its barriers
            k.cluster_barrier()

    def origin(self, tile):
        """The first element of this CTA's C tile of tile `tile` of the order (its rank's rows of a cluster's)."""
        row0, col0 = self.order.origin(tile)
        if self.config.contiguous:  # (the located segment's first row: one tile a CTA)
            return self.segment[1], col0
        if self.config.ragged_k:  # (the row in its expert's C)
            return self.segment[1], col0
        if self.rank is None:
            return row0, col0
        return row0 + self.rank * self.config.bm, col0

    def _tile(self, first, turn):
        """The C tile of this CTA's walk at `turn`: first + turn x the grid's clusters (one turn unless
        persistent)."""
        if not self.config.persistent:
            return first
        walkers = self.k.grid_size()
        if self.config.cluster > 1:
            walkers = walkers // self.config.cluster
        return first + turn * walkers

    def _in_ring(self, turn, k_tile):
        """The pipeline's count of `k_tile` of the walk's tile `turn`: the stages and phases run on across tiles."""
        return self.k.as_index(turn) * self.k_tiles + self.k.as_index(k_tile)

    def consume_in_turns(self, first, own) -> None:
        """Ping-pong: consumer c (warpgroup 1 + c) takes the walk's turns c, c + 2, ..., each with all BM rows
        and its own C tile after the stages; built once for each, so that its barriers are constants."""
        k, config = self.k, self.config
        for side in range(2):
            with k.role(self.warpgroup, 1 + side, config.consumer_registers if config.rebalanced else None):
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
        k, config = self.k, self.config
        if self.side is not None:
            with k.if_(k.compare("uge", turn, 1)):
                self.barriers.wait_turn(self.side)
        if config.block_scales:
            self.prefetch_factors(origin)
        if config.paired:
            self.paired_steps(turn)
        else:
            with k.loop(0, self.k_tiles) as k_tile:
                self.step(self._in_ring(turn, k_tile), k_tile, origin)
        if self.side is not None:
            with k.if_(k.compare("ult", turn + 1, turns)):
                self.barriers.pass_turn(self.side)
        k.wgmma_wait(0, self.accumulators)
        if config.persistent:  # the producer's next tile needs every stage back
            self.pipeline.release(self._in_ring(turn, self.k_tiles - 1))
        if config.split_k:
            self.reduce_splits(origin, region)
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
        k = self.k
        with k.if_(self.producer):
            for k_tile in range(TRANSPOSE_STAGES):
                with k.if_(k.compare("ult", k_tile, self.k_tiles)):
                    self.load(k.index(k_tile), origin, k.index(k_tile))
        with k.loop(0, self.k_tiles) as k_tile:
            self.transpose(k_tile)
            later = self.ring.later(k_tile, TRANSPOSE_STAGES)
            with k.if_(self.producer & k.compare("ult", later, self.k_tiles)):
                self.load(later, origin, later)

    def transpose(self, k_tile) -> None:
        """fp8 B [K, N]: the producer warpgroup's turn at k-tile `k_tile`: once TMA wrote it into its staging
        stage and its stage is free, B's tile rewritten K-major there (`transposition`), counted on the stage's
        full barrier beside A's load; the staging stage then released."""
        self.pipeline.rewrite_from(self.staging, k_tile, transposition(self.config), self.shared)

    def load(self, in_ring, origin, k_tile) -> None:
        """k-tile `k_tile` of the C tile at `origin` (the pipeline's `in_ring`-th) into its stage, once free."""
        k, config, pipeline = self.k, self.config, self.pipeline
        pipeline.acquire(in_ring)
        a_view, b_view = self.ring.views(self.ring.stage(in_ring))
        column = (self.k_first + k_tile if config.split_k else k_tile) * config.bk
        row0, col0 = origin
        if config.a_major == "mk":  # (a_rows: the part's rows of the tile)
            a_layout = a_parts(config)[0][1].layout if config.a_rows else self.tiles["a"]
            pipeline.load(in_ring, k.tensor(a_view, a_layout), self.a_map, (row0, column))
        else:  # A [K, M]: a box of BK rows every 64 of BM
            a_at = self.ring.offset(self.ring.stage(in_ring))
            for first, box in a_parts(config):
                view = k.view(self.shared, (box.rows * box.columns,), self.storage,
                              a_at + k.index(first * (config.element_bits // 8)))
                at = (column, row0 + first // config.bk)
                pipeline.load(in_ring, k.tensor(view, box.layout), self.a_map,
                              self.ragged_at(k_tile, at[1]) if config.ragged_k else at)
        if config.transposed:  # into the staging stage, once the transposer released it
            self.staging.acquire(in_ring)
            staged = self.staging_ring.offset(self.staging_ring.stage(in_ring))
            for first, box in b_parts(config):
                view = k.view(self.shared, (box.rows * box.columns,), "i8", staged + first)
                self.staging.load(in_ring, k.tensor(view, box.layout), self.b_map, (column, col0 + first // config.bk))
            return
        if config.b_major == "nk" and config.cluster == 1:
            pipeline.load(in_ring, k.tensor(b_view, self.tiles["b"]), self.b_map, (self.b_row(origin), column))
            return
        b_at = self.ring.offset(self.ring.stage(in_ring), 1)
        for first, part in b_parts(config):  # B [K, N]: a box every 64 columns; this CTA's rows of each
            box_row, box_column = (col0, column) if config.b_major == "nk" else (column, col0 + first // config.bk)
            if self.rank is not None:
                first = k.index(first) + self.rank * (part.rows * part.columns)
                box_row = box_row + self.rank * part.rows
            view = k.view(self.shared, (part.rows * part.columns,), self.storage,
                          b_at + k.as_index(first) * (config.element_bits // 8))
            at = self.grouped_b_at(k_tile, box_row, box_column) if config.grouped else (box_row, box_column)
            pipeline.load(in_ring, k.tensor(view, part.layout), self.b_map, at,
                          multicast=None if self.rank is None else (1 << config.cluster) - 1)

    def step(self, in_ring, k_tile, origin) -> None:
        """k-tile `k_tile` (the pipeline's `in_ring`-th): its batch once its stage is full; then, the batch
        before retired, the stage before released by every consumer warp (and, unspecialized, refilled by
        thread 0 with the k-tile `stages` after that one)."""
        k, config, ring, pipeline = self.k, self.config, self.ring, self.pipeline
        a_tile, b_tile, first_block = self.stage_tiles(in_ring)
        batches = len(self.accumulators)
        if config.promote:
            self.promoted_step(a_tile, b_tile, first_block, in_ring, k_tile, origin)
            return
        for batch, accumulators in enumerate(self.accumulators):
            k.wgmma(self.atom, a_tile, b_tile, accumulators,
                    a_row_block=first_block + batch if batch else first_block)
        k.wgmma_wait(batches)  # this k-tile's batches may run on; the previous one's have read their stage
        with k.if_(k.compare("uge", k_tile, 1)):
            pipeline.release(in_ring - 1)
            if not config.specialized:  # thread 0 refills the released stage (in_ring is k_tile here)
                refill = ring.later(k_tile - 1, config.stages)
                with k.if_(self.producer & k.compare("ult", refill, self.k_tiles)):
                    self.load(refill, origin, refill)

    def stage_tiles(self, in_ring) -> tuple:
        """(A's tile, B's tile, the consumer's first row block of A) of the pipeline's `in_ring`-th k-tile, once
        its stage is full."""
        k, ring, batches = self.k, self.ring, len(self.accumulators)
        self.pipeline.wait(in_ring)
        a_view, b_view = ring.views(ring.stage(in_ring))
        first_block = self.row_group * batches if batches > 1 else self.row_group
        return k.tensor(a_view, self.tiles["a"]), k.tensor(b_view, self.tiles["b"]), first_block

    def store_c(self, origin, region: int) -> None:
        """The accumulators (the epilogue applied) packed, each consumer's stmatrix into its 64-row bands of the
        C tile over the stages' bytes (one a batch), then one TMA store per 64-column box of it by the first
        consumer thread (contiguous grouped: the tail's tiles, past the last expert, zeros with an epilogue too:
        `epilogue_group`)."""
        from mlir.dialects import arith

        from mlir_tile.builder.stores import AccumulatorBand
        from mlir_tile.kernels.common import for_each_arm

        k, config = self.k, self.config
        band = AccumulatorBand(k, self.tiles["c_band"], self.out)  # 64 rows, one warpgroup's stmatrix
        packed = [band.registers() for _ in self.accumulators]
        if config.swiglu:
            self.store_swiglu(band, packed)
            return self.write_c(band, packed, origin, region)
        c_c = k.identity_tensor((self.m, self.n))
        places = [self._place(c_c, origin, batch) for batch in range(len(self.accumulators))]
        group, tail = self.epilogue_group(origin)

        def pack(finish):
            for accumulators, registers, place in zip(self.accumulators, packed, places):
                scaled = self.scaling(place)  # (its loads inside the arm's branch: one a scale, each arm)

                def value(slot, x, scaled=scaled, place=place):
                    x = scaled(x, slot)
                    if finish is None:
                        return x
                    x = finish(x, *place[self.consumer_thread, slot])
                    return x if tail is None else arith.select(tail, k.constant(0.0, "f32"), x)
                band.pack(registers, accumulators.registers, config.bn, value)

        for_each_arm(k, self.epilogue, self.extras, c_c.extent, pack, group)
        self.write_c(band, packed, origin, region)

    def write_c(self, band, packed, origin, region: int) -> None:
        """The packed bands into the C tile over the stages' bytes (each consumer's, one a batch), once every
        consumer's batches have read them, then one TMA store per 64-column box by the storing thread."""
        k = self.k
        self.consumers_meet()  # every consumer's batches have read the stages the C tile overwrites
        band_bytes = 64 * SWIZZLE_COLUMNS * ELEMENT_BYTES
        for batch, registers in enumerate(packed):
            first_band = self.row_group * len(packed) if len(packed) > 1 else self.row_group
            band.write(registers, self.shared, first_band * band_bytes + (region + batch * band_bytes))
        k.async_proxy_fence()
        self.consumers_meet()
        row0, col0 = origin  # ([tma-store-coordinate]: tile indices, block ids and quotients and remainders of
        if self.config.swiglu:  # them, times the tile's extents: non-negative by construction; SwiGLU's C: halved)
            col0 = col0 // 2
        with k.if_(self.storer):
            for column, box in k.boxes(self.shared, region, self.tiles["c"], self.out, SWIZZLE_COLUMNS):
                k.tma_store(box, self.c_map, self.grouped_c_at(row0, col0 + column) if self.config.grouped
                            else (row0, col0 + column))
            k.tma_store_wait(0)

    def reduce_splits(self, origin, region: int) -> None:
        """Split-K in one launch (CUTLASS's serial split-K, one waiter): each split but the last stores its fp32
        partials and counts itself on its C tile's flag (`release_flag`, once every consumer thread's stores are
        done); the last split, the highest blocks (launched after the others: `SplitK`), waits until all have,
        clears the flag for the next launch, adds their partials to its accumulators in split order (the same
        sum every run) and stores C, the epilogue applied."""
        k = self.k
        with k.if_(k.compare("ult", self.split, self.last_split)):
            for batch in range(len(self.accumulators)):
                self.add_partials(origin, batch, self.split, store=True)
            self.consumers_meet()
            with k.if_(self.storer):
                k.release_flag(self.flags, self.split_tile)
        with k.if_(k.compare("eq", self.split, self.last_split)):
            with k.if_(self.storer):
                k.wait_flag(self.flags, self.split_tile, k.as_i32(self.last_split))
                k.clear_flag(self.flags, self.split_tile)
            self.consumers_meet()
            for batch in range(len(self.accumulators)):  # (a batch at a time: fewer live addresses)
                with k.loop(0, self.last_split) as split:
                    self.add_partials(origin, batch, split, store=False)
            self.store_c(origin, region)

    def add_partials(self, origin, batch: int, split, *, store: bool) -> None:
        """Each accumulator pair (one row, two adjacent columns) of `batch` where it lies inside C: stored as 8
        bytes into split `split`'s fp32 partials (`store`), or its partials there added to it."""
        from mlir import ir
        from mlir.dialects import arith, vector

        k, pair = self.k, ir.VectorType.get([2], ir.F32Type.get())
        partials, c_c = self.partials[split, None, None], k.identity_tensor((self.m, self.n))
        accumulators, place = self.accumulators[batch], self._place(c_c, origin, batch)
        for slot in range(0, self.config.bn // 2, 2):  # (c0, c1), (c2, c3) of each n8 block
            row, column = place[self.consumer_thread, slot]
            with k.if_(c_c.inside((row, column))):
                at, slots = [partials.offset((row, column))], (slot, slot + 1)
                if store:
                    values = [k.load(accumulators.registers, [s]) for s in slots]
                    k.store_vector(vector.from_elements(pair, values), partials.memory, at)
                else:
                    added = k.load_vector(partials.memory, at, 2)
                    for lane, s in enumerate(slots):
                        k.store(arith.addf(k.load(accumulators.registers, [s]), vector.extract(added, [], [lane])),
                                accumulators.registers, [s])

    def _place(self, c_c, origin, batch: int):
        """(consumer thread, accumulator slot) -> C's (row, column) of batch `batch` of this CTA's consumers: the
        atom's accumulator layout, each consumer `consumer_rows` further down, the batch 64 x `batch` rows."""
        from mlir_tile.algebra.layout import Layout

        rows, columns = self.atom.c.rows, self.atom.c.columns
        consumers, step = self.config.consumers, 0 if self.config.pingpong else self.config.consumer_rows
        thread_values = [Layout((rows.shape[0] + (consumers,), rows.shape[1]), (rows.stride[0] + (step,), rows.stride[1])),
                         Layout((columns.shape[0] + (consumers,), columns.shape[1]),
                                (columns.stride[0] + (0,), columns.stride[1]))]
        row0, col0 = origin
        first = (row0 + 64 * batch if batch else row0, col0)
        return c_c.domain_offset(first).partition(thread_values)

    def scaling(self, place):
        """`scaled(value, slot)`: accumulator slot's value times its scales (fp8), each scale loaded once: the
        per-tensor product, or (row scales) the row's scale_a and the column's scale_b, rows and columns past
        C read at its last (their results are clipped; beside a 128 x 256 tile's accumulators ptxas spills
        352 bytes a thread: row scales take FP8_ROWS_TILE)."""
        from mlir.dialects import arith

        k, cached = self.k, {}
        if not self.scales or self.config.block_scales:  # (blockwise: applied as each k-tile was added in)
            return lambda value, slot: value
        if not self.config.row_scales:
            scale = arith.mulf(*(k.load(s, [0]) for s in self.scales))
            return lambda value, slot: arith.mulf(value, scale)

        def scaled(value, slot):
            row, column = place[self.consumer_thread, slot]
            for key, array, at, extent in (("row", self.scales[0], row, self.m), ("column", self.scales[1], column, self.n)):
                key = (key, slot % 4 // 2) if key == "row" else (key, slot // 4, slot % 2)  # a row: c0 c1, or c2 c3
                if key not in cached:
                    cached[key] = k.load(array, [k.minimum(at, k.as_index(extent) - 1)])
                value = arith.mulf(value, cached[key])
            return value
        return scaled

    def consumers_meet(self) -> None:
        """A barrier of the consumer warpgroups (the producer, specialized, never reaches it; ping-pong: of the
        consumer being built, named barrier 4 or 5)."""
        if self.side is not None:
            self.barriers.meet(self.side)
        elif self.config.specialized:
            self.barriers.meet_all()
        else:
            self.k.barrier()


def kernel_name(element: str, config: HopperConfig, epilogue: Epilogue | Choice | None = None) -> str:
    """The name the library keeps the kernel's PTX under (beside the mma.sync kernels: its config ends _sm90a)."""
    from mlir_tile.kernels.common import epilogue_suffix

    return f"{KERNEL}_{element}_{config}{epilogue_suffix(epilogue)}"
