"""FlashAttention-2's forward pass, written with the builder alone: O = softmax(Q K^T * scale (+ causal mask)) V
and the log-sum-exp of each row, fp16 or bf16, head dims 64 and 128, any sequence length.

    python -m mlir_tile.kernels.attention --demo            # the main loop's transfers and mma in the PTX; a GPU run if any
    python -m mlir_tile.kernels.attention --ptx-out a.ptx   # needs MLIR
    python -m mlir_tile.kernels.attention --run-ptx a.ptx   # needs a GPU, no MLIR: one case against numpy
    python -m mlir_tile.kernels.attention --emulate         # a CTA on the reference model against numpy, no GPU

Options choose the kernel: --dtype f16|bf16, --head-dim 64|128, --causal, --tuned (the CTA `Attention` runs);
and the case the GPU run checks: --batch, --heads, --seq. --ptx-out records the kernel's options in the PTX's
first line and --run-ptx runs the PTX as built (`--ptx-out a.ptx --head-dim 128 --causal --tuned`, then on the
GPU host `--run-ptx a.ptx --batch 2 --heads 16 --seq 4097`).

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
import sys
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

KERNEL = "attention"
HALF = 2
LOG2E = 1.4426950408889634


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


def build_module(config: Config = Config(), context=None):
    """The kernel of `config` (see the module's docstring)."""
    from mlir_tile.builder import Global, Kernel

    if config.head_dim not in (64, 128) or config.element not in ("f16", "bf16"):
        raise ValueError(f"attention: head dims 64 and 128, f16 and bf16; got {config.head_dim}, {config.element}")
    with Kernel(KERNEL, [Global(config.element)] * 4 + [Global("f32"), "index"], block=(config.threads, 1, 1),
                fast_math=True, context=context) as k:
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
        self.c_q = local_tile(k.identity_tensor((self.seq, self.d)), q_tile, (query_tile, 0))
        self.c_kv = local_tile(k.identity_tensor((self.seq, self.d)), kv_tile, (None, 0))
        # (query, key) of S by key tile
        self.c_scores = local_tile(k.identity_tensor((self.seq, self.seq)), (self.rows, config.keys), (query_tile, None))
        self.q0 = self.c_q[0, 0][0]
        self.key_tiles = KeyTiles(k, self.seq, config.keys, self.q0, self.rows, config.causal)
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
                        valid = arith.andi(valid, k.compare("ule", key, query))
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
        for mi in range(self.m_blocks):
            sums = [self._row_total(place, mi, half, log2_of_e_inverse) for half in range(2)]
            for ni in range(self.d_blocks):
                accumulators = [k.load(self.o_acc, [slot]) for slot in self.output.accumulator_block(mi, ni)]
                for pair, slot in enumerate(output.c_slots(mi, ni)):
                    low, high = (arith.mulf(accumulators[2 * pair + i], sums[pair]) for i in range(2))
                    k.store(k.pack_f16(low, high, self.element), o_regs, [slot])
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

    def _row_total(self, place, mi, half, log2_of_e_inverse):
        """1 / the row's sum (over its quad), its log-sum-exp stored on the way."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, state = self.k, 2 * mi + half
        total = k.warp_reduce(k.load(self.row_sum, [state]), "add", lanes=4)
        inverse = k.divide(k.constant(1.0, "f32"), total)
        first = (k.thread_id(), self.output.accumulator_block(mi, 0)[2 * half])
        log_sum = arith.mulf(arith.addf(k.load(self.row_max, [state]), math_dialect.log2(total)), log2_of_e_inverse)
        with k.if_(arith.andi(k.leads_lanes(4), place.inside(first, dimensions=[0]))):  # the row's quad: one store
            self.m_lse[place[first][0]] = log_sum
        return inverse


CONFIGS = [Config(d, causal, element) for d in (64, 128) for causal in (False, True) for element in ("f16", "bf16")]
# The CTA `Attention` takes per (head dim, causal) where not the default, as measured on the H200
# (docs/notes/benchmark-history.md): every row's max first and, but at d 128 without the mask, both reductions as trees:
# 1-7% faster; at d 64 the stages' mbarriers in place of the barrier a tile: 1-7% faster (at d 128 0-7%
# slower); at d 128 without the mask, 32 rows a warp (half the K and V bytes read per mma) with 32-key
# tiles and Q read from shared memory, so that the accumulators fit in registers: 4-8% faster, and O's 128
# accumulators a thread rescaled only where some row max of the warp grew: 3-6% faster (the trees there 1-2%
# slower).
TUNED = {(64, False): {"maxima_first": True, "tree_reductions": True, "stage_barriers": True},
         (64, True): {"maxima_first": True, "tree_reductions": True, "stage_barriers": True},
         (128, False): {"row_blocks": 2, "keys": 32, "q_in_registers": False, "lazy_rescale": True, "maxima_first": True},
         (128, True): {"maxima_first": True, "tree_reductions": True}}
# other CTAs the benchmark measures: FA2's (32 rows a warp, 64-key tiles, Q from shared memory), the knobs alone
# and together
SHAPES = [{"row_blocks": 2, "q_in_registers": False}, TUNED[128, False], {"lazy_rescale": True}, {"maxima_first": True},
          {"tree_reductions": True}, TUNED[128, True], {"stage_barriers": True}, TUNED[64, False]]


def shipped_kernels(chip: str):
    """(name, build) of every kernel `Attention` may pick (sm_90 only: O goes out through stmatrix)."""
    if chip != "sm_90":
        return
    for config in CONFIGS:
        picked = Config(config.head_dim, config.causal, config.element, **TUNED.get((config.head_dim, config.causal), {}))
        for kernel in dict.fromkeys((config, picked)):
            yield str(kernel), partial(build_module, kernel)


def measured_kernels():
    """The CTAs the benchmark measures beside the picked ones (SHAPES on every configuration)."""
    return [replace(c, **shape) for c in CONFIGS for shape in SHAPES]


class Attention:
    """O, lse = attention(q, k, v, causal) on torch tensors [batch, heads, seq, d] (contiguous, fp16 or bf16,
    d 64 or 128) through mlir-tile's runtime on torch's current stream. ValueError for what it does not take."""

    def __init__(self, library, shapes: dict | None = None):
        """`library`: where the kernels come from (a `KernelLibrary`); `shapes`: per head dim, the Config fields
        (warps, row_blocks, keys, ...) of the kernels to use; else TUNED's for the (head dim, causal), else the
        default CTA."""
        if library.chip != "sm_90":
            raise ValueError(f"attention: the kernel stores O through stmatrix, which needs sm_90; this GPU runs "
                             f"{library.chip} kernels")
        self.library, self.kernels, self.shapes = library, {}, shapes or {}

    def __call__(self, q, k, v, *, causal: bool = False):
        import torch

        from mlir_tile.runtime import torch_stream

        element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(q.dtype)
        if element is None or k.dtype != q.dtype or v.dtype != q.dtype:
            raise ValueError(f"attention: q, k, v all float16 or all bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}")
        if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
            raise ValueError(f"attention: q, k, v of one shape [batch, heads, seq, d], got {tuple(q.shape)}, "
                             f"{tuple(k.shape)}, {tuple(v.shape)}")
        batch, heads, seq, d = q.shape
        if d not in (64, 128):
            raise ValueError(f"attention: head dim 64 or 128, got {d}")
        if not all(x.is_cuda and x.is_contiguous() for x in (q, k, v)) or seq == 0:
            raise ValueError("attention: contiguous CUDA tensors with seq >= 1")
        key = (d, bool(causal), element)
        if key not in self.kernels:
            config = Config(*key, **self.shapes.get(key[0], TUNED.get(key[:2], {})))
            self.kernels[key] = config, self.library.module(str(config), partial(build_module, config))
        config, module = self.kernels[key]
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, seq, dtype=torch.float32, device=q.device)
        module.launch(KERNEL, [q, k, v, o, lse, seq], grid=config.grid(batch * heads, seq), block=config.threads,
                      shared_bytes=config.shared_bytes, stream=torch_stream(q))
        return o, lse


REFERENCE_ROWS = 512  # query rows of one head the reference scores at once: memory 512 x seq, not seq^2


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(O, log-sum-exp) in fp32 from inputs [heads, seq, d] (any float type)."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    heads, seq, d = q.shape
    out, lse = np.empty((heads, seq, d), np.float32), np.empty((heads, seq), np.float32)
    for head in range(heads):
        for start in range(0, seq, REFERENCE_ROWS):
            rows = slice(start, start + REFERENCE_ROWS)
            scores = q[head, rows] @ k[head].T / math.sqrt(d)
            if causal:
                query = np.arange(start, start + len(scores))[:, None]
                scores = np.where(np.arange(seq)[None, :] <= query, scores, -np.inf)
            peak = scores.max(-1, keepdims=True)
            weights = np.exp(scores - peak)
            total = weights.sum(-1, keepdims=True)
            out[head, rows], lse[head, rows] = (weights / total) @ v[head], (np.log(total) + peak)[:, 0]
    return out, lse


CASE = (3, 200)  # heads, seq: a tail in both the query and the key tiles


def configure(dtype: str = "f16", head_dim: int = 64, causal: bool = False, tuned: bool = False, arch: str = "sm_80",
              config: str = ""):
    """The example's kernel: the default CTA, or (tuned) the one `Attention` runs (TUNED's); arch sm_90a:
    Hopper's (`hopper_attention`), `config` its fields over the head dim's ("consumers=3,keys=64":
    `HopperAttentionConfig.fields_of`)."""
    if arch == "sm_90a":
        from mlir_tile.kernels.hopper_attention import HopperAttentionConfig

        if tuned:
            raise ValueError("attention: --tuned picks the sm_80 kernel's CTA; Hopper's path has its own")
        return HopperAttentionConfig.of(head_dim, causal, dtype, **HopperAttentionConfig.fields_of(config))
    if config:
        raise ValueError("attention: --config sets Hopper's path's fields (--arch sm_90a); the sm_80 kernel's are "
                         "--tuned's")
    return Config(head_dim, causal, dtype, **(TUNED.get((head_dim, causal), {}) if tuned else {}))


def run_and_check(ptx: str, dtype: str = "f16", head_dim: int = 64, causal: bool = False, tuned: bool = False,
                  batch: int = 1, heads: int = CASE[0], seq: int = CASE[1], arch: str = "sm_80", config: str = "",
                  sms: int | None = None) -> tuple[bool, str]:
    """The kernel of these build options (`configure`) in `ptx` on batch x heads x seq x head_dim random
    q, k, v, against numpy: O within 8 units of `dtype`'s roundoff (inputs in [-1, 1), so |O| < 1), the
    log-sum-exp within 1e-3 (Hopper's: `hopper_attention.run_and_check`, `sms` a persistent grid's CTAs)."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode, encode
    from mlir_tile.runtime import Runtime

    config = configure(dtype, head_dim, causal, tuned, arch, config)
    if arch == "sm_90a":
        from mlir_tile.kernels import hopper_attention

        return hopper_attention.run_and_check(ptx, config, batch, heads, seq, sms)
    if min(batch, heads, seq) < 1:
        raise ValueError(f"attention: batch, heads and seq >= 1, got {batch}, {heads}, {seq}")
    rng = np.random.default_rng(1)
    q, k, v = (encode(rng.uniform(-1, 1, (batch * heads, seq, head_dim)), dtype) for _ in range(3))
    with Runtime() as runtime:
        module = runtime.load_ptx(ptx, name=KERNEL)
        _, _, _, o, lse = module.launch(KERNEL, [q, k, v, np.zeros_like(q), np.zeros((batch * heads, seq), np.float32),
                                                 seq], grid=config.grid(batch * heads, seq), block=config.threads,
                                        shared_bytes=config.shared_bytes)
    expected, expected_lse = reference(*(decode(x, dtype) for x in (q, k, v)), causal)
    error = float(np.abs(decode(o, dtype) - expected).max())
    lse_error = float(np.abs(lse - expected_lse).max())
    ok = error <= 8 * UNIT_ROUNDOFF[dtype] and lse_error <= 1e-3
    return ok, (f"GPU: attention {batch} x {heads} x {seq} x {head_dim} {dtype}{' causal' if causal else ''} "
                f"({config}) matches numpy: {ok} (O {error:.1e}, lse {lse_error:.1e})")


