"""Attention's backward pass on Hopper's data path (sm_90a), written with the builder alone, in FlashAttention-3's
order (docs/notes/attention-backward.md): dK and dV of a block of keys kept in registers while the query blocks
stream by, dQ added into an fp32 buffer by TMA reductions; f16 or bf16, head dims 64, 128 and 256, causal or not.

A CTA takes `keys` keys of one (batch, K/V head): 128 at d 64 and 128, each of its two consumer warpgroups 64 of
them; 64 at d 256, whose consumers split the block's rows of S^T and d's columns of dK, dV and dQ instead
(`sm90_backward_tiles`: a consumer's dK and dV over all of d 256 would take all its registers). Warpgroup 0 is
the producer (24 registers): its first thread loads the CTA's K and V tiles once, then each query block's Q and dO
tiles ([rows, d], 128-byte swizzled boxes) with the block's rows of LSE and D into a `TmaPipeline`'s stages: the
blocks of each query head that reads this K/V head in turn (grouped-query attention: `group` query heads a K/V
head, whose dK and dV sums are the CTA's registers across all of them). Per query block, a consumer:

- S^T = K Q^T and dP^T = V dO^T by wgmma from shared memory (its keys as M, FlashAttention-3's `SdP_swapAB`:
  the accumulators' columns are queries, so that P^T and dS^T are A operands in registers below);
- P^T = exp2(S^T scale log2(e) - LSE[query] log2(e)), 0 for keys past the sequence and (causal) past the query;
  dS^T = P^T (dP^T - D[query]), D = rowsum(dO O) (the caller's preprocessing);
- dV += P^T dO and dK += dS^T Q: P^T and dS^T packed in the threads that hold them (`accumulators_as_a`, the RS
  form), dO and Q read MN-major from their tiles; at d 256, P^T and dS^T of each consumer's 32 rows written by
  stmatrix into [keys, rows] tiles (a 64-byte swizzled box each), then each consumer's columns of dV and dK
  multiplied from them over all the block's rows (`gradients_through_shared`);
- dS^T by stmatrix as its 64-row band of a [keys, rows] tile, element for element the A [K, M] of dQ = dS K read
  MN-major (`kernels.common.stored_tile`, `a_major` "km"); both bands in (named barrier), consumer c multiplies
  its share of dQ's columns over the CTA's keys, stores the fp32 sums into its part of a tile, and its first
  thread adds it into dQaccum by TMA reductions (`Kernel.tma_reduce_add`: atomic, the key blocks in no order).
  The batches overlap as FlashAttention-3's: P^T made under dP^T's, dS^T under dV's, dQ's stored under dK's.

The epilogue writes dK (times the softmax scale) and dV by stmatrix over the K and V tiles and stores them by TMA
through 3-D maps, which stop at the head's last row.

Kernel parameters: `attention_backward(q_map, k_map, v_map, do_map, dq_map, dk_map, dv_map, lse_map, delta_map,
seq, batch_heads, group)`: Q and dO 2-D over [batch * heads * seq, d] and K and V over [batch * kv_heads * seq, d]
(16-bit; heads = kv_heads x group), dQaccum's 2-D over [batch * heads * padded, d] f32 (`padded`: seq rounded up
to the query block, zeroed by the caller, dQ = its rows times the scale), dK's and dV's 3-D over [batch * kv_heads,
seq, d]; the caller's preprocessing's LSE log2(e) (the forward's natural-log LSE times log2(e), +inf past the
sequence) and D (0 past it), 2-D over [batch * heads, padded] f32 (unswizzled boxes of a block's row); seq, batch
x heads and the group (64-bit). Grid `BackwardConfig.grid` (of batch x kv_heads), block `threads`,
`shared_bytes`.

Packed sequences (`varlen`, `sm90_varlen`): Q's, dO's, K's and V's maps 2-D over [tokens, heads x d]; dK and dV
pointers to [total_k, kv_heads x d] 16-bit as i32 pairs, stored by rows from the registers; dQaccum 2-D over
[heads x padded, d] and the statistics over [heads, padded], sequence b's rows from (q_start / 64 + b) x 64 on
(`backward.packed_rows`); seq the longest sequence's keys rounded up to the CTA's keys, batch x kv_heads, the
group, then cu_seqlens_q, cu_seqlens_k, kv_heads, total_q, total_k and padded. A CTA a (batch x kv_heads + K/V
head, block of keys of the longest), returning where the block starts past its sequence's keys; causal
bottom-right.

Deterministic (`deterministic`): a last parameter, the u32 flags (`BackwardConfig.flags` of them, zeroed) that
order the key blocks' additions into each query block's rows of dQaccum, so that dQ is the same bitwise from run
to run (`add_dq`).
"""
from __future__ import annotations

