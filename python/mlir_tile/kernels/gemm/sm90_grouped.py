"""The Hopper GEMM's (`sm90._HopperGemm`'s) grouped forms, a mixin: the masked layout (groups of T rows, each
group's first counts[e] rows computed: `counted`), the contiguous one (experts' rows sorted one after another,
torch._grouped_mm's offsets: each C tile's expert and rows located by a scan of the offsets before the roles split,
`locate_segment`, and C's stores clipped at the expert's last row through a 3-D map, `clipped_store_at`), with B
[K, N] for its dx too (`grouped_b_at`), and the ragged reduction of its dw (`ragged_k`: `locate_reduction`,
`ragged_at`). It reads the kernel's `k`, `config`, `groups`, `m`, `n`, `depth` and `order`, and sets `segment`,
`reduction` and `k_tiles`."""
from __future__ import annotations


class GroupedSteps:
    def group_of(self, origin) -> tuple:
        """Grouped: (the group of the C tile at `origin`, its first row within the group: masked, T rows a
        group, BM dividing T, so a tile never straddles two groups; contiguous and ragged, the located expert and
        None)."""
        from mlir_tile.builder.integers import with_operators

        if self.config.contiguous or self.config.ragged_k:
            return self.segment[0], None
        k = self.k
        row0, rows = with_operators(k.as_index(origin[0])), with_operators(k.as_index(self.groups[1]))
        return row0 // rows, row0 % rows

    def epilogue_group(self, origin) -> tuple:
        """(the group an epilogue's "group_column" operands are read at, None where not grouped or without an
        epilogue; contiguous: whether the tile is the tail's, rows past the last expert, else None). The tail's
        group E is read as E - 1, its rows' results then zeros (no write or read outside the operands)."""
        if not self.config.grouped or self.epilogue is None:
            return None, None
        group = self.group_of(origin)[0]
        if not self.config.contiguous:
            return group, None
        k = self.k
        experts = k.as_index(self.groups[1])
        tail = k.compare("eq", group, experts)
        return k.select(tail, experts - k.index(1), group), tail

    def counted(self, origin):
        """Masked: whether the C tile at `origin` starts below its group's count (an i1)."""
        group, row = self.group_of(origin)
        count = self.k.as_index(self.k.load(self.groups[0], [group]), unsigned_from="i32")
        return self.k.compare("ult", row, count)

    def b_row(self, origin):
        """B [N, K]'s row of the C tile at `origin`'s first column (grouped: in its group's N rows)."""
        if not self.config.grouped:
            return origin[1]
        return self.group_of(origin)[0] * self.k.as_index(self.n) + self.k.as_index(origin[1])

    def row_tiles(self):
        """The order's rows (an index value): M's; contiguous, BM x (ceil(tokens / BM) + E + 1), the most row
        tiles E experts' rows and the tail's can take (expert e's ceil(rows_e / BM)); a ragged reduction's, E x
        ceil(M / BM) x BM."""
        from mlir_tile.builder.integers import with_operators

        if not (self.config.contiguous or self.config.ragged_k):
            return self.m
        k, bm = self.k, self.config.bm
        rows, experts = (with_operators(k.as_index(x)) for x in (self.m, self.groups[1]))
        if self.config.ragged_k:
            return experts * ((rows + (bm - 1)) // bm) * bm
        return ((rows + (bm - 1)) // bm + experts + 1) * bm

    def locate_reduction(self, tile) -> None:
        """A ragged reduction: `segment`, the (expert, first row in its C) of the order's row tile of `tile`, and
        `reduction`, the expert's (first row, rows) of A and B, whose k-tiles are the CTA's (`k_tiles`; none for
        an expert without rows: its C tile is zeros)."""
        from mlir_tile.builder.integers import with_operators

        k, bm, bk = self.k, self.config.bm, self.config.bk
        experts = with_operators(k.as_index(self.groups[1]))
        row_tile = with_operators(k.as_index(self.order.origin(tile)[0])) // bm
        per_expert = (with_operators(k.as_index(self.m)) + (bm - 1)) // bm
        expert = row_tile // per_expert
        start, _, rows = self._expert_rows(expert, experts, k.compare("ult", expert, experts))
        self.segment, self.reduction = (expert, row_tile % per_expert * bm), (start, rows)
        self.k_tiles = (rows + (bk - 1)) // bk

    def ragged_at(self, k_tile, column) -> tuple:
        """A ragged reduction: the coordinate of the box of BK rows of A or B at `k_tile` of the expert's rows
        (`ragged_box`: the k-tile's rows inside the expert's, those past them read as zeros)."""
        from mlir_tile.builder.integers import minimum, with_operators

        bk = self.config.bk
        start, rows = self.reduction
        first = with_operators(k_tile) * bk
        inside = minimum(bk, rows - first)
        return ragged_box(start + first, inside, bk, column)

    def grouped_b_at(self, k_tile, box_row, box_column) -> tuple:
        """B [K, N]'s box coordinate of a grouped GEMM (contiguous: its expert's matrix of a 3-D map over B [E, K,
        N], a box stopping at the matrix's last row, so that the next expert's rows read as zeros), or the ragged
        reduction's."""
        if self.config.ragged_k:
            return self.ragged_at(k_tile, box_column)
        return (self.segment[0], box_row, box_column)

    def grouped_c_at(self, row0, column) -> tuple:
        """C's box coordinate of a grouped GEMM's tile at `row0`: masked, as a dense GEMM's; contiguous,
        `clipped_store_at`; a ragged reduction's, its expert's matrix of a 3-D map over C [E, M, N]."""
        if self.config.contiguous:
            return self.clipped_store_at(row0, column)
        if self.config.ragged_k:
            return (self.segment[0], row0, column)
        return (row0, column)

    def locate_segment(self, tile) -> None:
        """Contiguous: `segment`, the (expert, first row, rows) of the order's row tile of `tile` (index values;
        rows 0 past the experts' tiles), every thread taking part before the roles split; the rows after the last
        expert's are expert E's, whose tiles take no k-tile (`k_tiles` 0: C's rows there zeros). A pass counts the
        row tiles of `threads` experts, one a thread (`_expert_rows`), sums them over each warp by shuffles and
        over the warps through shared memory; the thread whose expert's tiles hold the row tile writes its
        segment there."""
        from mlir_tile.builder.integers import with_operators

        k, config = self.k, self.config
        warps = config.threads // 32
        scratch = k.shared("grouped_segment", warps + 3, "i32")  # the warps' sums, then the segment
        with k.if_(k.compare("eq", k.thread_id(), 0)):
            k.store(k.constant(0), scratch, [warps + 2])  # (no expert's tile: no rows)
        target = with_operators(k.as_index(self.order.origin(tile)[0])) // config.bm
        before = k.registers(1, "i32")  # the row tiles of the passes before
        k.store(k.constant(0), before, [0])
        experts = with_operators(k.as_index(self.groups[1]))
        with k.loop(0, (experts + config.threads) // config.threads) as turn:  # (E + 1 of them: the tail's)
            expert = with_operators(k.as_index(turn)) * config.threads + k.thread_id()
            self._count_in_pass(expert, experts, target, before, scratch, warps)
        k.barrier()
        self.segment = [k.as_index(k.load(scratch, [warps + i]), unsigned_from="i32") for i in range(3)]
        self.k_tiles = k.select(k.compare("eq", self.segment[0], experts), k.index(0), self.k_tiles)

    def _count_in_pass(self, expert, experts, target, before, scratch, warps: int) -> None:
        """One pass of `locate_segment`: `expert`'s row tiles (this thread's), their first among all experts'
        (the passes before, the warps before, the lanes before), the segment written where they hold `target`;
        the passes' count advanced (counts below 2^31: the tiles of tokens < 2^31 rows)."""
        from mlir_tile.builder.integers import minimum, with_operators

        k, bm = self.k, self.config.bm
        inside = k.compare("ule", expert, experts)
        start, end, rows = self._expert_rows(expert, experts, inside)
        tiles = (rows + (bm - 1)) // bm
        summed = tiles
        for distance in (1, 2, 4, 8, 16):  # (the warp's inclusive sum: a lane adds the one `distance` below)
            below = k.as_index(k.shuffle(k.as_i32(summed), distance, "up"), unsigned_from="i32")
            summed = summed + k.select(k.compare("uge", k.lane_id(), distance), below, k.index(0))
        warp = k.warp_id()
        with k.if_(k.compare("eq", k.lane_id(), 31)):
            k.store(k.as_i32(summed), scratch, [warp])
        k.barrier()
        earlier, whole = with_operators(k.index(0)), with_operators(k.index(0))
        for other in range(warps):
            count = k.as_index(k.load(scratch, [other]), unsigned_from="i32")
            whole, earlier = whole + count, earlier + k.select(k.compare("ult", other, warp), count, k.index(0))
        passes = with_operators(k.as_index(k.load(before, [0]), unsigned_from="i32"))
        first = passes + earlier + summed - tiles
        holds = k.compare("ule", first, target) & k.compare("ult", target, first + tiles)
        with k.if_(inside & holds):
            row = start + (target - first) * bm
            for i, value in enumerate((expert, row, minimum(bm, end - row))):
                k.store(k.as_i32(value), scratch, [warps + i])
        k.store(k.as_i32(passes + whole), before, [0])
        k.barrier()  # (the next pass writes the warps' sums again)

    def _expert_rows(self, expert, experts, inside) -> tuple:
        """(first row, end row, rows) of `expert` (index values; no rows where not `inside`): its rows
        [offsets[e - 1], offsets[e]) (from 0 for the first; expert E's, the tail's, to the tokens' end), each clamped into [0, tokens] (contiguous: M; a
        ragged reduction: K, the tokens rounded up to `k_unit`, past which its 3-D maps read zeros), none where
        the end is not past the start (offsets out of order give empty experts or rows two experts claim, never
        a row outside the matrices)."""
        from mlir_tile.builder.integers import maximum, minimum, with_operators

        k = self.k
        offsets, tokens = self.groups[0], k.as_index(self.depth if self.config.ragged_k else self.m)
        last = experts - 1

        def clamped(index):  # offsets[index] (an index inside the experts), into [0, tokens] (a negative one: 0)
            offset = k.as_index(k.load(offsets, [index]), unsigned_from="i32")
            return with_operators(k.select(k.compare("uge", offset, 2 ** 31), k.index(0), minimum(offset, tokens)))

        end = with_operators(k.select(k.compare("eq", expert, experts), tokens, clamped(minimum(expert, last))))
        start = with_operators(k.select(k.compare("eq", expert, 0), k.index(0),
                                        clamped(minimum(with_operators(maximum(expert, 1)) - 1, last))))
        return start, end, with_operators(k.select(inside & k.compare("ugt", end, start), end - start, k.index(0)))

    def clipped_store_at(self, row0, column) -> tuple:
        """Contiguous: the coordinate of a C box of BM rows at tile row `row0` (`ragged_box`: the segment's rows
        stored, those past them left alone)."""
        return ragged_box(row0, self.segment[2], self.config.bm, column)


def ragged_box(first, rows, box_rows: int, column) -> tuple:
    """The coordinate (matrix, row, column) of a box of `box_rows` rows from row `first` of a matrix [R, N]
    through the 3-D map whose matrix j's row i is its row j + i - box_rows (matrices and rows one row apart, the
    map's address box_rows rows before the matrix's: `GroupedMatmul._plan`'s `ragged`), of which only the first
    `rows` (index values) are inside: at matrix first + rows, row box_rows - rows, the box's rows from `rows` on
    fall past the map's box_rows rows (a load reads zeros there, a store leaves them alone)."""
    from mlir_tile.builder.integers import with_operators

    rows = with_operators(rows)
    return (with_operators(first) + rows, box_rows - rows, column)
