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

Q, K and V are read through 2-D tensor maps over [batch * heads * seq, d] (K and V over [batch * kv_heads * seq,
d]: grouped-query attention, query head h of a batch reading K/V head h / group, which is (batch x heads + h) /
group); a tile reaching past its head's sequence reads the next head's rows (or TMA's zeros past the last), whose
keys the mask sets to -inf (their probabilities 0) and whose query rows are never stored.

Persistent (16-bit): one CTA an SM walks the (head, row tile) items c, c + grid, ... (causal: each head's row
tiles paired longest with shortest and dealt two at a time, `QueryTiles(paired=True)`, so that the CTAs' walks
weigh alike, the K/V index carried on across items of unequal key tiles); O's tile is not written over Q's but
into bytes of its own (or, where there are none, over the item's last key tile's stage), so each consumer
releases its band of Q once its last S is done, and the producer loads the next item's first K/V tiles and Q's
bands as the item's last tiles free their bytes: the next item's first S waits for nothing that loads under
this item's epilogue. The ping-pong turns run on across items.

Kernel parameters: `attention(q_map, k_map, v_map, o_map, lse, seq, batch_heads, group[, descale_q, descale_k,
descale_v, stride, sequences_per_row])`: four CUtensorMaps (`boxes` lists their boxes: Q's 2-D over [batch *
heads * seq, d], K's and V's over [batch * kv_heads * seq, d], O's 3-D over [batch * heads, seq, d], O 16-bit: the
inputs' type, bf16 for e4m3), lse [batch * heads, seq] f32, seq, batch x heads and the query heads a K/V head
(heads / kv_heads) (64-bit), e4m3's three descales (f32: one a tensor, stride 0, or [batch, kv_heads], stride 1,
the item's K/V head's read; packed sequences, `sequences_per_row` sequences a row of them). Grid
`HopperAttentionConfig.grid`, block `threads`, `shared_bytes` of dynamic shared memory.