def emulate(config: Config = Config(), seq: int = 96, causal: bool = True) -> str:
    """One CTA (one head, seq positions: two key tiles, a tail) on the reference model: Q's, K's and V's
    fragments by the ISA model from their swizzled tiles, each lane's checked against the PTX ISA's tables;
    S from them; the online softmax as the kernel computes it; P's A fragment built from S's accumulators by
    `fragments.c_as_a_operand` and read back through the A table; O through stmatrix, against numpy.
    AssertionError otherwise."""
    from mlir_tile.isa.halves import UNIT_ROUNDOFF, decode, encode

    config = replace(config, causal=causal)
    scores, output = tiled(config)
    rows, d, m_blocks, element = config.rows, config.head_dim, scores.m_blocks, config.element
    rng = np.random.default_rng(5)
    q, k, v = (encode(rng.uniform(-1, 1, (seq, d)), element) for _ in range(3))  # bit patterns
    q_warps = _emulated_q(config, scores, _padded(q[:rows], rows))  # the first CTA's query rows
    peak = np.full((config.warps, 16 * m_blocks), -np.inf, np.float32)
    total = np.zeros_like(peak)
    out = np.zeros((config.warps, 16 * m_blocks, d), np.float32)
    for tile in range(-(-seq // config.keys)):
        keys = slice(tile * config.keys, (tile + 1) * config.keys)
        kv = (_padded(k[keys], config.keys), _padded(v[keys], config.keys))
        for warp, (k_t, v_warp) in enumerate(_emulated_kv(config, scores, output, *kv)):
            s = (decode(q_warps[warp], element) @ decode(k_t, element)) * np.float32(LOG2E / math.sqrt(d))
            query = 16 * m_blocks * warp + np.arange(16 * m_blocks)[:, None]
            key = tile * config.keys + np.arange(config.keys)[None, :]
            s = np.where((key < seq) & ((key <= query) if causal else True), s, -np.inf)
            new_peak = np.maximum(peak[warp], s.max(1))
            correction = np.exp2(peak[warp] - new_peak)
            p = np.exp2(s - new_peak[:, None]).astype(np.float32)
            total[warp] = total[warp] * correction + p.sum(1)
            peak[warp] = new_peak
            p_warp = _p_fragment(config, p, element)
            out[warp] = out[warp] * correction[:, None] + decode(p_warp, element) @ decode(v_warp, element)
    queries = min(seq, rows)
    o = _emulated_o(config, output, encode((out / total[:, :, None]).reshape(rows, d), element), queries)
    expected, _ = reference(*(decode(x, element)[None] for x in (q, k, v)), causal)
    error = float(np.abs(decode(o, element) - expected[0, :queries]).max())
    assert error <= 8 * UNIT_ROUNDOFF[element], f"O differs from numpy by {error}"
    return (f"reference model: one {rows}-row {element} CTA, {seq} positions{' causal' if causal else ''}: every lane's Q, K "
            f"and V fragments hold what the PTX ISA's tables say, P is S's accumulators, and O through stmatrix "
            f"matches numpy (largest error {error:.1e})")


def _padded(matrix, count):  # zero rows past the sequence, as the copies' zero-fill leaves them
    return np.concatenate([matrix, np.zeros((count - len(matrix), matrix.shape[1]), np.uint16)])


def _fragments(config: Config, transfer, words):  # each thread's registers after one transfer, by the ISA model
    from mlir_tile.models.reference import emulate as run_transfer

    return run_transfer(transfer.opcode, transfer.registers, transfer.shared,
                        np.zeros((config.threads, transfer.slots), np.uint32), words, "cta", transfer.shared_offset)


def _emulated_q(config: Config, scores, q_tile):
    """Each warp's query rows, as its A fragments hold them (each element checked against the A table)."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half, b16_tile_words

    m_blocks = scores.m_blocks
    q_regs = _fragments(config, scores.a.whole, b16_tile_words(scores.a.tile, q_tile))
    q_warps = np.zeros((config.warps, 16 * m_blocks, config.head_dim), np.uint16)
    for warp, lane in ((w, l) for w in range(config.warps) for l in range(32)):
        for block, mi, register, part in ((b, m, r, h) for b in range(scores.a.k_blocks) for m in range(m_blocks)
                                          for r in range(4) for h in range(2)):
            row, col = fragment_element("a16", lane, register, part)
            got = b16_half(q_regs[32 * warp + lane, scores.a_slots(mi, block)[register]], part)
            assert got == q_tile[16 * (warp * m_blocks + mi) + row, 16 * block + col], ("Q", warp, lane)
            q_warps[warp, 16 * mi + row, 16 * block + col] = got
    return q_warps


def _emulated_kv(config: Config, scores, output, k_tile, v_tile):
    """Per warp, (K^T, V) of a key tile as the warp's B fragments hold them (K as the N x K operand, V with
    .trans), each element checked against the B table."""
    from mlir_tile.models.reference import b16_tile_words

    k_words, v_words = b16_tile_words(scores.b.tile, k_tile), b16_tile_words(output.b.tile, v_tile)
    k_regs = [_fragments(config, scores.b.k_block(block), k_words) for block in range(scores.b.k_blocks)]
    v_regs = [_fragments(config, output.b.k_block(block), v_words) for block in range(output.b.k_blocks)]
    for warp in range(config.warps):
        yield (_b_matrix(scores, k_regs, warp, lambda kk, nn: k_tile[nn, kk], "K"),
               _b_matrix(output, v_regs, warp, lambda kk, nn: v_tile[kk, nn], "V"))


def _b_matrix(tiled_mma, registers, warp: int, source, name: str):
    """The (k x n) B matrix a warp's fragments hold, block by block; `source(k, n)` the element they must."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.models.reference import b16_half

    n_blocks = tiled_mma.n_blocks
    matrix = np.zeros((16 * len(registers), 8 * n_blocks), np.uint16)
    for block, lane in ((b, l) for b in range(len(registers)) for l in range(32)):
        for ni, register, part in ((n, r, h) for n in range(n_blocks) for r in range(2) for h in range(2)):
            kk, nn = fragment_element("b16", lane, register, part)
            got = b16_half(registers[block][32 * warp + lane, tiled_mma.b_slots(ni, 0)[register]], part)
            assert got == source(16 * block + kk, 8 * ni + nn), (name, warp, lane)
            matrix[16 * block + kk, 8 * ni + nn] = got
    return matrix


def _p_fragment(config: Config, p, element: str):
    """P's A fragment of a warp: each lane packs its own accumulators (the c32 table) by c_as_a_operand's plan,
    read back through the A table."""
    from mlir_tile.tiling.fragments import c_as_a_operand, fragment_element
    from mlir_tile.isa.halves import encode

    m_blocks = p.shape[0] // 16
    p_warp = np.zeros((16 * m_blocks, config.keys), np.uint16)
    for lane in range(32):
        for mi, block in ((m, b) for m in range(m_blocks) for b in range(config.keys // 16)):
            for register, (n_offset, low, high) in enumerate(c_as_a_operand()):
                for part, accumulator in enumerate((low, high)):
                    row, col = fragment_element("c32", lane, accumulator, 0)
                    probability = encode(p[16 * mi + row, 8 * (2 * block + n_offset) + col], element)
                    a_row, a_col = fragment_element("a16", lane, register, part)
                    p_warp[16 * mi + a_row, 16 * block + a_col] = probability
    return p_warp


def _emulated_o(config: Config, output, result, queries: int):
    """O's first `queries` rows as stmatrix of the packed (c16) registers leaves them in the tile."""
    from mlir_tile.tiling.fragments import fragment_element
    from mlir_tile.algebra.words import unpack_b32
    from mlir_tile.models.reference import emulate as run_transfer

    d, m_blocks = config.head_dim, output.m_blocks
    packed = np.zeros((config.threads, output.c.whole.slots), np.uint32)
    for warp, lane in ((w, l) for w in range(config.warps) for l in range(32)):
        for mi, ni in ((m, n) for m in range(m_blocks) for n in range(d // 8)):
            for pair, slot in enumerate(output.c_slots(mi, ni)):
                for part in range(2):
                    row, col = fragment_element("c16", lane, pair, part)
                    bits = result[16 * (warp * m_blocks + mi) + row, 8 * ni + col % 8]
                    packed[32 * warp + lane, slot] |= int(bits) << (16 * part)
    t = output.c.whole
    o_words = run_transfer(t.opcode, t.shared, t.registers, np.zeros(output.c.tile.cosize, np.uint32), packed, "cta")
    layout, halves = unpack_b32(output.c.tile), o_words.view(np.uint16)
    return np.array([[halves[layout(row, col).offset] for col in range(d)] for row in range(queries)], np.uint16)


def add_options(parser) -> tuple[str, ...]:
    from mlir_tile.isa.halves import ELEMENTS

    parser.add_argument("--dtype", choices=(*ELEMENTS, "e4m3"), default="f16",
                        help="q's, k's, v's and O's element type (default f16; e4m3 with --arch sm_90a: O in bf16)")
    parser.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=64, help="d (default 64; 256 with --arch sm_90a)")
    parser.add_argument("--causal", action="store_true", help="the causal mask")
    parser.add_argument("--tuned", action="store_true", help="the CTA `Attention` runs for d and the mask (TUNED's)")
    parser.add_argument("--arch", choices=("sm_80", "sm_90a"), default="sm_80",
                        help="sm_80: mma.sync (FlashAttention-2's form, any sm_80 or newer GPU); sm_90a: Hopper's "
                             "path (TMA, wgmma, a producer warpgroup; hopper_attention)")
    parser.add_argument("--config", default="", metavar="FIELD=VALUE,...",
                        help="with --arch sm_90a: the kernel's fields over the head dim's, e.g. persistent=true "
                             "(one CTA an SM walking the row tiles), pingpong=true (the consumers take turns), "
                             "consumers=3,keys=64 (HopperAttentionConfig's)")
    parser.add_argument("--batch", type=int, default=1, help="the GPU run's batch (default 1)")
    parser.add_argument("--heads", type=int, default=CASE[0], help=f"the GPU run's heads (default {CASE[0]})")
    parser.add_argument("--seq", type=int, default=CASE[1],
                        help=f"positions of the GPU run and of --emulate's case, its first CTA (default {CASE[1]})")
    return ("dtype", "head_dim", "causal", "tuned", "arch", "config")


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    def build(dtype, head_dim, causal, tuned, arch, config):
        config = configure(dtype, head_dim, causal, tuned, arch, config)
        if arch == "sm_90a":
            from mlir_tile.kernels import hopper_attention

            return hopper_attention.build_module(config)
        return build_module(config)

    def emulate_cta(dtype, head_dim, causal, tuned, batch, heads, seq, arch, config):  # one CTA of one head
        if arch == "sm_90a":
            raise ValueError("attention: --emulate models the sm_80 kernel; Hopper's runs on the GPU (--run-ptx)")
        return emulate(configure(dtype, head_dim, causal, tuned), seq, causal)

    return example_main(__doc__, build, run_and_check, emulate_cta, options=add_options)


if __name__ == "__main__":
    sys.exit(main())
