"""Which tile a CTA takes and where a pipeline's stages are: the index arithmetic of a kernel's schedule, made
here once (CuTe DSL's tile schedulers and pipeline states), so that kernels hold none.

    order = TileOrder(k, (m, n), (128, 256), group=8)          # Triton's grouped order of the C tiles
    m_tile, n_tile = order.coordinate(k.block_id())
    ring = StageRing(k, shared, stages=4, parts=[("f16", 128 * 32), ("f16", 32 * 256)])
    a_stage, b_stage = ring.views(k_tile)                       # stage k_tile mod 4: its A and B tiles
"""
from __future__ import annotations

import functools
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, nvvm

from mlir_tile.builder.common import BuilderError, count, is_int, memref_value
from mlir_tile.builder.integers import with_operators
from mlir_tile.builder.tensor import Coordinates, Integer, as_integer, ceil_div, whole_tiles

_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "i8": 1}


def _operators(cls):
    """The class's public methods give their index and i1 values (alone or in a tuple) as `integers.Int` and
    `Bool`, which take Python's operators."""
    for name, method in list(vars(cls).items()):
        if not name.startswith("_") and callable(method):
            setattr(cls, name, _giving_operators(method))
    return cls


def _giving_operators(method):
    @functools.wraps(method)
    def call(*arguments, **keywords):
        result = method(*arguments, **keywords)
        return tuple(map(with_operators, result)) if isinstance(result, tuple) else with_operators(result)
    return call


def _pair(kernel, values, what: str, check) -> tuple:
    if not isinstance(values, (list, tuple)) or len(values) != 2:
        raise BuilderError(f"TileOrder: {what} are (rows, columns), got {values!r}")
    return tuple(check(kernel, v, f"TileOrder: {what}") if check is as_integer else check(v, f"TileOrder: {what}")
                 for v in values)


