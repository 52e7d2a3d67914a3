"""The Hopper GEMM's (`sm90._HopperGemm`'s) grouped forms, a mixin: the masked layout (groups of T rows, each
group's first counts[e] rows computed: `counted`) and the contiguous one (experts' rows sorted one after another,
torch._grouped_mm's offsets: each C tile's expert and rows located by a scan of the offsets before the roles split,
`locate_segment`, and C's stores clipped at the expert's last row through a 3-D map, `clipped_store_at`). It reads
the kernel's `k`, `config`, `groups`, `m`, `n` and `order`."""
from __future__ import annotations


class GroupedSteps:
    def group_of(self, origin) -> tuple:
        """Grouped: (the group of the C tile at `origin`, its first row within the group: masked, T rows a
        group, BM dividing T, so a tile never straddles two groups; contiguous, the located segment's expert and
        None)."""
        from mlir_tile.builder.integers import with_operators

        if self.config.contiguous:
            return self.segment[0], None
        k = self.k
        row0, rows = with_operators(k.as_index(origin[0])), with_operators(k.as_index(self.groups[1]))
        return row0 // rows, row0 % rows

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
        """The order's rows (an index value): M's, or (contiguous) BM x (ceil(tokens / BM) + E), the most row
        tiles E experts' rows can take (expert e's ceil(rows_e / BM))."""
        from mlir_tile.builder.integers import with_operators

        if not self.config.contiguous:
            return self.m
        k, bm = self.k, self.config.bm
        tokens, experts = (with_operators(k.as_index(x)) for x in (self.m, self.groups[1]))
        return ((tokens + (bm - 1)) // bm + experts) * bm

    def locate_segment(self, tile) -> None:
        """Contiguous: `segment`, the (expert, first row, rows) of the order's row tile of `tile` (index values;
        rows 0 past the experts' tiles), every thread taking part before the roles split. A pass counts the
        row tiles of `threads` experts, one a thread (`_count_tiles`), sums them over each warp by shuffles and
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
        with k.loop(0, (experts + (config.threads - 1)) // config.threads) as turn:
            expert = with_operators(k.as_index(turn)) * config.threads + k.thread_id()
            self._count_in_pass(expert, experts, target, before, scratch, warps)
        k.barrier()
        self.segment = [k.as_index(k.load(scratch, [warps + i]), unsigned_from="i32") for i in range(3)]

    def _count_in_pass(self, expert, experts, target, before, scratch, warps: int) -> None:
        """One pass of `locate_segment`: `expert`'s row tiles (this thread's), their first among all experts'
        (the passes before, the warps before, the lanes before), the segment written where they hold `target`;
        the passes' count advanced (counts below 2^31: the tiles of tokens < 2^31 rows)."""
        from mlir_tile.builder.integers import minimum, with_operators

        k, bm = self.k, self.config.bm
        inside = k.compare("ult", expert, experts)
        start, end, tiles = self._count_tiles(expert, experts, inside)
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

    def _count_tiles(self, expert, experts, inside) -> tuple:
        """(first row, end row, row tiles) of `expert` (index values; no tiles where not `inside`): its rows
        [offsets[e - 1], offsets[e]) (from 0 for the first), each clamped into [0, tokens], none where the end
        is not past the start (offsets out of order give empty experts or rows two experts claim, never a row
        outside C)."""
        from mlir_tile.builder.integers import maximum, minimum, with_operators

        k, bm = self.k, self.config.bm
        offsets, tokens = self.groups[0], k.as_index(self.m)
        last = experts - 1

        def clamped(index):  # offsets[index] (an index inside the experts), into [0, tokens] (a negative one: 0)
            offset = k.as_index(k.load(offsets, [index]), unsigned_from="i32")
            return with_operators(k.select(k.compare("uge", offset, 2 ** 31), k.index(0), minimum(offset, tokens)))

        end = clamped(minimum(expert, last))
        start = with_operators(k.select(k.compare("eq", expert, 0), k.index(0),
                                        clamped(minimum(with_operators(maximum(expert, 1)) - 1, last))))
        rows = k.select(inside & k.compare("ugt", end, start), end - start, k.index(0))
        return start, end, (with_operators(rows) + (bm - 1)) // bm

    def clipped_store_at(self, row0, column) -> tuple:
        """Contiguous: the coordinate (matrix, row, column) of a C box of BM rows at tile row `row0` through the
        3-D map over C [tokens, N] whose matrix j's row i is C's row j + i - BM (matrices and rows one row apart,
        its address BM rows before C's: `GroupedMatmul`): at matrix row0 + rows and row BM - rows, the box's rows
        from the segment's `rows` on fall past the map's BM rows, which the store leaves alone."""
        from mlir_tile.builder.integers import with_operators

        rows = with_operators(self.segment[2])
        return (with_operators(row0) + rows, self.config.bm - rows, column)