import math

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.kernels.common import LOG2E
from mlir_tile.kernels.flash.sm90_backward_scores import BackwardScores
from mlir_tile.kernels.flash.sm90_backward_tiles import (BOX_COLUMNS, FLOAT_BOX_COLUMNS, KERNEL, PRODUCER_REGISTERS,
                                                         BackwardConfig, band_steps, tiles)
from mlir_tile.kernels.flash.sm90_layouts import column_steps, row_halves
from mlir_tile.kernels.flash.variants import Variant

def build_module(config: BackwardConfig = BackwardConfig(), context=None, variant: Variant | None = None):
    """The kernel of `config` (see the module's text); with `variant` (`variants.Variant`), the gradients of
    attention with its keys, its score step (`score_gradient`) and its sink (nothing to do: the log-sum-exp holds
    it, and so P), its operands after the kernel's parameters."""
    from mlir_tile.builder import Global, Kernel, TensorMap

    if variant is not None and variant.score is not None and variant.score_gradient is None:
        raise ValueError(f"attention backward: variant {variant.name!r}: the backward takes a variant's keys, a "
                         f"score step with its score_gradient and a sink (P from the log-sum-exp, which holds it)")
    if variant is not None and variant.keys is not None and config.causal:
        raise ValueError(f"attention backward: variant {variant.name!r} says which keys each row sees: not causal")

    # (packed sequences: dK and dV pointers, as 16-bit pairs; cu_seqlens_q and _k, kv_heads, total_q, total_k and
    # the padded rows a head of dQaccum and the statistics)
    outputs = [TensorMap()] * 2 if not config.varlen else [Global("i32")] * 2
    packed = [Global("i32"), Global("i32"), "index", "index", "index", "index"] if config.varlen else []
    flags = [Global("i32")] if config.deterministic else []
    operands = variant.parameters() if variant is not None else []
    with Kernel(KERNEL, [TensorMap()] * 5 + outputs + [TensorMap()] * 2 + ["index", "index", "index"] + packed
                + operands + flags, block=(config.threads, 1, 1), chip=WARPGROUP_CHIP, fast_math=True,
                min_blocks_per_sm=1, context=context) as k:
        _Backward(k, config, variant).build()
    return k.module