@_operators
class TileOrder:
    """The tiles of an `extents` (M x N) product in tiles of `tile`, in Triton's grouped order: `group` rows of
    tiles at a time, down each column of the group, then right (a group's tiles share rows of A and columns of
    B in L2). `count` is the number of tiles."""

    def __init__(self, kernel, extents: Sequence[Integer], tile: Sequence[int], group: int = 1):
        self.k, self.group = kernel, count(group, "TileOrder: group")
        self.extents, self.tile = _pair(kernel, extents, "extents", as_integer), _pair(kernel, tile, "tile", count)
        self.tiles_m, tiles_n = (kernel.as_index(ceil_div(kernel, e, t)) for e, t in zip(self.extents, self.tile))
        self.count = arith.muli(kernel.as_index(self.tiles_m), kernel.as_index(tiles_n))
        self.per_group = arith.muli(kernel.as_index(tiles_n), kernel.index(group))

    def coordinate(self, tile: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(row, column) of tile number `tile`, in tiles."""
        k = self.k
        tile = k.as_index(tile)
        first_m = arith.muli(arith.divui(tile, self.per_group), k.index(self.group))
        group_rows = k.minimum(arith.subi(self.tiles_m, first_m), self.group)
        within = arith.remui(tile, self.per_group)
        return arith.addi(first_m, arith.remui(within, group_rows)), arith.divui(within, group_rows)

    def origin(self, tile: ir.Value, inside: bool = False) -> tuple[ir.Value, ir.Value]:
        """The element coordinate of tile `tile`'s first element; `inside`: moved back so that the whole tile
        lies inside the extents (which must hold one tile: a persistent kernel's edge tiles, whose elements
        before the true origin are their neighbours')."""
        k = self.k
        origin = [arith.muli(c, k.index(t)) for c, t in zip(self.coordinate(tile), self.tile)]
        if inside:
            origin = [k.minimum(o, arith.subi(k.as_index(e), k.index(t))) for o, e, t in zip(origin, self.extents,
                                                                                            self.tile)]
        return tuple(origin)

    def persistent(self, together: int = 1) -> tuple[ir.Value, ir.Value]:
        """A persistent grid's walk for this CTA: (its first tile, how many it takes): CTA c of the grid's g
        takes tiles c, c + g, ... below `count`. `together`: the grid's CTAs in sets of that many consecutive
        ones (a cluster's) that take each tile together: set c of the g sets takes c, c + g, ..."""
        return persistent_walk(self.k, self.count, count(together, "TileOrder.persistent: together"))

    def step(self, tile: ir.Value) -> ir.Value:
        """The tile after `tile` in a persistent CTA's walk (maybe past the last)."""
        return arith.addi(self.k.as_index(tile), self.k.grid_size())

    def following(self, tile: ir.Value) -> ir.Value:
        """The tile after `tile` in a persistent CTA's walk, or `tile` itself past the last."""
        after = self.step(tile)
        return arith.select(self.k.compare("ult", after, self.count), after, self.k.as_index(tile))


@_giving_operators
def persistent_walk(kernel, items: ir.Value, together: int = 1) -> tuple[ir.Value, ir.Value]:
    """A persistent grid's walk over `items` work items: (this CTA's first, how many it takes), CTA c of the
    grid's g taking c, c + g, ... (`together`: sets of that many consecutive CTAs take each item together)."""
    k = kernel
    ctas, cta = k.grid_size(), k.block_id()
    if together > 1:
        ctas, cta = arith.divui(ctas, k.index(together)), arith.divui(cta, k.index(together))
    return cta, arith.divui(arith.addi(arith.subi(k.as_index(items), cta), arith.subi(ctas, k.index(1))), ctas)


@_operators
class QueryTiles:
    """(head, row tile) work items over `heads` x `extent` rows in tiles of `rows`: item b is row tile b mod
    tiles of head b / tiles; `reverse`: the last row tiles first (causal attention's longest rows, so that the
    short ones fill the tail). `heads`: how many (batch x heads); by default the grid's blocks, one an item.
    `paired` (a causal persistent walk): each head's row tiles longest and shortest in turn (i = b mod tiles is
    row tile tiles - 1 - i / 2 for even i, i / 2 for odd), and the walk deals them two at a time, so that each
    CTA's pairs weigh alike (a causal row tile's work grows with its index) and a round of the grid reads few
    heads' keys (a length-major order would balance too, but read every head's each round, past L2)."""

    def __init__(self, kernel, extent: ir.Value, rows: int, reverse: bool = False, heads: Integer | None = None,
                 paired: bool = False):
        self.k, self.rows, self.reverse = kernel, count(rows, "QueryTiles: rows"), bool(reverse)
        self.paired = bool(paired)
        self.count = kernel.as_index(ceil_div(kernel, as_integer(kernel, extent, "QueryTiles: extent"), rows))
        self.heads = (arith.divui(kernel.grid_size(), self.count) if heads is None
                      else kernel.as_index(as_integer(kernel, heads, "QueryTiles: heads")))
        self.items = arith.muli(self.heads, self.count)

    def persistent(self) -> tuple[ir.Value, ir.Value]:
        """A persistent grid's walk over the items (`persistent_walk`): (this CTA's first, how many items);
        its j-th item is `walked(first, j)`. Paired: the walk deals pairs of items, the last pair maybe one."""
        k = self.k
        if not self.paired:
            return persistent_walk(k, self.items)
        first, pairs = persistent_walk(k, ceil_div(k, self.items, 2))
        last = arith.addi(first, arith.muli(arith.subi(pairs, k.index(1)), k.grid_size()))
        in_last = k.minimum(arith.subi(self.items, arith.muli(last, k.index(2))), 2)  # (pairs > 0: the last's items)
        taken = arith.addi(arith.muli(arith.subi(pairs, k.index(1)), k.index(2)), in_last)
        return first, arith.select(k.compare("eq", pairs, 0), k.index(0), taken)

    def walked(self, first: ir.Value, j: ir.Value) -> ir.Value:
        """The item a persistent CTA whose walk starts at `first` takes j-th."""
        k = self.k
        if not self.paired:
            return arith.addi(first, arith.muli(k.as_index(j), k.grid_size()))
        pair = arith.addi(first, arith.muli(arith.divui(k.as_index(j), k.index(2)), k.grid_size()))
        return arith.addi(arith.muli(pair, k.index(2)), arith.remui(k.as_index(j), k.index(2)))

    def of_block(self, block: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(head, row tile) of work item (or grid block) `block`."""
        k = self.k
        block = k.as_index(block)
        head, tile = arith.divui(block, self.count), arith.remui(block, self.count)
        if self.paired:
            half, longer = arith.divui(tile, k.index(2)), k.compare("eq", arith.remui(tile, k.index(2)), 0)
            return head, arith.select(longer, arith.subi(arith.subi(self.count, k.index(1)), half), half)
        if self.reverse:
            tile = arith.subi(arith.subi(self.count, k.index(1)), tile)
        return head, tile


@_operators
class KeyTiles:
    """The key tiles attention's query rows [first_row, first_row + rows) of `extent` walk, `keys` a tile:
    all of them (`count`), or causal those up to its last row; the first `unmasked` of them have every key
    valid for every row (inside the sequence and, causal, at or below each row's diagonal). `between` makes
    the walk of rows that see intervals of keys: its tiles start at tile `first` (an index value; None: 0),
    and counted from there, those before `lead` and from `unmasked` on may hold a key some row does not see."""

    first = lead = None

    def __init__(self, kernel, extent: ir.Value, keys: int, first_row: ir.Value, *, rows: int, causal: bool):
        k = self.k = kernel
        self.keys, self.first_row = count(keys, "KeyTiles: keys"), k.as_index(first_row)
        rows, extent = count(rows, "KeyTiles: rows"), as_integer(k, extent, "KeyTiles: extent")
        self.count = k.as_index(ceil_div(k, extent, keys))
        self.unmasked = k.as_index(whole_tiles(k, extent, keys))
        if causal:
            self.count = k.minimum(self.count, ceil_div(k, arith.addi(first_row, k.index(rows)), keys))
            self.unmasked = k.minimum(self.unmasked, whole_tiles(k, first_row, keys))

    @classmethod
    def between(cls, kernel, keys: int, lowest: tuple, highest: tuple) -> "KeyTiles":
        """The key tiles of rows where row r sees keys [first(r), end(r)), both non-decreasing in r, each row
        some key: `lowest` (first, end) of the first row, `highest` of the last (index values; first None: 0).
        From first(first row)'s tile to end(last row)'s; every key of a tile from first(last row) on, and before
        end(first row), is seen by every row."""
        k, walk = kernel, cls.__new__(cls)
        walk.k, walk.keys = k, count(keys, "KeyTiles: keys")
        (low_first, low_end), (high_first, high_end) = lowest, highest
        walk.first = None if low_first is None else whole_tiles(k, low_first, walk.keys)
        relative = (lambda tile: tile) if walk.first is None else (lambda tile: arith.subi(tile, walk.first))
        walk.count = relative(ceil_div(k, high_end, walk.keys))
        if high_first is not None:
            walk.lead = relative(ceil_div(k, high_first, walk.keys))
        # (signed: end(first row) may end before the first tile of the walk, no tile unmasked then; or, keys
        # that break the rules, past end(last row)'s tile: no tile past the walk's)
        walk.unmasked = arith.maxsi(arith.minsi(relative(whole_tiles(k, low_end, walk.keys)), walk.count),
                                    k.index(0))
        walk.first, walk.count, walk.lead, walk.unmasked = map(with_operators, (walk.first, walk.count, walk.lead,
                                                                              walk.unmasked))
        return walk

    def part(self, begin: ir.Value, per: ir.Value) -> "KeyTiles":
        """The walk's tiles [begin, begin + per) (index values: split-KV's share of them), as a walk: `first`
        moved on by `begin`, `count` those of them there are (0 where the walk ends before `begin`), `unmasked`
        and `lead` counted from there."""
        from mlir_tile.builder.integers import maximum, minimum

        part = KeyTiles.__new__(KeyTiles)
        part.k, part.keys, part.first_row = self.k, self.keys, getattr(self, "first_row", None)
        begin = with_operators(self.k.as_index(begin))
        part.first = begin if self.first is None else self.first + begin
        part.count = minimum(maximum(with_operators(self.count) - begin, 0, signed=True), per)
        part.unmasked = minimum(maximum(with_operators(self.unmasked) - begin, 0, signed=True), part.count)
        part.lead = None if self.lead is None else maximum(with_operators(self.lead) - begin, 0, signed=True)
        return part

    def reaches(self, tile: ir.Value, warp: ir.Value, rows_per_warp: int) -> ir.Value:
        """Whether key tile `tile` starts at or before the last of warp `warp`'s rows (`rows_per_warp` each,
        in order): under the causal mask the warp has work in it (an i1, the same for the warp)."""
        k = self.k
        rows_end = arith.addi(self.first_row, arith.muli(arith.addi(k.as_index(warp), k.index(1)),
                                                         k.index(count(rows_per_warp, "rows_per_warp"))))
        return k.compare("ult", arith.muli(k.as_index(tile), k.index(self.keys)), rows_end)


@_operators
class SplitK:
    """Split-K: a grid of `splits` x the order's tiles; block b takes tile b mod tiles of split b / tiles,
    and split s the k-tiles from s * ceil(k_tiles / splits) on, that many or what is left."""

    def __init__(self, kernel, tiles: ir.Value, depth: Integer, tile_k: int, splits: ir.Value):
        self.k, self.tiles, self.splits = kernel, kernel.as_index(tiles), kernel.as_index(splits)
        self.depth, self.tile_k = as_integer(kernel, depth, "SplitK: depth"), count(tile_k, "SplitK: tile_k")

    def of_block(self, block: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(split, tile) of grid block `block`."""
        block = self.k.as_index(block)
        return arith.divui(block, self.tiles), arith.remui(block, self.tiles)

    def columns(self, split: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The split's columns of A: (first, last + 1)."""
        k, bk = self.k, self.tile_k
        split = k.as_index(split)
        k_tiles = k.as_index(ceil_div(k, self.depth, bk))
        per_split = arith.divui(arith.addi(k_tiles, arith.subi(self.splits, k.index(1))), self.splits)
        start = arith.muli(arith.muli(split, per_split), k.index(bk))
        extent = arith.maxsi(arith.minsi(arith.subi(k.as_index(self.depth), start), arith.muli(per_split, k.index(bk))),
                             k.index(0))
        return start, arith.addi(start, extent)


class ConsumerBarriers:
    """The named barriers warp-specialized consumers share (barrier 0 is the block's `bar.sync`): 1 meets every
    consumer warpgroup (`meet_all`), 2 + c and 3 - c are ping-pong's turns (CUTLASS's and FlashAttention-3's:
    consumer c waits on 2 + c for its turn, `wait_turn`, and gives the other its turn by arriving on 3 - c,
    `pass_turn`; 256 threads each), and 4 + c meets consumer c's own four warps (`meet`). The producer warpgroup
    never reaches them. Each index a constant: build a consumer's code once for each c."""

    ALL, TURNS, OWN = 1, 2, 4

    def __init__(self, kernel, consumers: int):
        self.k, self.consumers = kernel, count(consumers, "ConsumerBarriers: consumers", maximum=4)

    def meet_all(self) -> None:
        self.k.named_barrier(self.ALL, 128 * self.consumers)

    def wait_turn(self, consumer: int) -> None:
        self.k.named_barrier(self.TURNS + consumer, 256)

    def pass_turn(self, consumer: int) -> None:
        self.k.named_barrier_arrive(self.TURNS + 1 - consumer, 256)

    def meet(self, consumer: int) -> None:
        self.k.named_barrier(self.OWN + consumer, 128)

    def meet_own(self, consumer: ir.Value) -> None:
        """Each consumer's 4 warps meet (`meet`), `consumer` this thread's (an index value)."""
        self.in_consumers(consumer, range(self.consumers), self.meet)

    def wait_turns(self, consumer: ir.Value, skip: dict | None = None) -> None:
        """Ping-pong: this thread's consumer (`consumer`, 0 or 1) waits for its turn (`wait_turn`), except
        consumer c where skip[c] (an i1) holds."""
        self.in_consumers(consumer, (0, 1), lambda c: self._unless((skip or {}).get(c), self.wait_turn, c))

    def pass_turns(self, consumer: ir.Value, skip: dict | None = None) -> None:
        """Ping-pong: this thread's consumer gives the other its turn (`pass_turn`), except consumer c where
        skip[c] holds (each arrival is met by one wait)."""
        self.in_consumers(consumer, (0, 1), lambda c: self._unless((skip or {}).get(c), self.pass_turn, c))

    def in_consumers(self, consumer: ir.Value, consumers, act) -> None:
        """act(c) in consumer c's threads, for each c of `consumers` (a named barrier's index is a constant:
        its code is built once for each c)."""
        for c in consumers:
            with self.k.if_(self.k.compare("eq", consumer, c)):
                act(c)

    def _unless(self, skip, barrier, consumer: int) -> None:
        if skip is None:
            barrier(consumer)
            return
        with self.k.if_(arith.xori(skip, self.k.constant(True, "i1"))):
            barrier(consumer)


@_operators
class StageRing:
    """A pipeline's `stages` stages in one shared byte buffer from byte `start` on, each holding `parts`
    (element, count) tiles one after the other; k-tile t lives in stage (first + t) mod stages (`first`: a
    persistent kernel's rotation), as its (t / stages)-th occupant (`phase`). The buffer's alignment and the
    stage size keep every stage's swizzle in place. `narrow`: every k-tile asked about (with `ahead` and
    `first` added) lies below 2^31, which the caller proves (a count of tiles of a TMA-mapped extent, whose
    coordinates are signed 32-bit, say), and stages and phases are divided in 32 bits (in 64, ptxas divides by
    a constant with a multiply-high chain of 6 instructions)."""

    def __init__(self, kernel, buffer: ir.Value, stages: int, parts: Sequence[tuple[str, int]], start: int = 0,
                 narrow: bool = False):
        memref_value(buffer, "StageRing: buffer", "shared")
        if not isinstance(narrow, bool):
            raise BuilderError(f"StageRing: narrow is True or False, got {narrow!r}")
        self.k, self.buffer, self.stages, self.narrow = kernel, buffer, count(stages, "StageRing: stages"), narrow
        self.start = count(start, "StageRing: start", minimum=0)
        if (not isinstance(parts, (list, tuple)) or not parts
                or any(not isinstance(part, tuple) or len(part) != 2 or part[0] not in _BYTES for part in parts)):
            raise BuilderError(f"StageRing: parts are (element, count) with elements of {sorted(_BYTES)}, got {parts!r}")
        for _, elements in parts:
            count(elements, "StageRing: a part's elements")
        self.parts = list(parts)
        self.starts = [sum(_BYTES[e] * n for e, n in self.parts[:i]) for i in range(len(self.parts))]
        self.bytes = sum(_BYTES[e] * n for e, n in self.parts)

    def stage(self, k_tile: Integer, ahead: int = 0, first: ir.Value | None = None) -> ir.Value:
        """The stage of k-tile `k_tile` + `ahead`."""
        k, ahead = self.k, count(ahead, "StageRing: ahead", minimum=0)
        if is_int(k_tile) and first is None:
            return k.index((k_tile + ahead) % self.stages)
        at = k.as_index(k_tile) if not ahead else arith.addi(k.as_index(k_tile), k.index(ahead))
        if first is not None:
            at = arith.addi(k.as_index(first), at)
        return self._by_stages(arith.remui, at)

    def later(self, k_tile: ir.Value, ahead: int) -> ir.Value:
        """The k-tile `ahead` after `k_tile` (the one a pipelined step copies)."""
        return arith.addi(self.k.as_index(k_tile), self.k.index(count(ahead, "ahead", minimum=0)))

    def phase(self, k_tile: ir.Value) -> ir.Value:
        """How many k-tiles the stage of `k_tile` held before it (an mbarrier's phase, by its parity)."""
        return self._by_stages(arith.divui, self.k.as_index(k_tile))

    def _by_stages(self, divide, at: ir.Value) -> ir.Value:
        """divide(at, stages) (arith.remui or divui), in 32 bits where the ring is `narrow`."""
        k = self.k
        if not self.narrow:
            return divide(at, k.index(self.stages))
        narrowed = arith.index_castui(ir.IntegerType.get_signless(32), at)
        return arith.index_castui(ir.IndexType.get(), divide(narrowed, k.constant(self.stages)))

    def offset(self, stage: ir.Value, part: int = 0) -> ir.Value:
        """The first byte of the stage's tile `part`."""
        at = arith.muli(self.k.as_index(stage), self.k.index(self.bytes))
        first = self.start + self.starts[part]
        return arith.addi(at, self.k.index(first)) if first else at

    def views(self, stage: ir.Value, element: str | None = None) -> list[ir.Value]:
        """The stage's tiles as views of their elements (or all of `element`, e.g. i32 words for transfers)."""
        k = self.k
        views = [k.view(self.buffer, ((n * _BYTES[e]) // _BYTES[element or e],), element or e, self.offset(stage, part))
                 for part, (e, n) in enumerate(self.parts)]
        for view in views:  # (a wgmma batch reading one holds the stage until its wait)
            k.wgmma_groups.stage_view(view, id(self), self.stages, stage)
        return views

    def after(self, first: ir.Value, k_tiles: ir.Value) -> ir.Value:
        """The stage following `k_tiles` k-tiles from stage `first`."""
        k = self.k
        return self._by_stages(arith.remui, arith.addi(k.as_index(first), k.as_index(k_tiles)))


@_operators
class TmaPipeline:
    """A `StageRing` filled by TMA and read by consumers, its phases the library's (CUTLASS's PipelineTmaAsync,
    CuTe DSL's PipelineState): per stage a full barrier (the producer's `loads` arrivals, each with the bytes
    of its box) and an empty barrier (each of the `consumer_warps` warps' arrival once done with the stage).
    K-tile t uses stage t mod stages for the (t / stages)-th time; every wait's parity comes from t.

        pipeline.acquire(t)                    # producer: t's stage released by its previous k-tile's readers
        pipeline.load(t, tile, map, (row, column))   # a TMA load into the stage, counted on its full barrier
        pipeline.wait(t)                       # consumer: t's bytes have landed
        pipeline.release(t)                    # consumer (every thread of each consumer warp): done with t's stage

    `writers`: warps that fill a part of each stage themselves (shared-memory stores, e.g. `transpose_bytes`),
    each arriving on the full barrier once done (`written`) beside the loads.

    `multicast` (a clustered kernel): the cluster's CTAs fill each other's stages (`load(..., multicast=mask)`),
    so a stage is free only once the consumer warps of every CTA of the cluster released it: its empty
    barrier counts them all, and `release` arrives on the stage of every CTA.
    """

    def __init__(self, kernel, ring: StageRing, consumer_warps: int, loads: int, name: str = "pipeline",
                 multicast: bool = False, writers: int = 0):
        if not isinstance(ring, StageRing):
            raise BuilderError(f"TmaPipeline: a StageRing, got {ring!r}")
        if not isinstance(multicast, bool):
            raise BuilderError(f"TmaPipeline: multicast is True or False, got {multicast!r}")
        if multicast:
            kernel._clustered("TmaPipeline(multicast=True)")
        self.k, self.ring = kernel, ring
        self.ctas = kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2] if multicast else 1
        self.writers = count(writers, "TmaPipeline: writers", minimum=0)
        self.full = kernel.mbarriers(f"{name}_full", ring.stages, count(loads, "TmaPipeline: loads") + self.writers)
        warps = count(consumer_warps, "TmaPipeline: consumer_warps")
        self.empty = kernel.mbarriers(f"{name}_empty", ring.stages, warps * self.ctas)

    def acquire(self, k_tile: Integer) -> None:
        """Wait until k-tile `k_tile`'s stage is free: its previous occupant (k-tile - stages) released. The
        first round waits on the parity before a barrier's first phase, which counts as complete (no wait)."""
        k = self.k
        parity = arith.addi(self.ring.phase(k.as_index(k_tile)), k.index(1))
        k.wait_phase(self.empty, self.ring.stage(k_tile), parity)

    def load(self, k_tile: Integer, tile, tensor_map: ir.Value, coordinate: Sequence, multicast: int | None = None):
        """`Kernel.tma_load` of `tile` (a tensor of the stage's memory) at `coordinate` completing on k-tile
        `k_tile`'s full barrier, its bytes expected there (one of the `loads` arrivals; a peer's bytes may land
        first: the phase's transaction count goes below zero until then). `multicast`: a mask of the cluster's
        CTAs the box lands in, each of which loads a box of the same size into this stage with the same mask
        (CUTLASS's multicast, a tile split among the CTAs that share it): the arrival expects a box from each.
        Returns the box."""
        if multicast is not None and self.ctas == 1:
            raise BuilderError("[cluster] TmaPipeline.load: a multicast load fills peers' stages, which only a "
                               "TmaPipeline(..., multicast=True) waits for the peers to release")
        stage = self.ring.stage(k_tile)
        self.k._stage_freed(self.ring, k_tile, "TmaPipeline.load")
        box = self.k.tma_load(tile, tensor_map, coordinate, self.full, stage, multicast=multicast)
        self.k.expect_bytes(self.full, stage, box, copies=1 if multicast is None else bin(multicast).count("1"))
        return box

    def load_boxes(self, k_tile: Integer, buffer: ir.Value, at, layout, element: str, columns: int,
                   tensor_map: ir.Value, row, first_column=None, matrix=None) -> None:
        """A tile wider than a box: `load` of each of its boxes (`Kernel.boxes` of `columns` columns, side by
        side in `layout` from byte `at` of `buffer`) from `row` of `tensor_map` (of its `matrix`, a 3-D map's),
        their columns from `first_column` (None: 0) on."""
        k = self.k
        for column, box in k.boxes(buffer, at, layout, element, columns):
            at_column = k.index(column) if first_column is None else first_column + column
            self.load(k_tile, box, tensor_map, (row, at_column) if matrix is None else (matrix, row, at_column))

    def wait(self, k_tile: Integer) -> None:
        """Wait until every load of k-tile `k_tile` has landed in its stage."""
        self.k.wait_phase(self.full, self.ring.stage(k_tile), self.ring.phase(self.k.as_index(k_tile)))

    def written(self, k_tile: Integer) -> None:
        """This warp (one of the `writers`, every thread of it) has written its part of k-tile `k_tile`'s stage
        by generic-proxy stores: fenced for the async proxy (wgmma's operand reads), then the warp's arrival on
        the stage's full barrier. It acquires the stage first (`acquire`), as a producer does."""
        if not self.writers:
            raise BuilderError("TmaPipeline.written: the pipeline counts no writers (TmaPipeline(..., writers=N))")
        self.k.async_proxy_fence()
        self.k.arrive(self.full, self.ring.stage(k_tile), per_warp=True)

    def rewrite_from(self, staging: "TmaPipeline", k_tile: Integer, plan, buffer: ir.Value, part: int = 1) -> None:
        """The producer warpgroup's rewrite of k-tile `k_tile` (fp8's transposition, CUTLASS's and FlashAttention-3's
        producer-side transpose): once `staging`'s loads of it landed and this pipeline's stage is free,
        `plan` (a `byte_transpose.ByteTranspose`, `Kernel.transpose_bytes`) writes it from `staging`'s stage into
        this stage's `part` (of the shared byte `buffer`), counted on the stage's full barrier (`written`: one
        of its `writers`); `staging`'s stage then released."""
        staging.wait(k_tile)
        self.acquire(k_tile)
        self.k.transpose_bytes(plan, buffer, staging.ring.offset(staging.ring.stage(k_tile)),
                               self.ring.offset(self.ring.stage(k_tile), part))
        self.written(k_tile)
        staging.release(k_tile)

    def release(self, k_tile: Integer) -> None:
        """This warp is done reading k-tile `k_tile`'s stage (its wgmma groups retired: `wgmma_wait`); called
        by every thread of each consumer warp. Multicast: lane r arrives on CTA r's stage."""
        k, stage = self.k, self.ring.stage(k_tile)
        k._stage_freed(self.ring, k_tile, "TmaPipeline.release")
        if self.ctas == 1:
            k.arrive(self.empty, stage, per_warp=True)
            return
        nvvm.bar_warp_sync(k.constant(-1))  # the warp's reads ordered before its lanes' arrivals
        with k.if_(k.compare("ult", k.lane_id(), self.ctas)):
            k.arrive_remote(self.empty, stage, k.lane_id())


def predicate_free_steps(kernel, tile: Coordinates, extents: Sequence[int], k_tiles: Coordinates, ahead: int) -> ir.Value:
    """How many steps of a pipeline `ahead` k-tiles deep copy with no predicate (CUTLASS's predicate-free main
    loop): where the CTA's `extents` tile from `tile`'s first coordinate lies inside the matrix, the steps
    whose copied k-tile lies wholly inside K (`k_tiles`: the first k-tile's coordinates, K its last
    dimension), else none."""
    k = kernel
    if not isinstance(tile, Coordinates) or not isinstance(k_tiles, Coordinates):
        raise BuilderError("predicate_free_steps: the tile's and the k-tile's coordinates are identity tensors")
    whole = k.as_index(whole_tiles(k, k_tiles.residue()[-1], k_tiles.shape[-1]))
    inside_k = arith.subi(whole, k.index(ahead))
    interior = arith.andi(tile.holds(extents), k.compare("sge", inside_k, 0))
    return arith.select(interior, inside_k, k.index(0))


class PersistentSteps:
    """A persistent pipeline's steps over one tile's `k_tiles` (its first k-tile's coordinates, K the last
    dimension), each copying the k-tile `ahead` after its own: up to `inside_k` that k-tile lies wholly inside
    K, up to `last_copies` it is this tile's, and from there on the next tile's first ones
    (`of_next_tile`)."""

    def __init__(self, kernel, k_tiles: Coordinates, tile_k: int, ahead: int):
        k = self.k = kernel
        if not isinstance(k_tiles, Coordinates):
            raise BuilderError("PersistentSteps: the first k-tile's coordinates are an identity tensor")
        extent = k_tiles.residue()[-1]
        tile_k, ahead = count(tile_k, "PersistentSteps: tile_k"), count(ahead, "PersistentSteps: ahead", minimum=0)
        self.k_tiles = k.as_index(ceil_div(k, extent, tile_k))
        self.inside_k = arith.subi(k.as_index(whole_tiles(k, extent, tile_k)), k.index(ahead))
        self.last_copies = arith.subi(self.k_tiles, k.index(ahead))

    def of_next_tile(self, k_tile: ir.Value) -> ir.Value:
        """The next tile's k-tile that step `k_tile` (one of the last) copies."""
        return arith.subi(self.k.as_index(k_tile), self.last_copies)
