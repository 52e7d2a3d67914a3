"""FlashAttention-2's forward pass, written with the builder alone: O = softmax(Q K^T * scale (+ causal mask)) V
and the log-sum-exp of each row, fp16 or bf16, head dims 64 and 128, any sequence length.

By default a CTA of 4 warps takes BR query rows of one (batch, head) (BR = 128 for head dim 64, 64 for 128: each
warp BR / 4 rows; `Config` takes other warp counts, rows per warp, key tiles, Q read from shared memory per key
tile, the order of the softmax's steps, O rescaled only where a row's max grew, and each stage's mbarriers in
place of the block's barrier; `Attention` takes TUNED's) and walks the keys in tiles of 64, K and V
double-buffered through cp.async with zero-fill past the sequence, one barrier a tile. Per key tile: S = Q K^T
from Q's fragments (loaded once, ldmatrix.x4) and K's (ldmatrix.x4 from the row-major [keys, d] tile, the N x K
operand), one d16 block at a time; the mask (keys past the sequence, and above the diagonal when causal) and the
online softmax in the log2 domain (row max and sum over the four lanes of a row by xor shuffles, exp2 as
ex2.approx.ftz); P, the accumulators of S packed to 16-bit pairs, is the A operand of P V in registers
(`fragments.c_as_a_operand`); V's fragments by ldmatrix.x4.trans from its [keys, d] tile. With the mask, a
warp skips a key tile that starts past its last row (a branch on its index around the tile's work, with each
warp's own scope "warp" transfers: `OperandTransfer.one_warp`). The epilogue divides
by the row sums, stores O through stmatrix into the swizzled Q tile and 16-byte rows, and the log-sum-exp
(natural log) per row.

Kernel parameters: `attention(q, k, v, o, lse, seq)`: q, k, v, o [batch * heads, seq, d] row-major (16-byte
aligned), lse [batch * heads, seq] f32, and seq (64-bit). Grid ceil(seq / BR) * batch * heads, block 32 * warps,
`Config.shared_bytes` of dynamic shared memory.
"""
from __future__ import annotations

import functools
import math

from mlir_tile.isa.targets import DEFAULT_CHIP, has_instruction
from mlir_tile.kernels.common import HALF, LOG2E
from mlir_tile.kernels.flash.sm80_tiles import Config


KERNEL = "attention"


def tiled(config: Config):
    """S = Q K^T over the 4 x 1 warp grid (K as the N x K operand) and O = P V (V as K x N, with .trans), from
    the tiles' layouts (words, swizzled by `synthesize`)."""
    from mlir_tile.tiling.synthesize import Tile, synthesize
    from mlir_tile.tiling.tiled import tiled_mma_m16n8k16

    def tile(rows, columns):
        shape = Tile(rows, columns)
        return synthesize(shape).layout(shape)

    q, kv, p = tile(config.rows, config.head_dim), tile(config.keys, config.head_dim), tile(config.rows, config.keys)
    scores = tiled_mma_m16n8k16((config.warps, 1), (config.rows, config.keys, config.head_dim), q, kv, p, "nk")
    output = tiled_mma_m16n8k16((config.warps, 1), (config.rows, config.head_dim, config.keys), p, kv, q, "kn")
    return scores, output


def build_module(config: Config = Config(), context=None, chip: str = DEFAULT_CHIP):
    """The kernel of `config` (see the module's docstring) for `chip`: O through stmatrix where the chip has it
    (sm_90), else (sm_80) each thread's accumulator pairs stored straight to O."""
    from mlir_tile.builder import Global, Kernel

    if config.head_dim not in (64, 128) or config.element not in ("f16", "bf16"):
        raise ValueError(f"attention: head dims 64 and 128, f16 and bf16; got {config.head_dim}, {config.element}")
    with Kernel(KERNEL, [Global(config.element)] * 4 + [Global("f32"), "index"], block=(config.threads, 1, 1),
                fast_math=True, context=context, chip=chip) as k:
        _Attention(k, config).build()
    return k.module


