"""The Hopper GEMM's (`sm90._HopperGemm`'s) fused steps: fp8's promoted accumulation (`promote`: each k-tile's
products summed into partials of their own, then added into the fp32 accumulators) and its blockwise scales
(`block_scales`: an fma by the row's and the tile's block's scales as each k-tile is added in), and fused SwiGLU
(`swiglu`: C = silu(gate) * up from the interleaved weights' pairs, `swiglu_pairs`). A mixin: it reads the
kernel's `k`, `config`, `element`, `accumulators`, `promoted`, `pipeline`, `atom`, `scales`, `m`, `n`,
`k_tiles`, `consumer_thread`, `_place` and `group_of`, and sets `scale_registers` (blockwise)."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def swiglu_pairs(bn: int, element: str) -> tuple:
    """Fused SwiGLU: per accumulator slot of an m64n(BN / 2) atom (C's), the (gate, up) slots of the m64nBN atom
    that hold its two factors in the same thread: B's rows interleaved a block of 8 at a time (`swiglu_weights`),
    C's column 8 i + x is gate column 16 i + x's times up column 16 i + 8 + x's. Proven for every thread by the
    atoms' accumulator layouts; ValueError otherwise."""
    from mlir_tile.isa.atoms import wgmma

    wide, narrow = wgmma(bn, element).c, wgmma(bn // 2, element).c
    pairs = []
    for slot in range(bn // 4):
        gate = 8 * (slot // 4) + slot % 4
        for thread in range(128):
            row, column = narrow.rows.offset(thread, slot), narrow.columns.offset(thread, slot)
            held = [(wide.rows.offset(thread, s), wide.columns.offset(thread, s)) for s in (gate, gate + 4)]
            want = [(row, 16 * (column // 8) + column % 8), (row, 16 * (column // 8) + 8 + column % 8)]
            if held != want:
                raise ValueError(f"hopper gemm: SwiGLU's output slot {slot} of thread {thread} is at {(row, column)}, "
                                 f"its factors' slots {gate} and {gate + 4} at {held}, not {want}")
        pairs.append((gate, gate + 4))
    return tuple(pairs)


@functools.lru_cache(maxsize=None)
def column_slots(bn: int) -> tuple:
    """(the accumulator slots of an fp8 m64nBN atom that hold a thread's distinct columns, per slot the index
    among them of the one in its column, each distinct one's column less the thread's first): c0 c1 of each 8
    columns (c2 c3 the same columns 8 rows down), at the same offsets for every thread. Proven for every thread
    by the atom's accumulator layout; ValueError otherwise."""
    from mlir_tile.isa.atoms import wgmma

    columns = wgmma(bn, "e4m3").c.columns
    distinct = tuple(slot for slot in range(bn // 2) if slot % 4 < 2)
    of_slot = tuple(distinct.index(slot - slot % 4 // 2 * 2) for slot in range(bn // 2))
    offsets = tuple(columns.offset(0, slot) - columns.offset(0, 0) for slot in distinct)
    for thread in range(128):
        held = [columns.offset(thread, slot) for slot in distinct]
        if len(set(held)) != len(held) or any(columns.offset(thread, slot) != held[of_slot[slot]]
                                              for slot in range(bn // 2)) or any(
                column - held[0] != offset for column, offset in zip(held, offsets)):
            raise ValueError(f"hopper gemm: thread {thread}'s accumulator columns are not those of slots "
                             f"{distinct} (c0 c1 of each 8) at offsets {offsets} from its first, each of the "
                             f"others' that of the slot 2 before it")
    return distinct, of_slot, offsets


class FusedSteps:
    def promoted_step(self, a_tile, b_tile, first_block, in_ring, k_tile, origin) -> None:
        """fp8's promoted accumulation: the k-tile's batches summed by wgmma into the partials (cleared first:
        wgmma passes its registers' values in even where it does not read them, which would keep the k-tile
        before's live), waited for, the stage released (its reads are done), each partial added into its fp32
        accumulator (one add a slot: the other consumer's wgmmas run meanwhile); with blockwise scales, an fma by
        its row's scale times the tile's block of B's (loaded a step before: `prefetch_factors`)."""
        k = self.k
        factors = self.carried_factors() if self.config.block_scales else None  # (loaded a step before)
        self.summed_into(self.promoted, a_tile, b_tile, first_block)
        if factors is not None:  # (the next k-tile's, the last's again at the end: their loads under this one)
            upcoming = self.block_scales_at(k.minimum(k_tile + 1, self.k_tiles - k.index(1)), origin)
        if self.config.row_blocks:  # (this k-tile's columns', loaded under its wgmmas: a step ahead they spilled)
            columns = self.column_scales_at(k_tile, origin)
            factors = [(rows, columns) for rows, _ in factors]
        self.settle_partials(in_ring, self.promoted, 0, factors)
        if factors is not None:
            self.carry_scales(upcoming)

    def summed_into(self, partials, a_tile, b_tile, first_block) -> None:
        """A k-tile's batches summed by wgmma into `partials` (cleared first: wgmma passes its registers' values
        in even where it does not read them, which would keep the k-tile before's live)."""
        k = self.k
        zero = k.constant(0.0, "f32")
        for batch, registers in enumerate(partials):
            for slot in range(self.config.bn // 2):
                k.store(zero, registers.registers, [slot])
            k.wgmma(self.atom, a_tile, b_tile, registers, accumulate=False,
                    a_row_block=first_block + batch if batch else first_block)

    def settle_partials(self, in_ring, partials, pending: int, factors=None) -> None:
        """The `in_ring`-th k-tile's `partials` waited for (`pending` groups, a later k-tile's, left in flight),
        its stage released (its reads are done), each added into its fp32 accumulator (one add a slot: the
        other consumer's wgmmas, and a paired kernel's next k-tile's, run meanwhile); with blockwise `factors`
        (`carried_factors`), an fma by the slot's `factor`."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k = self.k
        k.wgmma_wait(pending, partials)
        self.pipeline.release(in_ring)
        for batch, (accumulators, registers) in enumerate(zip(self.accumulators, partials)):
            for slot in range(self.config.bn // 2):
                total, partial = k.load(accumulators.registers, [slot]), k.load(registers.registers, [slot])
                total = (arith.addf(total, partial) if factors is None else
                         math_dialect.fma(partial, self.factor(factors, batch, slot), total))
                k.store(total, accumulators.registers, [slot])

    def paired_steps(self, turn) -> None:
        """The promoted k-loop with two partial sets (`paired`): k-tile 0's batch issued into the first; then
        k-tiles by pairs (t into the second set, t + 1 into the first: each set's registers named statically),
        each issued before the k-tile before it is waited for (its own groups left in flight) and that one's set
        added into the accumulators under its wgmmas, its stage released; then, K's k-tiles even, the last one
        into the second set; the last set added in after a wait for all. (Each stage is released as `in_ring -
        1` or `in_ring` of the one just issued: the in-flight checks prove them apart.)"""
        k, sets, count, batches = self.k, (self.promoted, self.second), self.k_tiles, len(self.accumulators)
        self.issue_partials(self._in_ring(turn, 0), sets[0])
        with k.loop(1, count - (count - k.index(1)) % 2, 2) as k_tile:  # (whole pairs: k-tiles t and t + 1)
            in_ring = self._in_ring(turn, k_tile)
            self.issue_partials(in_ring, sets[1])
            self.settle_partials(in_ring - 1, sets[0], batches)
            self.issue_partials(in_ring + 1, sets[0])
            self.settle_partials(in_ring, sets[1], batches)
        last = self._in_ring(turn, count - k.index(1))
        with k.if_(k.compare("eq", count % 2, 0)):  # (the last k-tile odd: into the second set)
            self.issue_partials(last, sets[1])
            self.settle_partials(last - 1, sets[0], batches)
            self.settle_partials(last, sets[1], 0)
        with k.if_(k.compare("eq", count % 2, 1)):
            self.settle_partials(last, sets[0], 0)

    def issue_partials(self, in_ring, partials) -> None:
        """The pipeline's `in_ring`-th k-tile's batch, once its stage is full, summed into `partials`."""
        self.summed_into(partials, *self.stage_tiles(in_ring))

    def factor(self, factors, batch: int, slot: int):
        """Accumulator slot `slot`'s blockwise factor in batch `batch` (`carried_factors`): its row's (the slot's
        half: c0 c1 or c2 c3), times, with B's rows' blocks, its column's (`column_slots`)."""
        from mlir.dialects import arith

        rows, columns = factors[batch]
        row = rows[slot % 4 // 2]
        return row if columns is None else arith.mulf(row, columns[column_slots(self.config.bn)[1][slot]])

    def prefetch_factors(self, origin) -> None:
        """Blockwise scales, before a tile's k-tiles: k-tile 0's scales (`block_scales_at`) into the registers
        each step reads its own from and leaves the next one's in (`carry_scales`), so that a step's scale loads
        run under a whole k-tile rather than under its own wgmmas alone (their latency was the blockwise kernel's
        most common stall: the tensor pipe busy 58% of the time against the per-tensor kernel's 78%); none where
        the tile takes no k-tile (a contiguous grouped GEMM's tail, whose group has no scales)."""
        k = self.k
        self.scale_registers = k.registers(self.column_scales + 2 * len(self.accumulators), "f32")
        with k.if_(k.compare("ugt", self.k_tiles, 0)):
            self.carry_scales(self.block_scales_at(k.index(0), origin))

    @property
    def column_scales(self) -> int:
        """Blockwise scale_b values a thread carries to the next k-tile: the tile's block's, or none (`row_blocks`:
        its columns' are loaded at the k-tile, `column_scales_at`)."""
        return 0 if self.config.row_blocks else 1

    def carry_scales(self, scales: list) -> None:
        for slot, scale in enumerate(scales):
            self.k.store(scale, self.scale_registers, [slot])

    def carried_factors(self) -> list:
        """Per batch, (the thread's two rows' factors, None) of the k-tile whose scales the step before left:
        scale_a times the tile's block of scale_b (multiplied here: their loads' first use, a k-tile after them),
        or with `row_blocks` scale_a alone (each column's scale_b multiplied in a slot at a time, `factor`)."""
        from mlir.dialects import arith

        carried = [self.k.load(self.scale_registers, [slot]) for slot in range(self.column_scales
                                                                               + 2 * len(self.accumulators))]
        columns, rows = carried[:self.column_scales], carried[self.column_scales:]
        if not self.config.row_blocks:
            rows, columns = [arith.mulf(row, columns[0]) for row in rows], None
        return [(rows[2 * batch:2 * batch + 2], columns) for batch in range(len(self.accumulators))]

    def block_scales_at(self, k_tile, origin) -> list:
        """Blockwise scales at k-tile `k_tile`: the C tile's block of scale_b (none with `row_blocks`), then per
        batch the thread's two rows' (c0 c1, c2 c3) scale_a (rows and blocks past C read at its last: their results
        are clipped)."""
        from mlir_tile.builder.integers import with_operators
        from mlir_tile.kernels.gemm.sm90_tiles import BLOCK

        k = self.k
        n, k_tiles = with_operators(k.as_index(self.n)), with_operators(self.k_tiles)
        c_c, blocks = k.identity_tensor((self.m, self.n)), (n + (BLOCK - 1)) // BLOCK
        column_block = k.minimum(with_operators(origin[1]) // BLOCK, blocks - 1)
        if self.config.grouped:  # (scale_b [groups x N / 128, K / 128]: its group's blocks)
            column_block = self.group_of(origin)[0] * blocks + column_block
        scales = [] if self.config.row_blocks else [k.load(self.scales[1],
                                                           [with_operators(column_block) * k_tiles + k_tile])]
        last = with_operators(k.as_index(self.m)) - 1
        for batch in range(len(self.accumulators)):
            place = self._place(c_c, origin, batch)
            for slot in (0, 2):
                row = with_operators(k.minimum(place[self.consumer_thread, slot][0], last))
                scales.append(k.load(self.scales[0], [row * k_tiles + k_tile]))
        return scales

    def column_scales_at(self, k_tile, origin) -> list:
        """`row_blocks`: k-tile `k_tile`'s scale_b of each of the thread's columns (`column_slots`), scale_b read
        as the host lays it, [K / 128, N rounded up to BN] (MN-major, a k-tile's columns side by side, padded:
        `hopper_ops.kernel_scales`), each at its constant offset from the thread's first column (per-column
        clipping held 32 offsets across the k-loop and spilled)."""
        from mlir_tile.builder.integers import with_operators

        k, bn = self.k, self.config.bn
        place = self._place(k.identity_tensor((self.m, self.n)), origin, 0)
        padded = (with_operators(k.as_index(self.n)) + (bn - 1)) // bn * bn
        first = with_operators(k_tile) * padded + place[self.consumer_thread, 0][1]
        return [k.load(self.scales[1], [first + offset]) for offset in column_slots(bn)[2]]

    def store_swiglu(self, band, packed) -> None:
        """Fused SwiGLU: each of C's BN / 2 columns silu(gate) * up of its two accumulators (`swiglu_pairs`),
        packed as C's m64n(BN / 2) accumulators would be."""
        from mlir_tile.kernels.epilogues import F32, sigmoid

        k, pairs = self.k, swiglu_pairs(self.config.bn, self.element)
        for accumulators, registers in zip(self.accumulators, packed):
            swiglu = k.registers(len(pairs), "f32")
            for slot, (gate, up) in enumerate(pairs):
                g, u = (F32(k, k.load(accumulators.registers, [s])) for s in (gate, up))
                k.store((g * sigmoid(g) * u).value, swiglu, [slot])
            band.pack(registers, swiglu, self.config.c_columns, lambda slot, x: x)
