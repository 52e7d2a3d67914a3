"""Hopper attention's epilogue: O divided by the row sums (a variant's sink beside them), each row's
log-sum-exp, O written by stmatrix and TMA stores (or, packed sequences, by rows from the registers).

A mixin of the kernel (`sm90._HopperAttention`), whose attributes it reads: `o_acc` with `o_halves`, `row_max`
and `row_sum`, `variant`, `head_values`, `extras`, `keys_of_rows`, `negative_infinity`, `v_scale` (fp8), `seq`,
`g_lse`, `q0`, `head`, `consumer`, `split` (split-KV), `shared`, `tiles`, `barriers`, `ring`, `pipeline`,
`o_map`, `config`, and `_query(row)`, `position(row)`, `consumer_thread()`, `release_q_band()`, with
`sm90_varlen.PackedItems`' `store_lse`, `store_o_rows` and `walk_covers` for packed sequences.
"""
from __future__ import annotations

from mlir_tile.kernels.common import LOG2E, output_element
from mlir_tile.kernels.flash.sm90_layouts import O_BOX_COLUMNS
from mlir_tile.kernels.flash.sm90_tiles import BAND_BYTES


class Epilogue:
    def epilogue(self, last) -> None:
        """O / the row sums (a variant's sink added to them: `sink_share`; fp8: times V's descale) and the row's
        log-sum-exp (natural log, by the first lane of its quad where the row lies inside the sequence); O through
        shared memory (`store_o`; `last`: the item's last key tile in the K/V pipeline)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k, varlen = self.k, self.config.varlen
        inverses, numerator = [], self.v_scale if self.config.fp8 else k.constant(1.0, "f32")
        for half in range(2):
            total = k.warp_reduce(k.load(self.row_sum, [half]), "add", lanes=4)
            row, _ = self.o_acc.coordinate(self._first_slot(half))
            if self.variant is not None and self.variant.sink is not None:  # (the sink's exp, the sum's units)
                total = arith.addf(total, self.sink_share(row, half))
            inverse = k.divide(numerator, total)
            if varlen:  # (a row that sees no key: its sum 0, its O 0, its log-sum-exp -inf + log2(0) = -inf)
                seen = arith.cmpf(arith.CmpFPredicate.OGT, total, k.constant(0.0, "f32"))
                inverse = arith.select(seen, inverse, k.constant(0.0, "f32"))
            inverses.append(inverse)
            log_sum = arith.mulf(arith.addf(k.load(self.row_max, [half]), math_dialect.log2(total)),
                                 k.constant(1 / LOG2E, "f32"))
            if varlen:
                if self.keys_of_rows:  # (NaN where the item's walk misses some of the row's keys)
                    covered, nan = self.walk_covers(row), k.constant(float("nan"), "f32")
                    inverses[-1], log_sum = (arith.select(covered, x, nan) for x in (inverse, log_sum))
                self.store_lse(row, log_sum)
                continue
            query = self._query(row)
            with k.if_(k.leads_lanes(4) & k.compare("ult", query, k.as_index(self.seq))):
                self.g_lse[query] = log_sum
        if varlen:
            self.store_o_rows(inverses)
        else:
            self.store_o(inverses, last)

    def sink_share(self, row, half: int):
        """exp2(sink x log2(e) - the row's max): the variant's sink logit in the units of the row's sum (its
        probabilities are exp2 of the scores x log2(e) less that max)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k = self.k
        sink = self.variant.sink_logit(k, self.position(row), self.head_values[half], self.extras)
        maximum = k.load(self.row_max, [half])
        if self.config.varlen:  # (a row that saw no key has the max -inf: the sink's logit stands in, its share 1,
            # and the log-sum-exp is the sink's, not -inf + inf)
            unseen = arith.cmpf(arith.CmpFPredicate.OEQ, maximum, self.negative_infinity)
            maximum = arith.select(unseen, arith.mulf(sink, k.constant(LOG2E, "f32")), maximum)
            k.store(maximum, self.row_max, [half])
        share = k.exp2(math_dialect.fma(sink, k.constant(LOG2E, "f32"), arith.negf(maximum)))
        if self.config.split_kv:  # (split 0's alone: the combine sums the splits' exp(lse), the sink once)
            share = arith.select(k.compare("eq", self.split, 0), share, k.constant(0.0, "f32"))
        return share

    def store_o(self, inverses, last) -> None:
        """O's pairs packed and written by stmatrix into this consumer's 64-row band of the O tile
        (`HopperAttentionConfig.o_offset`), then one TMA store a box of 64 columns by the consumer's first thread
        once its warps have written (fenced, its named barrier): through the 3-D map of O [batch * heads, seq,
        d], so that rows past the sequence are not written. The band's bytes are free to write once: over Q,
        always (one item a CTA); O's own tile, once the item before's stores have read it; over the last key
        tile's stage, once every consumer's last P V is done. One item a CTA, once the stores have read the
        band, that thread's warp releases its band of Q; over the stage, the stage is released then."""
        from mlir.dialects import arith

        from mlir_tile.builder.stores import AccumulatorBand

        k, config, out = self.k, self.config, output_element(self.config.element)
        band = AccumulatorBand(k, self.tiles["o_band"], out)
        packed = band.registers()
        band.pack(packed, self.o_acc.registers, self.d, lambda slot, x: arith.mulf(x, inverses[self.o_halves[slot]]))
        thread, own_o = self.consumer_thread(), config.persistent and not config.o_in_stage
        if own_o:
            with k.if_(k.compare("eq", thread, 0)):
                k.tma_store_wait(0)
            self.barriers.meet_own(self.consumer)
        if config.o_in_stage:
            self.barriers.meet_all()  # (every consumer done reading the stage O goes over)
            tile = self.ring.offset(self.ring.stage(last), 0)
        else:
            tile = k.index(config.o_offset)
        first = tile + self.consumer * BAND_BYTES
        band.write(packed, self.shared, first)
        k.async_proxy_fence()
        self.barriers.meet_own(self.consumer)
        # [tma-store-coordinate]: the head a quotient of the item, q0 its row tile (a remainder, or the tiles
        # less one less a remainder or half of one) times the tile's rows: non-negative by construction
        row = self.q0 + self.consumer * 64
        with k.if_(k.compare("eq", thread, 0)):
            for column, box in k.boxes(self.shared, first, self.tiles["o"], out, O_BOX_COLUMNS):
                k.tma_store(box, self.o_map, (self.head, row, k.index(column)))
            if not own_o:  # (O's own tile: the next item's epilogue waits, or the walk's end)
                k.tma_store_wait(0)
        if config.o_in_stage:  # (the storing thread's warp arrives once its stores have read the stage)
            self.pipeline.release(last)
        elif not config.persistent:
            self.release_q_band()

    def _first_slot(self, half: int) -> int:
        return next(slot for slot, h in enumerate(self.o_halves) if h == half)