class _Attention:
    """The attention kernel `build_module` builds into `k`: Q, K, V, O and the log-sum-exp as one head's
    tensors, the CTA's query tile and key tiles, the stages and constants (made here, in the order the kernel's
    IR has them); `build` emits the prologue (Q's and the first K/V tile's copies, the register storage), the
    main loop over key tiles and the epilogue. Every address, row and key comes from the tensors and the
    tiled mmas' accumulator layouts."""

    def __init__(self, k, config: Config):
        from mlir_tile import contract
        from mlir_tile.builder.schedule import KeyTiles, QueryTiles, StageRing
        from mlir_tile.builder.tensor import local_tile
        from mlir_tile.tiling.fragments import c_as_a_operand
        from mlir_tile.algebra.words import unpack_b32

        self.k, self.config = k, config
        self.scores, self.output = tiled(config)
        scores = self.scores
        self.d, self.rows, self.element = config.head_dim, config.rows, config.element
        self.q_halves, self.kv_halves = unpack_b32(scores.a.tile), unpack_b32(scores.b.tile)
        self.m_blocks, self.key_blocks, self.d_blocks = scores.m_blocks, config.keys // 8, config.head_dim // 8
        q, keys, values, o, lse, self.seq = k.arguments
        order = QueryTiles(k, self.seq, self.rows, reverse=config.causal)
        head, query_tile = order.of_block(k.block_id())
        q_tile, kv_tile = (self.rows, self.d), (config.keys, self.d)
        self.g_q, self.g_o, self.g_k, self.g_v = (  # the head's rows of Q and O at the query tile, K and V by key tile
            local_tile(k.tensor(memory, (order.heads, self.seq, self.d))[head, None, None], tile, at)
            for memory, tile, at in ((q, q_tile, (query_tile, 0)), (o, q_tile, (query_tile, 0)),
                                     (keys, kv_tile, (None, 0)), (values, kv_tile, (None, 0))))
        self.m_lse = k.tensor(lse, (order.heads, self.seq))[head, None]
        self.head_of_o = (o, order.heads, head)  # (the head's O by row, made where the epilogue stores pairs)
        self.c_q = local_tile(k.identity_tensor((self.seq, self.d)), q_tile, (query_tile, 0))
        self.c_kv = local_tile(k.identity_tensor((self.seq, self.d)), kv_tile, (None, 0))
        # (query, key) of S by key tile
        self.c_scores = local_tile(k.identity_tensor((self.seq, self.seq)), (self.rows, config.keys), (query_tile, None))
        self.q0 = self.c_q[0, 0][0]
        self.key_tiles = KeyTiles(k, self.seq, config.keys, self.q0, rows=self.rows, causal=config.causal)
        self.shared = k.dynamic_shared(alignment=max(contract.aligned_for(t) for t in (scores.a.tile, scores.b.tile)))
        q_bytes, kv_bytes = config.tile_bytes
        # K's two stages after Q's tile, then V's
        self.rings = [StageRing(k, self.shared, 2, [(self.element, kv_bytes // HALF)], start=q_bytes + which * 2 * kv_bytes)
                      for which in range(2)]
        self.ring = self.rings[0]  # (the stage and phase of a key tile, which V's ring shares)
        self.warp = k.warp_id()
        self.negative_infinity = k.constant(float("-inf"), "f32")
        self.scale_value = k.constant(LOG2E / math.sqrt(self.d), "f32")
        self.zero = k.constant(0.0, "f32")
        # P's A register r holds the packed accumulators (low, low + 1) of n-block n_offset
        self.p_register = {(n_offset, low): register for register, (n_offset, low, _) in enumerate(c_as_a_operand())}
        # with the mask, a key tile may start past some warp's last row (a whole tile past its first row)
        self.warps_may_skip = config.causal and config.rows >= 16 * self.m_blocks + config.keys

    def build(self) -> None:
        self.start()
        self.main_loop()
        self.epilogue()

    # ----- copies and stages -----
    def load(self, tile_index, which):  # the copies of K (which 0) or V (1) of a key tile into its stage
        (view,) = self.rings[which].views(self.ring.stage(tile_index))
        valid = self.c_kv[None, None, tile_index].residue([0])
        return self.k.copy((self.g_k, self.g_v)[which][None, None, tile_index], self.k.tensor(view, self.kv_halves),
                           valid=valid)

    def start(self) -> None:
        """Q's and the first K/V tile's copies (and the stages' mbarriers), the register storage, O and the row
        statistics cleared, Q's fragments where they stay in registers."""
        from mlir_tile.builder import transfer

        k, config, scores, output, m_blocks = self.k, self.config, self.scores, self.output, self.m_blocks
        if config.stage_barriers:  # per stage: its copies landed (full), and every warp has read it (empty)
            self.full, self.empty = k.mbarriers("full", 2, config.threads), k.mbarriers("empty", 2, config.warps)
        q_tile = k.tensor(k.view(self.shared, (self.rows * self.d,), self.element), self.q_halves)
        q_tokens = k.copy(self.g_q, q_tile, valid=self.c_q.residue([0]))
        self.first_group = k.commit_group(q_tokens + self.load(0, 0) + self.load(0, 1))
        if config.stage_barriers:  # tile 0 is full phase 0 of stage 0; both stages start empty (phase 0)
            k.arrive_on_copies(self.full, 0)
            k.arrive(self.empty, 0, per_warp=True)
            k.arrive(self.empty, 1, per_warp=True)
        self.q_regs = k.registers(scores.a.whole.slots if config.q_in_registers
                                  else scores.a.whole.slots // scores.a.k_blocks)
        self.k_regs = k.registers(scores.b.whole.slots // scores.b.k_blocks)
        self.v_regs = k.registers(output.b.whole.slots // output.b.k_blocks)
        self.p_regs = k.registers(output.a.whole.slots)
        self.s_acc = k.registers(4 * m_blocks * self.key_blocks, "f32")
        self.o_acc = k.registers(4 * m_blocks * self.d_blocks, "f32")
        self.row_max, self.row_sum = k.registers(2 * m_blocks, "f32"), k.registers(2 * m_blocks, "f32")
        for slot in range(4 * m_blocks * self.d_blocks):
            k.store(self.zero, self.o_acc, [slot])
        for slot in range(2 * m_blocks):
            k.store(self.negative_infinity, self.row_max, [slot])
            k.store(self.zero, self.row_sum, [slot])
        k.wait_groups(self.first_group, 0)
        k.barrier()
        if config.q_in_registers:
            t = scores.a.whole
            transfer(t.opcode, self.q_regs, k.view(self.shared, (scores.a.tile.cosize,), "i32"),
                     dst_layout=t.registers, src_layout=t.shared, scope="cta")

    # ----- one key tile -----
    def load_block(self, operand, registers, tile_bytes, block, own_warp) -> None:
        """One k16 block's fragments of a Q, K or V tile (at tile_bytes): the CTA's transfer, or (own_warp) the
        warp's own, for a warp that may skip the tile (on a view where its part starts: whole rows, whole
        swizzle periods, so the swizzle keeps its place; K's and V's start where the tile does)."""
        from mlir_tile.builder import transfer

        k = self.k
        t, scope, words, start = operand.k_block(block), "cta", operand.tile.cosize, None
        if own_warp:
            t, starts = t.one_warp()
            scope, words = "warp", words - max(starts.offset(w) for w in range(starts.size))
            if words < operand.tile.cosize:
                start = k.offset(starts, [self.warp])
        view = k.view(self.shared, (words,), "i32", tile_bytes, element_offset=start)
        if t.shared_offset:
            view = k.subview(view, t.shared_offset, words - t.shared_offset)
        transfer(t.opcode, registers, view, dst_layout=t.registers, src_layout=t.shared, scope=scope)

    def products(self, tiled_mma, a_regs, b_regs, tile_index, which, accumulators, own_warp) -> None:
        """accumulators += A B, B (K, which 0, or V, 1) loaded one k16 block at a time into b_regs; so is A
        where it is Q and Q stays in shared memory. own_warp: each warp's own transfers."""
        k = self.k
        a_from_shared = tiled_mma is self.scores and not self.config.q_in_registers
        for block in range(tiled_mma.b.k_blocks):
            if a_from_shared:
                self.load_block(tiled_mma.a, a_regs, k.index(0), block, own_warp)
            self.load_block(tiled_mma.b, b_regs, self.rings[which].offset(self.ring.stage(tile_index)), block, own_warp)
            for mi in range(self.m_blocks):
                for ni in range(tiled_mma.n_blocks):
                    k.mma(tiled_mma.atom, a_regs, tiled_mma.a_slots(mi, 0 if a_from_shared else block), b_regs,
                                   tiled_mma.b_slots(ni, 0), accumulators, tiled_mma.accumulator_block(mi, ni), self.element)

    def row_reduce(self, values, combine):  # a row's max or sum: a tree of pairs (tree_reductions), else a chain
        if not self.config.tree_reductions:
            return functools.reduce(combine, values)
        while len(values) > 1:
            values = [combine(*values[i:i + 2]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
        return values[0]

    def scores_of(self, tile_index, own_warp) -> None:  # S = Q K^T of one key tile
        for slot in range(4 * self.m_blocks * self.key_blocks):
            self.k.store(self.zero, self.s_acc, [slot])
        self.products(self.scores, self.q_regs, self.k_regs, tile_index, 0, self.s_acc, own_warp)

    def softmax(self, tile_index, masked: bool):
        """S's online softmax: the row maxima and sums move on, P (S's accumulators, exp2'd and packed) is the
        A operand of P V. `masked`: some keys may be past the sequence or above the diagonal (the last tile,
        the causal diagonal's), so each is compared. Returns what `rescale` applies to O."""
        from mlir.dialects import arith

        # (query, key) of each of S's accumulators: the tile's coordinates as the scores' mma partitions them
        place = self.c_scores[None, None, tile_index].partition(self.scores.accumulator_coordinates())
        corrections, grown = [], None
        rows_of_thread = [(mi, half) for mi in range(self.m_blocks) for half in range(2)]  # rows g, g + 8 of each m16
        if self.config.maxima_first:
            maxima = [self._row_maximum(place, masked, *row) for row in rows_of_thread]
        for number, row in enumerate(rows_of_thread):
            maximum = maxima[number] if self.config.maxima_first else self._row_maximum(place, masked, *row)
            larger = self._probabilities(*row, *maximum, corrections)
            grown = larger if grown is None else arith.ori(grown, larger)
        return corrections, grown

    def _row_maximum(self, place, masked, mi, half):
        """The row's scores (masked: keys past the sequence and, causal, above the diagonal at -inf) and its
        old and new max."""
        from mlir.dialects import arith

        k, config = self.k, self.config
        scores_of_row = []
        for ni in range(self.key_blocks):
            for column in range(2):
                slot = self.scores.accumulator_block(mi, ni)[2 * half + column]
                score = k.load(self.s_acc, [slot])
                if masked:
                    valid = place.inside((k.thread_id(), slot), dimensions=[1])
                    if config.causal:
                        query, key = place[k.thread_id(), slot]
                        valid = valid & k.compare("ule", key, query)
                    score = arith.select(valid, score, self.negative_infinity)
                scores_of_row.append(score)
        peak = self.row_reduce(scores_of_row, arith.maximumf)
        # the running max is kept scaled (log2 domain); each probability is exp2 of one fma (FA2's
        # scale_apply_exp2): the first tile has a valid key in every row, so it is finite
        old_max = k.load(self.row_max, [2 * mi + half])
        return scores_of_row, old_max, arith.maximumf(old_max, arith.mulf(k.warp_reduce(peak, "max", lanes=4),
                                                                           self.scale_value))

    def _probabilities(self, mi, half, scores_of_row, old_max, new_max, corrections):
        """P's words of the row; the sum moves on. Returns whether the row's max grew (an i1)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, state = self.k, 2 * mi + half
        correction = k.exp2(arith.subf(old_max, new_max))
        negative_max = arith.negf(new_max)
        probabilities_of_row = []
        for ni in range(self.key_blocks):  # P's word of the row's keys 8 ni + 2 quad + (0, 1), packed at once
            pair = [k.exp2(math_dialect.fma(score, self.scale_value, negative_max))
                    for score in scores_of_row[2 * ni:2 * ni + 2]]
            word = self.output.a_slots(mi, ni // 2)[self.p_register[ni % 2, 2 * half]]
            k.store(k.pack_f16(*pair, self.element), self.p_regs, [word])
            probabilities_of_row.extend(pair)
        total = self.row_reduce(probabilities_of_row, arith.addf)
        k.store(new_max, self.row_max, [state])
        k.store(arith.addf(arith.mulf(k.load(self.row_sum, [state]), correction), total), self.row_sum, [state])
        corrections.append((mi, half, correction))
        return arith.cmpf(arith.CmpFPredicate.OGT, new_max, old_max)

    def rescale(self, corrections, grown) -> None:  # O's rows by exp2(old max - new max); lazily: where a max grew
        from mlir.dialects import arith

        k = self.k

        def multiply():
            for mi, half, correction in corrections:
                for ni in range(self.d_blocks):
                    for column in range(2):
                        slot = self.output.accumulator_block(mi, ni)[2 * half + column]
                        k.store(arith.mulf(k.load(self.o_acc, [slot]), correction), self.o_acc, [slot])
        if self.config.lazy_rescale:
            with k.if_(k.any_lane(grown)):
                multiply()
        else:
            multiply()

    def tile_work(self, tile_index, masked: bool, own_warp: bool) -> None:  # S, its softmax and O += P V
        self.scores_of(tile_index, own_warp)
        self.rescale(*self.softmax(tile_index, masked))
        self.products(self.output, self.p_regs, self.v_regs, tile_index, 1, self.o_acc, own_warp)

    def key_tile(self, tile_index, masked: bool) -> None:
        """One turn of the main loop: the next tile's copies issued (past the last tile: zero-filled, never
        read), this tile's S, softmax and P V, then the wait and the one barrier after which the copies are
        visible and every warp is done with the stage the next turn's copies overwrite. With stage barriers:
        the wait for the stage's `empty` phase before the copies, for the tile's `full` phase after them, and
        this warp's arrival on its stage's `empty` at the end."""
        k, config, ring = self.k, self.config, self.ring
        following = ring.later(tile_index, 1)
        if config.stage_barriers:  # tile u fills stage u % 2 once its phase u // 2 of `empty` is complete
            k.wait_phase(self.empty, ring.stage(following), ring.phase(following))
        k.commit_group(self.load(following, 0) + self.load(following, 1))
        if config.stage_barriers:
            k.arrive_on_copies(self.full, ring.stage(following))
            k.wait_phase(self.full, ring.stage(tile_index), ring.phase(tile_index))
        if masked and self.warps_may_skip:  # a tile wholly above the diagonal for the warp's rows changes nothing
            with k.if_(self.key_tiles.reaches(tile_index, self.warp, 16 * self.m_blocks)):
                self.tile_work(tile_index, masked, own_warp=True)
        else:
            self.tile_work(tile_index, masked, own_warp=False)
        if config.stage_barriers:
            k.arrive(self.empty, ring.stage(tile_index), per_warp=True)
        else:
            k.wait_groups(self.first_group, 0)
            k.barrier()

    def main_loop(self) -> None:
        """Tiles whose every key is valid for every row of the CTA go without the mask; the rest with it."""
        k, config = self.k, self.config
        with k.loop(0, self.key_tiles.unmasked) as tile_index:
            self.key_tile(tile_index, masked=False)
        with k.loop(self.key_tiles.unmasked, self.key_tiles.count) as tile_index:
            self.key_tile(tile_index, masked=True)
        if config.stage_barriers:  # the last tile's copies (never read) landed; every warp is done with Q's tile
            k.wait_groups(self.first_group, 0)
            k.barrier()

    # ----- the epilogue -----
    def epilogue(self) -> None:
        """O divided by the row sums, packed, through the Q tile by stmatrix and out in 16-byte rows; each
        row's log-sum-exp (natural log)."""
        from mlir.dialects import arith

        from mlir_tile.builder import transfer

        k, output, d = self.k, self.output, self.d
        o_regs = k.registers(output.c.whole.slots)
        log2_of_e_inverse = k.constant(1 / LOG2E, "f32")
        place = self.c_q.partition(output.accumulator_coordinates())  # (row, column) of each of O's accumulators
        stmatrix = has_instruction(k.chip, "stmatrix")
        if not stmatrix:
            o, heads, head = self.head_of_o
            m_o = k.tensor(o, (heads, self.seq, d))[head, None, None]
        for mi in range(self.m_blocks):
            sums = [self._row_total(place, mi, half, log2_of_e_inverse) for half in range(2)]
            for ni in range(self.d_blocks):
                slots = self.output.accumulator_block(mi, ni)
                accumulators = [k.load(self.o_acc, [slot]) for slot in slots]
                for pair, slot in enumerate(output.c_slots(mi, ni)):
                    low, high = (arith.mulf(accumulators[2 * pair + i], sums[pair]) for i in range(2))
                    if stmatrix:
                        k.store(k.pack_f16(low, high, self.element), o_regs, [slot])
                    else:
                        self._store_pair(low, high, place, (k.thread_id(), slots[2 * pair]), m_o)
        if not stmatrix:
            return
        t = output.c.whole
        transfer(t.opcode, k.view(self.shared, (output.c.tile.cosize,), "i32"), o_regs, dst_layout=t.shared,
                 src_layout=t.registers, scope="cta")
        k.barrier()
        tile = k.view(self.shared, (self.rows * d,), self.element)
        chunks = k.tile_chunks(tile, self.q_halves, self.rows, d)  # 16-byte chunks of the O tile
        for (view, index), before in zip(k.chunk_addresses(tile, chunks), chunks.rows_before):
            at = ((chunks.row, before), chunks.col)
            with k.if_(self.c_q.inside(at, dimensions=[0])):
                k.store_vector(k.load_vector(view, [index], 8), self.g_o.memory, [self.g_o.offset(at)])

    def _store_pair(self, low, high, place, first, m_o) -> None:
        """Without stmatrix (sm_80): an accumulator pair (one row, two adjacent columns: 4 bytes, d even; `first`
        the (thread, slot) of its first, `place` its head's (row, column)) rounded and stored straight to the
        head's O (`m_o`) where its row lies inside the sequence."""
        from mlir import ir
        from mlir.dialects import arith, vector

        k, element = self.k, ir.Type.parse(self.element)
        pair = vector.from_elements(ir.VectorType.get([2], element), [arith.truncf(element, v) for v in (low, high)])
        with k.if_(place.inside(first, dimensions=[0])):
            k.store_vector(pair, m_o.memory, [m_o.offset(place[first])])

    def _row_total(self, place, mi, half, log2_of_e_inverse):
        """1 / the row's sum (over its quad), its log-sum-exp stored on the way."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, state = self.k, 2 * mi + half
        total = k.warp_reduce(k.load(self.row_sum, [state]), "add", lanes=4)
        inverse = k.divide(k.constant(1.0, "f32"), total)
        first = (k.thread_id(), self.output.accumulator_block(mi, 0)[2 * half])
        log_sum = arith.mulf(arith.addf(k.load(self.row_max, [state]), math_dialect.log2(total)), log2_of_e_inverse)
        with k.if_(k.leads_lanes(4) & place.inside(first, dimensions=[0])):  # the row's quad: one store
            self.m_lse[place[first][0]] = log_sum
        return inverse
