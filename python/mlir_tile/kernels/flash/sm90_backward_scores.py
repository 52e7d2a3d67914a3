"""The attention backward's per-block score math over S^T's and dP^T's accumulators (`sm90_backward`): which keys
each slot's query sees, P^T = exp2(S^T scale log2(e) - LSE log2(e)) and dS^T = P^T (dP^T - D), through a
variant's score step where it has one.

A mixin of the kernel (`sm90_backward._Backward`), whose attributes it reads: `k`, `config`, `s_acc` and `dp_acc`
(S^T's and dP^T's accumulators) with `s_halves` and `s_columns` (each slot's row half and column step), `n0`,
`consumer`, `keys_end`, `key_length`, `shift` and `position_shift` (the packed sequence's), `scale`, `d`,
`variant` and `extras` (its operands), `statistics` (the LSE and D rows' ring) and `operand(at, tile, ...)`.
"""
from __future__ import annotations

import math

from mlir_tile.kernels.common import LOG2E


class BackwardScores:
    def slot_facts(self, q0) -> dict:
        """What each S^T slot needs of its key (its row) and query (its column) in the block of `q0`: the thread's
        first key, query and column, whether each of its two keys lies inside the sequence."""
        k, keys_end = self.k, self.k.as_index(self.keys_end)
        row, column = self.s_acc.coordinate(0)
        if self.config.split_columns:  # (all the CTA's keys, the consumer's band of the block's rows)
            first_key, column = self.n0 + row, self.consumer * self.config.score_rows + column
        else:
            first_key = self.n0 + self.consumer * 64 + row
        first_query = q0 + column
        position = first_query if self.position_shift is None else first_query + self.position_shift
        return {"first_key": first_key, "first_query": first_query, "column": column, "position": position,
                "keys": [k.compare("ult", first_key + 8 * half, keys_end) for half in range(2)]}

    def kept(self, facts: dict, slot: int):
        """Whether slot `slot`'s key is seen by its query: in the sequence, (causal) not past it; or the variant's."""
        half, step = self.s_halves[slot], self.s_columns[slot]
        keep = facts["keys"][half]
        if self.variant is not None and self.variant.keys is not None:  # (the query's keys relative to the
            # thread's first, i32: the key's 8 x half)
            from mlir.dialects import arith

            k, first_key, at = self.k, facts["first_key"], self.k.constant(8 * half)
            lowest, end = (k.as_i32(bound - first_key, signed=True) for bound in self.variant.key_interval(
                k, facts["position"] + step, self.key_length, self.extras))
            return (keep & arith.cmpi(arith.CmpIPredicate.sle, lowest, at)
                    & arith.cmpi(arith.CmpIPredicate.slt, at, end))
        if self.config.causal and self.shift is None:
            keep = keep & self.k.compare("ule", facts["first_key"] + 8 * half, facts["first_query"] + step)
        elif self.config.causal:  # (packed: the bottom-right diagonal, the query shifted by len_k - len_q)
            keep = keep & self.k.compare("sle", facts["first_key"] + 8 * half, facts["first_query"] + step + self.shift)
        return keep

    def statistic(self, at):
        """The block's row of LSE log2(e) or of D at byte `at`: one unswizzled box of `rows` fp32 values."""
        return self.operand(at, "statistic", self.config.rows, "f32")

    def block_statistics(self, step, part: int, facts: dict) -> dict:
        """Per column step of the thread's S^T slots, its query's LSE log2(e) (part 0) or D (1) in block `step`."""
        row = self.statistic(self.statistics.offset(self.statistics.stage(step), part))
        return {at: row[0, facts["column"] + at] for at in sorted(set(self.s_columns))}

    def probabilities(self, step, facts: dict) -> None:
        """P^T = exp2(S^T scale log2(e) - LSE log2(e)) over S^T's accumulators, 0 where the key is not seen (a
        query past the sequence has LSE +inf in the caller's padding: exp2(-inf) = 0)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k = self.k
        lse = self.block_statistics(step, 0, facts)
        zero, columns = k.constant(0.0, "f32"), self.s_columns
        for slot in range(self.config.score_rows // 2):
            score, scale = k.load(self.s_acc.registers, [slot]), self.scale
            if "heads" in facts:  # (a score step: on q.k / sqrt(d), then the softmax's log2(e) alone)
                score, scale = self.stepped(score, facts, slot), k.constant(LOG2E, "f32")
            probability = k.exp2(math_dialect.fma(score, scale, arith.negf(lse[columns[slot]])))
            k.store(arith.select(self.kept(facts, slot), probability, zero), self.s_acc.registers, [slot])

    def score_site(self, facts: dict, slot: int):
        """The variant's `at` of slot `slot`: its query and key, the head's values, key - query."""
        half, step = self.s_halves[slot], self.s_columns[slot]
        return self.variant.site(self.k, facts["position"] + step, facts["first_key"] + 8 * half, facts["heads"],
                                 self.extras, distance=lambda: facts["nearest"] + float(8 * half - step))

    def stepped(self, score, facts: dict, slot: int):
        """The variant's score step on slot `slot`'s q.k (times 1 / sqrt(d))."""
        return self.variant.stepped(self.k, score, self.k.constant(1 / math.sqrt(self.d), "f32"),
                                    self.score_site(facts, slot))

    def score_gradients(self, step, facts: dict) -> None:
        """dS^T = P^T (dP^T - D[query]) over dP^T's accumulators (P^T read back from S^T's)."""
        from mlir.dialects import arith

        k, columns = self.k, self.s_columns
        delta = self.block_statistics(step, 1, facts)
        stepped = "heads" in facts and not (self.variant.constant_gradient and self.variant.score_gradient == 1)
        lse = self.block_statistics(step, 0, facts) if stepped else None
        for slot in range(self.config.score_rows // 2):
            probability = k.load(self.s_acc.registers, [slot])
            gradient = arith.subf(k.load(self.dp_acc.registers, [slot]), delta[columns[slot]])
            score_gradient = arith.mulf(probability, gradient)
            if stepped:  # (times the step's derivative at its result, log2(P) + LSE log2(e) over log2(e))
                score_gradient = self.through_step(score_gradient, probability, lse[columns[slot]], facts, slot)
            k.store(score_gradient, self.dp_acc.registers, [slot])

    def through_step(self, score_gradient, probability, lse, facts: dict, slot: int):
        """dS of the stepped score times the step's derivative at its result, recovered from P (P = exp2(stepped x
        log2(e) - LSE log2(e))); 0 where P is (a key not seen: its result is -inf)."""
        from mlir.dialects import arith
        from mlir.dialects import math as math_dialect

        k = self.k
        result = arith.mulf(arith.addf(math_dialect.log2(probability), lse), k.constant(1 / LOG2E, "f32"))
        derivative = self.variant.gradient_of(k, result, self.score_site(facts, slot))
        seen = arith.cmpf(arith.CmpFPredicate.OGT, probability, k.constant(0.0, "f32"))
        return arith.select(seen, arith.mulf(score_gradient, derivative), k.constant(0.0, "f32"))
