"""Hopper attention's online softmax of a key tile's S (FlashAttention's, in the log2 domain): the variant's
score step, the mask, each row's running max and sum, the probabilities written over S's accumulators.

A mixin of the kernel (`sm90._HopperAttention`), whose attributes it reads: `s_acc` (S's accumulators) with
`s_halves` and `s_columns` (each slot's row half and column step), `row_max` and `row_sum` (the two rows'
registers), `scale` (the exp2 scale), `score_scale` (q.k's scale before a score step; None: no step),
`variant`, `keys_of_rows`, `extras` (the variant's operands), `head_values` (its "head" operands' values at
each of the thread's two rows' heads), `seq`, `negative_infinity`, `config`, and `key_tile_at(tile)`, `_query(row)`,
`position(row)` and `row_keys(row)`.
"""
from __future__ import annotations

from mlir_tile.kernels.flash.sm90_tiles import RESCALE_SLACK


class OnlineSoftmax:
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
            if self.score_scale is not None:
                scores = self.stepped(scores, slots, tile, half)
            if masked:
                scores = self.masked(scores, slots, tile, half)
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

    def stepped(self, scores, slots, tile, half: int) -> list:
        """The variant's score step on row `half`'s scores of `slots` in key tile `tile` (counted from the
        item's first)."""
        k = self.k
        row, _ = self.s_acc.coordinate(self.s_halves.index(half))
        first_key = k.as_index(self.key_tile_at(tile)) * self.config.keys + self.s_acc.coordinate(0)[1]
        return self.variant.scores(k, scores, self.score_scale, self.position(row), first_key,
                                   [self.s_columns[slot] for slot in slots], self.head_values[half], self.extras)

    def masked(self, scores, slots, tile, half: int) -> list:
        """Row `half`'s scores of `slots` in key tile `tile`, those of keys the row does not see at -inf: keys
        past the sequence and, causal, past its diagonal, or outside the variant's keys of the row. Accumulator
        slot s holds key (the thread's first column of S) + `s_columns[s]`: one compare a score (two with a
        first key), not the key's and the row's."""
        from mlir.dialects import arith

        k = self.k
        row, _ = self.s_acc.coordinate(self.s_halves.index(half))
        _, column = self.s_acc.coordinate(0)
        if self.keys_of_rows:
            lowest, limit = self.row_keys(row)
        elif self.config.varlen:
            lowest, limit = None, self.sequence.key_end(self._query(row), self.config.causal)
        else:
            lowest, limit = None, k.as_index(self.seq)
            if self.config.causal:
                limit = k.minimum(limit, self._query(row) + 1)
        first_key = k.as_index(self.key_tile_at(tile)) * self.config.keys + column

        def relative(key):  # (an i32, negative where the key lies before the thread's first column)
            return k.as_i32(key - first_key, signed=True)
        bound, low = relative(limit), None if lowest is None else relative(lowest)
        kept = []
        for slot, score in zip(slots, scores):
            step = k.constant(self.s_columns[slot])
            seen = arith.cmpi(arith.CmpIPredicate.slt, step, bound)
            if low is not None:
                seen = arith.andi(seen, arith.cmpi(arith.CmpIPredicate.sge, step, low))
            kept.append(arith.select(seen, score, self.negative_infinity))
        return kept


def _tree(values, combine):
    """The values combined as a tree of pairs (depth log2 n)."""
    while len(values) > 1:
        values = [combine(*values[i:i + 2]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]