class _Backward(BackwardScores):
    def __init__(self, k, config: BackwardConfig, variant: Variant | None = None):
        from mlir_tile.builder.schedule import ConsumerBarriers, StageRing, TmaPipeline
        from mlir_tile.isa.atoms import wgmma

        self.k, self.config, self.d, self.variant = k, config, config.head_dim, variant
        first_operand = 18 if config.varlen else 12  # (after the packed sequences' parameters)
        self.extras = k.arguments[first_operand:first_operand + len(variant.operands)] if variant is not None else ()
        (self.q_map, self.k_map, self.v_map, self.do_map, self.dq_map, self.dk_map, self.dv_map, self.lse_map,
         self.delta_map, self.seq, _, group) = k.arguments[:12]
        self.tiles = tiles(config)
        self.s_atom, self.d_atom = wgmma(config.score_rows, config.element), wgmma(config.kv_columns, config.element)
        # per S^T slot, which of the thread's two rows (keys) and which column step (query) it holds
        self.s_halves, self.s_columns = row_halves(self.s_atom), column_steps(self.s_atom)
        self.dq_atom = wgmma(config.dq_columns, config.element)
        self.shared = k.dynamic_shared(alignment=1024)
        seq = k.as_index(self.seq)
        keys = config.keys
        key_blocks = (seq + (keys - 1)) // keys
        block = k.block_id()
        # the CTA's K/V head, and its keys; its query heads are the group's: kv_head x group + g
        self.kv_head, key_block = block // key_blocks, block % key_blocks
        if config.deterministic and config.causal:  # (the last key blocks first: they add first, `turn`)
            key_block = key_blocks - 1 - key_block
        self.n0 = key_block * keys
        self.group = k.as_index(group)
        self.key_length, self.position_shift, self.first_head = self.seq, None, None  # (packed: the sequence's)
        if config.varlen:
            self.locate_in_sequence()
        else:
            query_blocks = (seq + (config.rows - 1)) // config.rows
            # causal: queries before the CTA's first key see none of its keys
            self.first = self.n0 // config.rows if config.causal else k.index(0)
            self.count = query_blocks - self.first  # a query head's blocks; the CTA walks them for each of the group
            if variant is not None and variant.keys is not None:  # (the blocks of the rows seeing the CTA's keys)
                self.first, self.count = self.blocks_seeing(seq, seq)
            self.padded = query_blocks * config.rows  # a head's rows of dQaccum and of the statistics
            self.keys_end, self.shift, self.padded_start = seq, None, k.index(0)
            self.q_origin = self.kv_origin = None
        boxes_across = self.d // BOX_COLUMNS
        self.barriers = ConsumerBarriers(k, config.consumers)
        self.kv_ring = StageRing(k, self.shared, 1, [(config.element, keys * self.d)] * 2)
        self.kv = TmaPipeline(k, self.kv_ring, 4 * config.consumers, 2 * boxes_across, name="kv")
        self.ring = StageRing(k, self.shared, config.stages, [(config.element, config.rows * self.d)] * 2,
                              start=2 * config.kv_bytes)
        # each block's LSE and D rows land in a ring of their own, counted on the Q/dO stage's barrier
        self.statistics = StageRing(k, self.shared, config.stages, [("f32", config.rows)] * 2,
                                    start=config.statistics_offset)
        self.pipeline = TmaPipeline(k, self.ring, 4 * config.consumers, 2 * boxes_across + 2, name="q_do")
        # (broadcast, so that ptxas keeps what is made from the consumer's index, the wgmma descriptors of its keys,
        # rows and columns, in uniform registers: spills of 216 bytes at d 128 and 504 at d 256 without)
        self.warpgroup = k.broadcast(k.warpgroup_id())
        self.consumer = (self.warpgroup - 1) % config.consumers
        self.steps = band_steps(config)
        self.scale = k.constant(LOG2E / math.sqrt(self.d), "f32")
        self.flags = k.arguments[-1] if config.deterministic else None

    def locate_in_sequence(self) -> None:
        """Packed sequences: the CTA's (batch x kv_heads + K/V head) split, its sequence (`Sequence`), its query
        blocks (causal: from the block of the first query whose diagonal reaches the CTA's first key), the
        sequence's first row in dQaccum and the statistics (FlashAttention-3's padding: (q_start / rows + batch)
        x rows, so that no block's rows reach the next sequence's), the tokens' origins of Q, dO, K and V."""
        from mlir_tile.builder.integers import maximum
        from mlir_tile.kernels.flash.sm90_varlen import Sequence

        k, config, rows = self.k, self.config, self.config.rows
        self.cu_seqlens_q, self.cu_seqlens_k, kv_heads, total_q, total_k, self.padded = k.arguments[12:18]
        kv_heads = self.k_heads = k.as_index(kv_heads)
        batch, self.kv_head = self.kv_head // kv_heads, self.kv_head % kv_heads
        sequence = self.sequence = Sequence(k, self.cu_seqlens_q, self.cu_seqlens_k, batch, k.as_index(total_q),
                                            k.as_index(total_k))
        self.keys_end, self.shift = sequence.k_length, sequence.shift if config.causal else None
        first_query = maximum(self.n0 - sequence.shift, 0, signed=True) if config.causal else k.index(0)
        self.first = first_query // rows
        self.count = maximum((sequence.q_length + (rows - 1)) // rows - self.first, 0, signed=True)
        self.padded_start = (sequence.q_start // rows + batch) * rows
        self.padded = k.as_index(self.padded)
        self.q_origin, self.kv_origin = sequence.q_start, sequence.k_start
        if self.variant is not None:  # (its rows at their positions among the keys, its heads over batch x heads)
            self.key_length, self.position_shift = sequence.k_length, sequence.shift
            self.first_head = batch * kv_heads * self.group
            if self.variant.keys is not None:
                self.first, self.count = self.packed_blocks_seeing(sequence)

    def blocks_seeing(self, seq, rows, position=None):
        """A variant's: (first, count) of the query blocks with a row that sees one of the CTA's keys
        (`Variant.rows_seeing` over `rows` rows, `position` a row's among the `seq` keys), none where no row does
        (dK and dV then 0)."""
        from mlir_tile.builder.integers import maximum

        k, block = self.k, self.config.rows
        lowest, beyond = self.variant.rows_seeing(k, self.n0, k.minimum(self.n0 + self.config.keys, seq), seq,
                                                  self.extras, rows=rows, position=position)
        first = lowest // block
        return first, maximum((beyond + (block - 1)) // block - first, 0, signed=True)

    def packed_blocks_seeing(self, sequence):
        """`blocks_seeing` of a packed sequence where the host checked the keys' rules at its length (keys up to
        `variants.SHORTER_CHECKED`, or max_seqlen_k: the `seq` parameter) and its queries' positions are among
        its keys (no more queries than keys): the rules are what the search needs; else every block of its rows,
        each score still masked by the variant's keys (a slower walk, never a wrong one)."""
        from mlir_tile.kernels.flash.variants import SHORTER_CHECKED

        k = self.k
        searched = self.blocks_seeing(sequence.k_length, sequence.q_length, sequence.position)
        checked = ((k.compare("ule", sequence.k_length, SHORTER_CHECKED)
                    | k.compare("eq", sequence.k_length, k.as_index(self.seq)))
                   & k.compare("ule", sequence.q_length, sequence.k_length))
        every = (sequence.q_length + (self.config.rows - 1)) // self.config.rows
        self.searched = checked
        return k.select(checked, searched[0], k.index(0)), k.select(checked, searched[1], every)

    def build(self) -> None:
        k, config = self.k, self.config
        from mlir_tile.builder.integers import with_operators

        inside = with_operators(k.compare("ult", self.n0, self.keys_end)) if config.varlen else None
        with k.role(self.warpgroup, "producer", PRODUCER_REGISTERS):
            loader = with_operators(k.compare("eq", k.thread_id(), 0))
            with k.if_(loader if inside is None else loader & inside):
                self.produce()
        with k.role(self.warpgroup, "consumers", config.consumer_registers):
            if inside is None:
                self.consume()
            else:  # (a block of keys past its sequence's: nothing to do)
                with k.if_(inside):
                    self.consume()

    # ----- the producer -----
    def load_boxes(self, pipeline, index, at, layout: str, tensor_map, row, first_column=None) -> None:
        """`pipeline.load_boxes` of a tile (`tiles[layout]`, boxes of 128 bytes of columns) of this kernel's shared
        memory and element."""
        pipeline.load_boxes(index, self.shared, at, self.tiles[layout], self.config.element, BOX_COLUMNS, tensor_map,
                            row, first_column)

    def block_of(self, step):
        """(query head, first row) of the CTA's query block `step`: the group's heads in turn, each's blocks from
        `first` on."""
        return self.kv_head * self.group + step // self.count, (self.first + step % self.count) * self.config.rows

    def produce(self) -> None:
        """K and V once; then each query block's Q, dO and rows of the statistics once its stage is free."""
        k, ring, d = self.k, self.ring, self.d
        packed = self.config.varlen  # (rows of tokens, a head's columns: [tokens, heads x d])
        self.kv.acquire(0)
        for part, tensor_map in enumerate((self.k_map, self.v_map)):
            row = self.kv_origin + self.n0 if packed else self.kv_head * k.as_index(self.seq) + self.n0
            self.load_boxes(self.kv, 0, self.kv_ring.offset(k.index(0), part), "kv", tensor_map, row,
                            self.kv_head * d if packed else None)
        with k.loop(0, self.count * self.group) as step:
            self.pipeline.acquire(step)
            head, q0 = self.block_of(step)
            row = self.q_origin + q0 if packed else head * k.as_index(self.seq) + q0
            for part, tensor_map in enumerate((self.q_map, self.do_map)):
                self.load_boxes(self.pipeline, step, ring.offset(ring.stage(step), part), "q", tensor_map, row,
                                head * d if packed else None)
            for part, tensor_map in enumerate((self.lse_map, self.delta_map)):
                row_stats = self.statistic(self.statistics.offset(self.statistics.stage(step), part))
                self.pipeline.load(step, row_stats, tensor_map, (head, self.padded_start + q0 if packed else q0))

    # ----- the consumers -----
    def consume(self) -> None:
        k = self.k
        self.s_acc, self.dp_acc = k.accumulators(self.s_atom), k.accumulators(self.s_atom)
        self.dv_acc, self.dk_acc = k.accumulators(self.d_atom), k.accumulators(self.d_atom)
        self.dq_acc = k.accumulators(self.dq_atom)
        self.p = self.ds = None
        self.kv.wait(0)
        self.key_tile, self.value_tile = (self.operand(self.kv_ring.offset(k.index(0), part), "kv",
                                                       self.config.keys * self.d)
                                          for part in range(2))
        stepped = self.variant is not None and self.variant.score is not None
        if stepped and any(operand.kind == "head" for operand in self.variant.operands) and not (
                self.config.split_columns):  # (a query head's blocks in turn, its values loaded once for them:
            # loaded a block, ALiBi's d 128 kernel spilled 264-280 bytes, not 140-164; d 256's, whose consumers split
            # d's columns, and those without head values spill less in the flat loop)
            with k.loop(0, self.group) as query_head:
                heads = self.head_values(self.kv_head * self.group + query_head)
                with k.loop(0, self.count) as block:
                    self.query_block(query_head * self.count + block, heads)
        else:
            with k.loop(0, self.count * self.group) as step:
                self.query_block(step)
        with k.if_(k.compare("eq", self.consumer_thread(), 0)):
            k.tma_store_wait(0)  # (dQ's last reductions have read its tile)
        self.epilogue()

    def operand(self, at, tile: str, elements: int | None = None, element: str | None = None):
        """The tile `tiles[tile]` from byte `at` of shared memory (a view of `elements`, its layout's cosize where
        not given)."""
        k, layout = self.k, self.tiles[tile]
        return k.tensor(k.view(self.shared, (elements or layout.cosize,), element or self.config.element, at), layout)

    def consumer_part(self, at, tile: str):
        """Byte `at` of a tile moved to this consumer's part of it (`band_steps`; both consumers' where the step
        is 0)."""
        step = self.steps[tile]
        return at + self.consumer * step if step else at

    def query_block(self, step, heads: dict | None = None) -> None:
        """S^T and dP^T of this consumer's keys and query rows; dV, dK (`gradients_in_registers`, or where the
        consumers split d's columns `gradients_through_shared`) and this consumer's share of dQ (`heads`: a score
        step's head values, `Variant.head_values`, where the caller loaded them; else loaded here)."""
        k, config, ring = self.k, self.config, self.ring
        stage = ring.stage(step)
        q, do = (ring.offset(stage, part) for part in range(2))
        self.pipeline.wait(step)
        self.cleared(self.s_acc, self.dp_acc)
        key_block = 0 if config.split_columns else self.consumer
        for keys, block, accumulators in ((self.key_tile, q, self.s_acc), (self.value_tile, do, self.dp_acc)):
            k.wgmma(self.s_atom, keys, self.operand(self.consumer_part(block, "q_band"), "q_band"), accumulators,
                    accumulate=False, a_row_block=key_block)
        k.wgmma_wait(1, [self.s_acc])  # (S^T's batch: P^T made under dP^T's)
        facts = self.slot_facts(self.block_of(step)[1])
        if self.variant is not None and self.variant.score is not None:  # (its head's values, its distances)
            facts["heads"] = heads if heads is not None else self.head_values(self.block_of(step)[0])
            facts["nearest"] = self.variant.distance(k, facts["first_key"], facts["position"])
        if config.split_columns:
            self.gradients_through_shared(step, q, do, facts)
            self.release_block(step)
            self.dq_product(step)
        else:
            self.gradients_in_registers(step, q, do, facts)

    def head_values(self, head) -> dict:
        """The variant's "head" operands' values of query head `head` (`Variant.head_values`; packed: of the
        sequence's head, counted over batch x heads)."""
        at = head if self.first_head is None else self.first_head + head
        return self.variant.head_values(self.k, at, self.extras)

    def gradients_in_registers(self, step, q, do, facts: dict) -> None:
        """P^T, then dV += P^T dO issued under dS^T; where every consumer adds a share of dQ (and not deterministic),
        dS^T's band stored under dV's batch, dQ's batch, dK += dS^T Q's, and dQ's sums stored under it
        (FlashAttention-3's order); else dK's, then dS^T's band and dQ. (P^T and dS^T packed as soon as made: dK's
        and dV's accumulators hold 128 of a thread's 240 registers at d 128.)"""
        k, config, elements = self.k, self.config, self.config.rows * self.d
        self.probabilities(step, facts)
        self.p = k.accumulators_as_a(self.s_acc, self.d_atom, into=self.p)
        k.wgmma(self.d_atom, self.p, self.operand(do, "q_mn", elements), self.dv_acc)
        k.wgmma_wait(1, [self.dp_acc])  # (dP^T's batch; dV's in flight)
        self.score_gradients(step, facts)
        self.ds = k.accumulators_as_a(self.dp_acc, self.d_atom, into=self.ds)
        overlapped = config.adders == config.consumers and not config.deterministic
        if overlapped:
            self.score_bands([self.dp_acc], [config.ds_offset])
            self.dq_batch()
        k.wgmma(self.d_atom, self.ds, self.operand(q, "q_mn", elements), self.dk_acc)
        if overlapped:
            k.wgmma_wait(1, [self.dq_acc])  # (dV's and dQ's batches; dK's in flight)
            self.add_dq(step)
        if config.deterministic:  # (the stage released before dQ's turn: held across its wait, 288-392 bytes
            self.release_block(step)  # spilled at d 128, not 124-156)
        if not overlapped:
            self.score_bands([self.dp_acc], [config.ds_offset])
            self.dq_product(step)
        if not config.deterministic:
            self.release_block(step)

    def release_block(self, step) -> None:
        """The block's Q/dO stage released once dV's and dK's batches are done (its Q, dO, LSE and D read)."""
        self.k.wgmma_wait(0, [self.dv_acc, self.dk_acc])
        self.pipeline.release(step)

    def gradients_through_shared(self, step, q, do, facts: dict) -> None:
        """The consumers splitting d's columns: P^T's and dS^T's bands of this consumer's rows into their tiles;
        both consumers' in, dV += P^T dO and dK += dS^T Q over its columns, all operands from shared memory."""
        k, config = self.k, self.config
        self.probabilities(step, facts)
        k.wgmma_wait(0, [self.dp_acc])
        self.score_gradients(step, facts)
        self.score_bands([self.s_acc, self.dp_acc], [config.p_offset, config.ds_offset])
        scores = [k.index(config.p_offset), k.index(config.ds_offset)]
        for first, block, accumulators in zip(scores, (do, q), (self.dv_acc, self.dk_acc)):
            columns = self.operand(self.consumer_part(block, "q_mn"), "q_mn")
            k.wgmma(self.d_atom, self.operand(first, "scores_a"), columns, accumulators)

    def cleared(self, *accumulators) -> None:
        """Zeros over accumulators a wgmma writes whole (accumulate=False): `wgmma` passes the registers in all the
        same, else the block before's, live across the loop."""
        zero = self.k.constant(0.0, "f32")
        for accumulator in accumulators:
            for slot in range(accumulator.atom.shape[1] // 2):
                self.k.store(zero, accumulator.registers, [slot])

    def score_bands(self, accumulators: list, firsts: list) -> None:
        """Each of `accumulators` (P^T or dS^T, in S^T's or dP^T's registers) by stmatrix as this consumer's band
        of the [keys, rows] tile at byte `firsts[i]`: packed, written once every consumer's products of the block
        before have read the tiles, then fenced for wgmma and waited for by every consumer (named barriers)."""
        from mlir_tile.builder.stores import AccumulatorBand

        k, config = self.k, self.config
        band = AccumulatorBand(k, self.tiles["ds_band"], config.element)
        packed = []
        for accumulator in accumulators:
            packed.append(band.registers())
            band.pack(packed[-1], accumulator.registers, config.score_rows, lambda slot, x: x)
        self.barriers.meet_all()
        for registers, first in zip(packed, firsts):
            band.write(registers, self.shared, self.consumer_part(k.index(first), "ds_band"))
        k.async_proxy_fence()
        self.barriers.meet_all()

    def dq_product(self, step) -> None:
        """This consumer's share of dQ (`dq_batch`) added into dQaccum, where it adds one (`adders`)."""
        k = self.k
        with k.if_(k.compare("ult", self.consumer, self.config.adders)):
            self.dq_batch()
            k.wgmma_wait(0, [self.dq_acc])
            self.add_dq(step)

    def dq_batch(self) -> None:
        """This consumer's dQ = dS K over its columns and the CTA's keys issued (dS^T's tile written)."""
        k, config = self.k, self.config
        ds_tile = self.operand(k.index(config.ds_offset), "ds_a", config.keys * config.rows)
        k_part = self.operand(self.consumer * self.steps["k_dq"], "k_dq", config.keys * config.dq_columns)
        self.cleared(self.dq_acc)
        k.wgmma(self.dq_atom, ds_tile, k_part, self.dq_acc, accumulate=False)

    def add_dq(self, step) -> None:
        """This consumer's dQ sums into its part of the fp32 tile (once its previous reductions have read it),
        then added into dQaccum's rows of the query block by TMA reductions. Deterministic: the key blocks in a
        fixed order (`turn`), a flag a (query head, block of rows, adder) counting the turns: the first thread
        waits for the flag to reach its turn, adds, waits for the additions to be written and counts its turn
        (FlashAttention-3's semaphores; the CTAs whose turns come first are launched first)."""
        from mlir import ir
        from mlir.dialects import vector

        k, config = self.k, self.config
        thread = self.consumer_thread()
        first = k.index(config.dq_offset) + self.consumer * (config.rows * config.dq_columns * 4)
        with k.if_(k.compare("eq", thread, 0)):
            k.tma_store_wait(0)
        self.barriers.meet_own(self.consumer)
        part = self.operand(first, "dq", config.rows * config.dq_columns, "f32")
        pairs = ir.VectorType.get([2], ir.F32Type.get())
        columns, halves = column_steps(self.dq_atom), row_halves(self.dq_atom)
        if any(columns[s + 1] != columns[s] + 1 or halves[s + 1] != halves[s] for s in range(0, len(columns), 2)):
            raise ValueError(f"attention backward: {self.dq_atom.name}'s slots 2i and 2i + 1 are not one row's two "
                             f"columns side by side")
        for slot in range(0, config.dq_columns // 2, 2):  # (the store's 8 bytes proven aligned on the tile)
            row, column = self.dq_acc.coordinate(slot)
            pair = vector.from_elements(pairs, [k.load(self.dq_acc.registers, [slot + i]) for i in range(2)])
            k.store_vector(pair, part.memory, [part.offset((row, column))])
        k.async_proxy_fence()
        self.barriers.meet_own(self.consumer)
        head, q0 = self.block_of(step)
        row = head * self.padded + (self.padded_start + q0 if self.config.varlen else q0)
        with k.if_(k.compare("eq", thread, 0)):
            if config.deterministic:
                flag = (row // config.rows) * config.adders + self.consumer
                k.wait_flag(self.flags, flag, k.as_i32(self.turn(q0)))
            for column, box in k.boxes(self.shared, first, self.tiles["dq"], "f32", FLOAT_BOX_COLUMNS):
                k.tma_reduce_add(box, self.dq_map, (row, self.consumer * config.dq_columns + column))
            if config.deterministic:
                k.tma_store_wait(0, complete=True)
                k.release_flag(self.flags, flag)

    def turn(self, q0):
        """This CTA's place in the order of the key blocks that add into the query block at `q0` (the first 0): the
        blocks that reach a query block are blocks 0 to n_max, so not causal the key blocks' order, causal from
        n_max down (the last key blocks, whose walks are the shortest, launched first: the first key block's long
        walk then adds last and waits least)."""
        keys = self.config.keys
        n = self.n0 // keys
        if self.variant is not None and self.variant.keys is not None:
            return n - self.first_adder(q0)
        if not self.config.causal:
            return n
        last_key = q0 + (self.config.rows - 1) + (0 if self.shift is None else self.shift)  # (>= n0: n reaches q0)
        return self.k.minimum(last_key // keys, (self.k.as_index(self.keys_end) - 1) // keys) - n

    def first_adder(self, q0):
        """A variant's keys: the first key block that adds into the query block at `q0`, the block of the first key
        its first row sees. (Key block n walks query blocks [lowest_n / rows, ceil(beyond_n / rows)), both bounds
        non-decreasing in n (`blocks_seeing`); so the blocks reaching query block m are those from the first whose
        beyond passes m x rows, i.e. whose end passes row m x rows's first key, up to the last whose lowest is in
        m: consecutive, each CTA's turn its distance from the first. Packed rows the host did not check: every
        block walks every query block, the first block 0.)"""
        from mlir_tile.builder.integers import with_operators

        k, keys = self.k, self.config.keys
        if not self.config.varlen:
            return with_operators(self.variant.key_interval(k, q0, self.seq, self.extras)[0]) // keys
        sequence = self.sequence
        first = with_operators(self.variant.key_interval(k, sequence.position(q0), sequence.k_length,
                                                         self.extras)[0]) // keys
        return k.select(self.searched, first, k.index(0))

    def epilogue(self) -> None:
        """dK (times the softmax scale) and dV by stmatrix over this consumer's band of the K and V tiles (once
        every consumer's dQ products have read K), then stored by TMA through the 3-D maps."""
        from mlir.dialects import arith

        from mlir_tile.builder.stores import AccumulatorBand

        k, config = self.k, self.config
        softmax_scale = k.constant(1 / math.sqrt(self.d), "f32")
        if config.varlen:
            self.store_gradient_rows(softmax_scale)
            return
        self.barriers.meet_all()
        band = AccumulatorBand(k, self.tiles["out_band"], config.element)
        firsts = []
        for part, (accumulators, scaled) in enumerate(((self.dk_acc, True), (self.dv_acc, False))):
            packed = band.registers()
            band.pack(packed, accumulators.registers, config.kv_columns,
                      (lambda slot, x: arith.mulf(x, softmax_scale)) if scaled else (lambda slot, x: x))
            firsts.append(self.consumer_part(self.kv_ring.offset(k.index(0), part), "out_band"))
            band.write(packed, self.shared, firsts[-1])
        k.async_proxy_fence()
        self.barriers.meet_own(self.consumer)
        # (the band's first key and column: consumer c's 64 keys, or its kv_columns)
        row, first_column = (self.n0, self.consumer * config.kv_columns) if config.split_columns else (
            self.n0 + self.consumer * 64, None)
        with k.if_(k.compare("eq", self.consumer_thread(), 0)):
            for first, tensor_map in zip(firsts, (self.dk_map, self.dv_map)):
                for column, box in k.boxes(self.shared, first, self.tiles["out"], config.element, BOX_COLUMNS):
                    column = k.index(column) if first_column is None else first_column + column
                    k.tma_store(box, tensor_map, (self.kv_head, row, column))
            k.tma_store_wait(0)

    def store_gradient_rows(self, softmax_scale) -> None:
        """Packed sequences: dK (times the softmax scale) and dV, the rows of keys inside the sequence, stored from
        the registers into [total_k, kv_heads x d] (`sm90_varlen.store_rows`: a box would reach the next
        sequence's keys)."""
        from mlir.dialects import arith

        from mlir_tile.kernels.flash.sm90_varlen import store_rows

        k, d, sequence = self.k, self.d, self.sequence
        words = k.as_index(self.k_heads) * (d // 2)  # (a token's row in 4-byte words)
        split = self.config.split_columns  # (the consumer's keys, or its kv_columns: words further)

        def first_word(row):
            key = self.n0 + row if split else self.n0 + self.consumer * 64 + row
            inside = k.compare("ult", key, sequence.k_length)
            word = (sequence.k_start + key) * words + self.kv_head * (d // 2)
            return inside, word + self.consumer * (self.config.kv_columns // 2) if split else word
        store_rows(k, self.dk_acc, self.dk_map, self.config.element, first_word,
                   lambda half, x: arith.mulf(x, softmax_scale))
        store_rows(k, self.dv_acc, self.dv_map, self.config.element, first_word, lambda half, x: x)

    def consumer_thread(self):
        return self.k.thread_id() % 128