Packed sequences (`varlen`, `sm90_varlen`): `attention(q_map, k_map, v_map, o, lse, seq, batch_heads, group,
cu_seqlens_q, cu_seqlens_k, heads, total_q, total_k)`: Q's map 2-D over [total_q, heads x d], K's and V's over
[total_k, kv_heads x d], O [total_q, heads x d] 16-bit as i32 pairs, lse [heads, total_q] f32, seq the longest
sequence's queries rounded up to the row tile, batch_heads batch x heads, the offsets int32 [batch + 1]; a CTA an
item (batch x heads + head, row tile of the longest), returning where the tile starts past its sequence. Paged
K/V (`page_rows`, `sm90_varlen.Pages`) then takes `block_table, pages_per_sequence, page_size, pages`: K's and
V's maps over the pool [pages x page_size, kv_heads x d], cu_seqlens_k each sequence's count of keys (int32
[batch]), total_k pages_per_sequence x page_size, the table int32 [batch, pages_per_sequence].
"""
from __future__ import annotations

import contextlib
import math

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.sm90_layouts import column_steps, row_halves, tiles, transposition
from mlir_tile.kernels.flash.sm90_tiles import BAND_BYTES, HopperAttentionConfig
from mlir_tile.kernels.flash.sm90_epilogue import Epilogue
from mlir_tile.kernels.flash.sm90_softmax import OnlineSoftmax
from mlir_tile.kernels.flash.sm90_varlen import PackedItems
from mlir_tile.kernels.flash.variants import Variant


KERNEL = "attention"
FP8_PARAMETERS = 5  # the descales of Q, K and V (f32 pointers), their stride and sequences a row (`descale`)


def build_module(config: HopperAttentionConfig = HopperAttentionConfig(), context=None, variant: Variant | None = None):
    """The kernel of `config` (see the module's text), computing `variant` (`variants.Variant`: its operands
    after the kernel's own parameters)."""
    from mlir_tile.builder import Global, Kernel, TensorMap

    if variant is not None and variant.keys is not None and config.causal:
        raise ValueError(f"hopper attention: variant {variant.name!r} says which keys each row sees; with it the "
                         f"configuration is not causal")
    scales = [Global("f32")] * 3 + ["index", "index"] if config.fp8 else []  # (`FP8_PARAMETERS`)
    # (packed sequences: cu_seqlens_q and _k, heads, total_q and total_k)
    scales += [Global("i32"), Global("i32"), "index", "index", "index"] if config.varlen else []
    scales += [Global("i32"), "index", "index", "index"] if config.page_rows else []  # (the block table, its shape)
    scales += ["index"] if config.split_kv else []  # (the splits)
    scales += variant.parameters() if variant is not None else []
    # four warpgroups: without the occupancy ptxas cannot tell a thread's registers at launch and ignores setmaxnreg
    # (C7508); up to three it can, and the measured kernels are left as they were built
    occupancy = config.ctas_per_sm if config.ctas_per_sm > 1 else 1 if config.consumers == 3 else None
    # (O, the lse: O's 16-bit pairs, packed sequences; split-KV, each split's O and lse, fp32)
    outputs = [TensorMap(), Global("f32")] if not config.varlen else [Global("f32" if config.split_kv else "i32"),
                                                                      Global("f32")]
    with Kernel(KERNEL, [TensorMap()] * 3 + outputs + ["index", "index", "index"] + scales,
                block=(config.threads, 1, 1),
                chip=WARPGROUP_CHIP, fast_math=True, min_blocks_per_sm=occupancy, context=context) as k:
        _HopperAttention(k, config, variant).build()
    return k.module


class _HopperAttention(OnlineSoftmax, Epilogue, PackedItems):
    def __init__(self, k, config: HopperAttentionConfig, variant: Variant | None):
        from mlir_tile.isa.atoms import wgmma
        from mlir_tile.builder.schedule import ConsumerBarriers, QueryTiles, StageRing, TmaPipeline

        self.k, self.config, self.d, self.variant = k, config, config.head_dim, variant
        self.keys_of_rows = variant is not None and variant.keys is not None  # (else all, or causal's)
        self.extras = k.arguments[8 + FP8_PARAMETERS * config.fp8 + 5 * config.varlen + 4 * bool(config.page_rows)
                                  + config.split_kv:]
        self.q_map, self.k_map, self.v_map, self.o_map, self.lse, self.seq, batch_heads, group = k.arguments[:8]
        self.group = k.as_index(group)
        if config.varlen:  # (the O pointer `o_map`, as 16-bit pairs; `seq` the longest sequence's queries; after
            # fp8's descales)
            packed = 8 + FP8_PARAMETERS * config.fp8
            self.cu_seqlens_q, self.cu_seqlens_k, self.heads, self.total_q, self.total_k = k.arguments[packed:packed + 5]
            # (paged K/V: the block table, pages a sequence, the page size, pages)
            self.paging = k.arguments[packed + 5:packed + 9]
            self.splits = k.arguments[packed + 5 + 4 * bool(config.page_rows)] if config.split_kv else None
        self.storage = "i8" if config.fp8 else config.element
        self.order = QueryTiles(k, self.seq, config.rows, reverse=config.causal, heads=batch_heads,
                                paired=config.causal and config.persistent)
        self.tiles = tiles(config)
        self.s_atom, self.o_atom = wgmma(config.keys, config.element), wgmma(self.d, config.element)
        self.s_halves, self.o_halves = row_halves(self.s_atom), row_halves(self.o_atom)  # (per atom: N / 2 slots)
        self.s_columns = column_steps(self.s_atom)
        self.shared = k.dynamic_shared(alignment=1024)
        readers, boxes_across = 4 * config.consumers, self.d // config.box_columns
        tile_elements = config.keys * self.d
        # Q's bands: item j's band of consumer c is the ring's k-tile j * consumers + c (its stage c), released by
        # the consumer's storing warp once its last S is done (persistent) or once its TMA stores of O, written
        # over the band, have read it (narrow: j * consumers + c lies below 2^31, as Q's 64-row bands do)
        self.barriers = ConsumerBarriers(k, config.consumers)
        self.q_ring = StageRing(k, self.shared, config.consumers, [(self.storage, 64 * self.d)],
                                narrow=config.narrow_index)
        self.q_pipeline = TmaPipeline(k, self.q_ring, 1, boxes_across, name="q")
        # (narrow: the K/V index stays below 2 stages + the key tiles, `work`, and so below 2^31)
        self.ring = StageRing(k, self.shared, config.stages, [(self.storage, tile_elements)] * 2, start=config.q_bytes,
                              narrow=config.narrow_index)
        # fp8: V^T written by the producer warpgroup's 4 warps beside K's boxes; V's boxes into a staging ring
        boxes = boxes_across * (config.keys // config.page_rows if config.page_rows else 1)  # (a tile's K or V)
        self.pipeline = TmaPipeline(k, self.ring, readers, boxes * (2 - config.fp8), name="kv",
                                    writers=4 if config.fp8 else 0)
        if config.fp8:
            self.staging_ring = StageRing(k, self.shared, config.staged, [(self.storage, tile_elements)],
                                          start=config.staging_offset, narrow=config.narrow_index)
            self.staging = TmaPipeline(k, self.staging_ring, 4, boxes, name="staging")
        self.warpgroup = k.broadcast(k.warpgroup_id()) if config.uniform_q else k.warpgroup_id()
        # (its bound proven: wgmma's row block of Q)
        self.consumer = (self.warpgroup - 1) % config.consumers
        # a score step takes q.k / sqrt(d), and the softmax its results times log2(e) (else both scales at once)
        stepped = variant is not None and variant.score is not None
        self.scale = k.constant((1 if stepped else LOG2E) / math.sqrt(self.d), "f32")
        self.score_scale, self.scale = (self.scale, k.constant(LOG2E, "f32")) if stepped else (None, self.scale)
        self.unscaled = (self.score_scale, self.scale)  # (fp8: times each item's descales, `descale`)
        self.negative_infinity = k.constant(float("-inf"), "f32")

    @contextlib.contextmanager
    def work(self):
        """`with self.work() as j:` the body once for each of this CTA's items (its block's; persistent, its walk:
        `QueryTiles.persistent`), j counting them, with the item's head, first row (`q0`), key tiles, and its key
        tiles' first index in the K/V pipeline (`kv`: the items before it took theirs, counted modulo
        `index_period`)."""
        from mlir_tile.builder.schedule import KeyTiles

        k, config = self.k, self.config
        first, count = self.order.persistent() if config.persistent else (k.block_id(), k.index(1))
        carried = None
        if config.persistent and (config.causal or self.keys_of_rows):  # (items of unequal key tiles: carried on)
            carried = k.registers(1)
            k.store(k.constant(0), carried, [0])
        with k.loop(0, count) as j:
            item = self.order.walked(first, j) if config.persistent else first
            if config.split_kv:  # (block b: split b mod splits of item b / splits)
                splits = k.as_index(self.splits)
                self.split, item = item % splits, item // splits
            self.head, query_tile = self.order.of_block(item)
            # (packed: the item's index, batch x heads + head, is the operand's row; pack_gqa, each row's own)
            values = self.variant.head_values(k, self.head, self.extras) if self.variant else {}
            self.head_values = (values, values)
            self.q0 = query_tile * config.rows
            if config.varlen:
                self.locate_in_sequence()
            else:  # the head's first row of Q's 2-D map, its K/V head's of K's and V's (column 0)
                self.q_origin = (self.head * k.as_index(self.seq), None)
                self.kv_origin = (self.head // self.group * k.as_index(self.seq), None)
                self.g_lse = k.tensor(self.lse, (self.order.heads, self.seq))[self.head, None]
                self.key_tiles = self.visited() if self.keys_of_rows else KeyTiles(
                    k, self.seq, config.keys, self.q0, rows=config.rows, causal=config.causal)
            # (the key tiles before the item counted modulo `index_period`: without the mask every item has as
            # many, j x that; causal, carried on)
            # (broadcast: else ptxas keeps the walk's K/V index, and the descriptors made from it, in vector
            # registers, moved to uniform ones for each wgmma: the persistent grid ran 1.05-1.28x with it)
            self.kv_base = None
            if carried is not None:
                self.kv_base = k.broadcast(k.as_index(k.load(carried, [0]), unsigned_from="i32"))
            elif config.persistent:
                self.kv_base = k.broadcast(j * self.key_tiles.count % config.index_period)
            self.first_item, self.last_item = k.compare("eq", j, 0), k.compare("eq", j, count - 1)
            self.item = j
            if config.varlen:  # (a row tile past its sequence's queries: nothing to do)
                with k.if_(k.compare("ult", self.q0, self.q_rows)):
                    yield j
            else:
                yield j
            if carried is not None:
                k.store(k.as_i32((self.kv_base + self.key_tiles.count) % config.index_period), carried, [0])

    def visited(self):
        """The key tiles the item's rows see (`KeyTiles.between`: the variant's keys of its first row and of
        its last inside the sequence)."""
        from mlir_tile.builder.schedule import KeyTiles

        k = self.k
        last = k.minimum(self.q0 + self.config.rows, k.as_index(self.seq)) - 1
        lowest, highest = (self.variant.key_interval(k, row, self.seq, self.extras) for row in (self.q0, last))
        return KeyTiles.between(k, self.config.keys, lowest, highest)

    def kv(self, tile):
        """Key tile `tile` of this item (counted from its first) as the K/V pipeline (and fp8's staging
        pipeline) counts it."""
        return tile if self.kv_base is None else self.kv_base + self.k.as_index(tile)

    def key_tile_at(self, tile):
        """The key tile `tile` tiles after the item's first, in the sequence."""
        first = self.key_tiles.first
        return tile if first is None else first + self.k.as_index(tile)

    def build(self) -> None:
        k, config = self.k, self.config
        if config.split_kv:  # (the combine, launched as this kernel's dependent, may start; it waits for this one)
            k.launch_dependents()
        with k.role(self.warpgroup, "producer", config.producer_registers):
            if config.fp8:
                self.produce_transposed()
            else:
                with k.if_(k.compare("eq", k.thread_id(), 0)):
                    self.produce()
        with k.role(self.warpgroup, "consumers", config.consumer_registers):
            self.consume()

    # ----- the producer -----
    def load_boxes(self, pipeline, index, at, layout: str, tensor_map, row, first_column, matrix=None) -> None:
        """`pipeline.load_boxes` of a tile (`tiles[layout]`, boxes of 128 bytes of columns) of this kernel's shared
        memory and element (`matrix`: of a 3-D map's)."""
        pipeline.load_boxes(index, self.shared, at, self.tiles[layout], self.storage, self.config.box_columns,
                            tensor_map, row, first_column, matrix)

    def produce(self) -> None:
        """Per item, Q's bands, then each key tile's K and V once its stage is free; after the first item, the
        first `stages` - 1 key tiles before Q, in the order their bytes free up under the item before: the
        stages of its last tiles but one, Q's bands once its last S is done, the last tile's stage once its
        P V is (or, `o_in_stage`, once its epilogue has stored O from it)."""
        k = self.k
        with self.work():
            ahead = k.select(self.first_item, k.index(0), k.minimum(self.key_tiles.count, self.config.stages - 1))
            with k.loop(0, ahead) as tile:
                self.load(tile)
            self.load_q()
            with k.loop(ahead, self.key_tiles.count) as tile:
                self.load(tile)

    def load_q(self) -> None:
        """This item's band of Q for each consumer, once its stage is free."""
        k, consumers = self.k, self.config.consumers
        for consumer in range(consumers):
            band = self.q_band(k.index(consumer))
            self.q_pipeline.acquire(band)
            matrix, row, column = self.q_band_at(consumer) if self.config.varlen else (
                None, self.q_origin[0] + (self.q0 + 64 * consumer), self.q_origin[1])
            self.load_boxes(self.q_pipeline, band, k.index(consumer * BAND_BYTES), "q_band", self.q_map, row, column,
                            matrix)

    def load(self, tile) -> None:
        """Key tile `tile`'s K into its stage once free, and its V there too (fp8: into its staging stage once
        the transposer is done with that)."""
        ring, index = self.ring, self.kv(tile)
        self.pipeline.acquire(index)
        (first_row, column), keys = self.kv_origin, self.config.keys
        row = first_row + self.key_tile_at(tile) * keys
        if self.config.page_rows:
            self.load_pages(index, row)
            return
        stage = ring.stage(index)
        self.load_boxes(self.pipeline, index, ring.offset(stage, 0), "k", self.k_map, row, column)
        if not self.config.fp8:
            self.load_boxes(self.pipeline, index, ring.offset(stage, 1), "k", self.v_map, row, column)
            return
        self.staging.acquire(index)
        staged = self.staging_ring.offset(self.staging_ring.stage(index))
        self.load_boxes(self.staging, index, staged, "v_staged", self.v_map, row, column)

    def produce_transposed(self) -> None:
        """fp8: per item, the producer warpgroup transposes each key tile's V into its stage (`transpose`), its
        first thread loading Q and the first `staged` key tiles (persistent: those tiles first, as Q's bands
        free only once the item before's last S is done), then key tile t + `staged` after transposing tile t
        (the staging stage it fills was freed by that transposition)."""
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
                later = tile + self.config.staged
                with k.if_(loader & k.compare("ult", later, count)):
                    self.load(later)

    def transpose(self, tile) -> None:
        """fp8: once TMA wrote key tile `tile`'s V into its staging stage and its stage is free, V^T written
        there in P's key order (`transposition`), counted on the stage's full barrier beside K's boxes; the
        staging stage then released."""
        self.pipeline.rewrite_from(self.staging, self.kv(tile), transposition(self.config), self.shared)

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
            if self.config.fp8:
                self.descale()
            self.attend()
        if self.config.persistent and not self.config.o_in_stage:  # (the last item's stores read O's tile)
            with k.if_(k.compare("eq", self.consumer_thread(), 0)):
                k.tma_store_wait(0)

    def descale(self) -> None:
        """fp8: the item's descales into S's scale (or the score step's: q's times k's) and O's (v's), each at
        the item's K/V head of its sequence (`sequences_per_row` sequences a row of them, a contiguous cache's
        two) times `stride` (0: one descale a tensor; 1: [batch, kv_heads], FlashAttention-3's)."""
        from mlir.dialects import arith

        k, config = self.k, self.config
        pointers, (stride, sequences_per_row) = self.k.arguments[8:11], self.k.arguments[11:13]
        if config.varlen:
            kv_heads = k.as_index(self.heads) // self.group
            kv_head = self.head if config.pack_gqa else self.head // self.group
            kv_item = self.batch // k.as_index(sequences_per_row) * kv_heads + kv_head
        else:  # (the item's head counts batch x heads: its K/V head's, batch x kv_heads)
            kv_item = self.head // self.group
        q_scale, k_scale, self.v_scale = (k.load(pointer, [kv_item * k.as_index(stride)]) for pointer in pointers)
        descales = arith.mulf(q_scale, k_scale)
        score_scale, scale = self.unscaled
        if score_scale is not None:
            self.score_scale = arith.mulf(score_scale, descales)
        else:
            self.scale = arith.mulf(scale, descales)

    def attend(self) -> None:
        k = self.k
        if self.config.varlen:
            self.row_head_values()
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
        if self.config.causal or self.keys_of_rows or not self.config.persistent:  # (O is still 0: no rescaling)
            self.softmax(0, masked=True)
        else:  # (tile 0 has no key past the sequence where S >= keys: the walk's short items ran 1.02-1.06x with
            # the unmasked softmax there; d 64's launched grid 0.98x, and d 128's causal walk spilled)
            whole = k.compare("ult", 0, mine.unmasked)
            with k.if_(whole):
                self.softmax(0, masked=False)
            with k.if_(~whole):
                self.softmax(0, masked=True)
        self.p = k.accumulators_as_a(self.s_acc, self.o_atom)
        lead = k.index(1)
        if mine.lead is not None:  # (tiles past the first with keys before some row's first)
            lead = k.minimum(k.maximum(mine.lead, lead), mine.count)
            with k.loop(1, lead) as tile:
                self.key_tile(tile, masked=True)
        split = k.maximum(mine.unmasked, lead)
        with k.loop(lead, split) as tile:
            self.key_tile(tile, masked=False)
        with k.loop(split, mine.count) as tile:
            self.key_tile(tile, masked=True)
        if self.config.persistent:  # (the item's last S is done: the next item's Q may load under its last P V)
            self.release_q_band()
        last = self.kv(mine.count - 1)
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
        from mlir_tile.builder.schedule import KeyTiles

        config = self.config
        if (not config.causal or config.fp8 or config.pingpong or config.persistent or config.consumers == 1
                or self.keys_of_rows):
            return self.key_tiles
        first_row = self.q0 + self.consumer * 64
        if config.varlen:
            return self.consumer_key_tiles(first_row)
        return KeyTiles(self.k, self.seq, config.keys, first_row, rows=64, causal=True)

    def release_q_band(self) -> None:
        """This consumer's first warp (its storing thread's) releases its band of Q."""
        k = self.k
        with k.if_(k.compare("ult", self.consumer_thread(), 32)):
            self.q_pipeline.release(self.q_band())

    def consumer_thread(self):
        """This thread within its consumer warpgroup."""
        return self.k.thread_id() % 128

    def q_band(self, consumer=None):
        """A consumer's band of Q in this item (this thread's consumer's by default), as Q's pipeline counts it."""
        return self.item * self.config.consumers + (self.consumer if consumer is None else consumer)

    def wait_turn(self, first: bool = False) -> None:
        """Ping-pong: wait until the other consumer has issued its GEMMs of the same turn (consumer 1) or of the
        turn before (consumer 0: on an item's first turn, unless the item is the CTA's first)."""
        if self.config.pingpong:
            self.barriers.wait_turns(self.consumer, skip={0: self.first_item} if first else None)

    def pass_turn(self, last: bool = False) -> None:
        """Ping-pong: this consumer's GEMMs issued, the other's turn (consumer 1's last turn of the CTA's last
        item has no turn of consumer 0 after it)."""
        if self.config.pingpong:
            self.barriers.pass_turns(self.consumer, skip={1: self.last_item} if last else None)

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
        before = index - 1
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

    def _query(self, row):
        """The query of the item's `row` (of the accumulators' tile); pack_gqa: of its (query, head) pair."""
        query = self.q0 + (self.consumer * 64 + row)
        return self.split_row(query)[0] if self.config.pack_gqa else query

    def position(self, row):
        """The item's `row`'s query as a variant sees it: its position among the sequence's keys (packed: the
        query plus len_k - len_q, bottom right, as causal; a signed index value)."""
        return self.sequence.position(self._query(row)) if self.config.varlen else self._query(row)

    def row_keys(self, row) -> tuple:
        """(first, end): the keys the variant gives the item's `row` (packed: clamped into its sequence's keys,
        `query_keys`)."""
        if self.config.varlen:
            return self.query_keys(self._query(row))
        return self.variant.key_interval(self.k, self._query(row), self.seq, self.extras)
