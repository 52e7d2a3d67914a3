"""Packed variable-length batches on Hopper's attention path (FlashAttention's varlen convention): q [total_q,
heads, d], k and v [total_k, kv_heads, d], sequence b's queries rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] and
its keys rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] (int32 on the device, so that a CUDA graph replays a call
with other lengths). Causal is aligned to the bottom right where the lengths differ: query i of a sequence sees
its keys up to i + len_k - len_q (FlashAttention's and issue 61's convention); a row that sees no key has O 0 and
a log-sum-exp of -inf.

To TMA the packed tensors are 2-D maps over [tokens, heads x d]: a tile of a sequence is the box at (its first
token + row, head x d + column). Where it reaches past the sequence it reads the next one's rows (or TMA's zeros
past the last token): their keys are masked (the bound is the sequence's length) and their query rows are not
stored, which is why O goes by row-predicated stores from the registers, not by a TMA box that would write into
the next sequence's rows (FlashAttention-3's `Use_TMA_O` is off for varlen for the same reason).
"""
from __future__ import annotations

from mlir_tile.kernels.common import output_element
from mlir_tile.kernels.flash.sm90_tiles import ROW_BYTES


class Sequence:
    """Sequence `batch`'s bounds, read from cu_seqlens_q and cu_seqlens_k (Global i32 arguments) and clamped
    into the tensors' `total_q` and `total_k` rows (offsets past them, or out of order, make a shorter or empty
    sequence, never a write outside O or the log-sum-exp): its first query and key rows (`q_start`, `k_start`),
    its lengths, and `shift` = len_k - len_q (an index value read as signed: the bottom-right causal diagonal's
    offset). `key_lengths` (paged K/V): cu_seqlens_k holds each sequence's count of keys, not offsets (its keys
    lie on its pages, `Pages`, from key 0), read signed and clamped to [0, `total_k`], the most its block table's
    row holds (so the host passes a cache's lengths as they are: a negative one is no key, not every key)."""

    def __init__(self, kernel, cu_seqlens_q, cu_seqlens_k, batch, total_q, total_k, key_lengths: bool = False):
        from mlir_tile.builder.integers import with_operators

        k = self.k = kernel

        def bounds(offsets, total):  # (unsigned: a negative offset is past any total)
            end = k.minimum(k.as_index(k.load(offsets, [batch + 1]), unsigned_from="i32"), total)
            start = k.minimum(k.as_index(k.load(offsets, [batch]), unsigned_from="i32"), end)
            return with_operators(start), with_operators(end - start)
        self.q_start, self.q_length = bounds(cu_seqlens_q, total_q)
        if key_lengths:
            self.k_start = with_operators(k.index(0))
            count = k.as_index(k.load(cu_seqlens_k, [batch]), signed_from="i32")
            self.k_length = with_operators(k.minimum(k.maximum(count, 0, signed=True), total_k))
        else:
            self.k_start, self.k_length = bounds(cu_seqlens_k, total_k)
        self.shift = self.k_length - self.q_length

    def key_tiles(self, keys: int, first_row, rows: int, causal: bool, share: tuple | None = None):
        """The key tiles (`KeyTiles`) query rows [first_row, first_row + rows) of the sequence walk: its keys
        (causal: up to each row's diagonal, the walk's first row clamped at 0 where the diagonal starts before
        the keys), or of those the tiles [begin, begin + per) of `share` (split-KV's), one tile at least, so
        that rows that see no key walk a tile that is all masked (O 0, log-sum-exp -inf) rather than none (a
        share past the walk's end: a tile past its keys, or past the rows' diagonals)."""
        from mlir_tile.builder.integers import maximum
        from mlir_tile.builder.schedule import KeyTiles

        k = self.k
        first = maximum(first_row + self.shift, 0, signed=True) if causal else first_row
        walk = KeyTiles(k, self.k_length, keys, first, rows=rows, causal=causal)
        if share is not None:
            walk = walk.part(*share)
        walk.count = k.maximum(walk.count, 1)
        return walk

    def between(self, keys: int, lowest: tuple, highest: tuple, share: tuple | None = None):
        """The key tiles (`KeyTiles.between`) of rows whose keys run from `lowest` (first, end) of the first row
        to `highest` of the last (`clamped`), or of those `share`'s, one tile at least (as `key_tiles`)."""
        from mlir_tile.builder.integers import maximum
        from mlir_tile.builder.schedule import KeyTiles

        walk = KeyTiles.between(self.k, keys, lowest, highest)
        if share is not None:
            walk = walk.part(*share)
        walk.count = maximum(walk.count, 1, signed=True)  # (signed: keys that break the rules may end before
        # they begin)
        return walk

    def position(self, query):
        """Query `query`'s position among the sequence's keys: query + len_k - len_q (signed)."""
        return query + self.shift

    def clamped(self, interval: tuple) -> tuple:
        """A variant's keys (first, end) of a row clamped into the sequence's [0, len_k] (signed): first None
        where it has none (every row's first key 0)."""
        from mlir_tile.builder.integers import maximum, minimum

        first, end = interval
        if first is not None:
            first = minimum(maximum(first, 0, signed=True), self.k_length, signed=True)
        return first, minimum(maximum(end, 0, signed=True), self.k_length, signed=True)

    def key_end(self, query, causal: bool):
        """One past the last key query row `query` of the sequence sees (signed: at or below 0 where it sees
        none)."""
        from mlir_tile.builder.integers import minimum

        return minimum(self.k_length, query + 1 + self.shift, signed=True) if causal else self.k_length


class Pages:
    """Paged K/V (FlashAttention's and vLLM's block table): K and V a pool of `pages` pages of `page_size` token
    rows each (2-D maps over [pages x page_size, kv_heads x d]), sequence `batch`'s key i on page
    block_table[batch x pages_per_sequence + i / page_size] (int32 on the device), at row i mod page_size of it.
    A key past the table's row, or on a page id past the pool (a negative one included: read unsigned), is
    read at the pool's end, where TMA fills the box with zeros: a bad table gives wrong keys inside the
    sequence, never a read outside the pool (keys past the sequence are masked)."""

    def __init__(self, kernel, block_table, pages_per_sequence, page_size, pages, batch):
        from mlir_tile.builder.integers import with_operators

        self.k = kernel
        self.table, self.page_size, self.pages = block_table, with_operators(page_size), pages
        self.pages_per_sequence = with_operators(pages_per_sequence)
        self.first_entry = with_operators(batch) * self.pages_per_sequence
        self.pool_rows = self.page_size * pages

    def rows(self, key, boxes: int, rows: int) -> list:
        """The pool rows (index values) of `boxes` boxes of `rows` keys each from the sequence's key `key` on (an
        index value counted from its first, a multiple of `rows`, which divides the page size): one division,
        then each next box's page and place in it carried on (a box reaching the page's end starts the next
        page), a 64-bit division a box having been most of a paged tile's producer instructions."""
        from mlir_tile.builder.integers import with_operators

        k = self.k
        page_index, within = with_operators(key // self.page_size), with_operators(key % self.page_size)
        found = []
        for box in range(boxes):
            if box:
                within = within + rows
                wrapped = k.compare("eq", within, self.page_size)
                page_index = with_operators(k.select(wrapped, page_index + 1, page_index))
                within = with_operators(k.select(wrapped, k.index(0), within))
            found.append(self._row(page_index, within))
        return found

    def _row(self, page_index, within):
        """The pool row of place `within` on the sequence's page `page_index` (its block table's entry)."""
        k = self.k
        inside = k.compare("ult", page_index, self.pages_per_sequence)
        entry = k.select(inside, self.first_entry + page_index, self.first_entry)  # (a load inside the row)
        page = k.as_index(k.load(self.table, [entry]), unsigned_from="i32")
        on_pool = inside & k.compare("ult", page, self.pages)
        return k.select(on_pool, page * self.page_size + within, self.pool_rows)


class PackedItems:
    """The Hopper kernel's (`sm90._HopperAttention`'s) items over packed sequences: an item's sequence and head,
    its paged K/V loads, its rows of O and of the log-sum-exp. With `pack_gqa` (FlashAttention-3's), an item is
    the `group` query heads of one K/V head, its rows (query, head) pairs: row r of its tiles is query r / group
    of query head kv_head x group + r mod group, so that at decode one tile holds a group's queries rather than
    one head's few, and K and V are read once a group. Q's band of 64 rows is then one 3-D box of 64 / group
    tokens of `group` heads each (the map over [total_q, heads, d]: the group's heads of a token lie together)."""

    def locate_in_sequence(self) -> None:
        """The item's (batch x heads + head, or x K/V heads with pack_gqa) split, its sequence's bounds
        (`Sequence`) and pages (`Pages`), its rows inside the sequence (`q_rows`), Q's origin (the sequence's
        first token, the head's first column), K's and V's (its K/V head's), the log-sum-exp's rows
        ([heads, total_q]), the key tiles of the item's rows."""
        k, config = self.k, self.config
        heads = k.as_index(self.heads)
        items = heads // self.group if config.pack_gqa else heads
        batch, self.head = self.head // items, self.head % items
        self.sequence = Sequence(k, self.cu_seqlens_q, self.cu_seqlens_k, batch, k.as_index(self.total_q),
                                 k.as_index(self.total_k), key_lengths=bool(config.page_rows))
        if config.page_rows:
            table, *shape = self.paging
            self.pages = Pages(k, table, *(k.as_index(x) for x in shape), batch)
        if config.pack_gqa:
            self.q_rows = self.sequence.q_length * self.group
            self.kv_origin = (self.sequence.k_start, self.head * self.d)
        else:
            self.q_rows = self.sequence.q_length
            self.q_origin = (self.sequence.q_start, self.head * self.d)
            self.kv_origin = (self.sequence.k_start, self.head // self.group * self.d)
        if config.pack_gqa or config.split_kv:  # (split-KV: [splits x heads, total_q])
            self.g_lse = k.tensor(self.lse, (k.as_index(self.splits) * heads if config.split_kv else heads,
                                             self.total_q))
        else:
            self.g_lse = k.tensor(self.lse, (heads, self.total_q))[self.head, None]
        self.batch = batch
        self.share = None
        self.key_tiles = self.consumer_key_tiles(self.q0, config.rows, config.causal)
        self.walk = self.key_tiles  # (the item's, all its splits')
        if config.split_kv:  # (this split's share of the item's key tiles)
            per = (self.key_tiles.count + (k.as_index(self.splits) - 1)) // k.as_index(self.splits)
            self.share = (self.split * per, per)
            self.key_tiles = self.consumer_key_tiles(self.q0, config.rows, config.causal)

    def consumer_key_tiles(self, first_row, rows: int = 64, causal: bool = True):
        """The key tiles of the item's rows [first_row, first_row + rows) (`Sequence.key_tiles`; of its split's
        share): with pack_gqa those of their queries (fewer than `rows`, which bounds the causal tiles from
        above)."""
        first_query = self.split_row(first_row)[0] if self.config.pack_gqa else first_row
        if self.keys_of_rows:  # (the variant's keys of the first row and of the last inside the sequence)
            last = self.k.minimum(first_row + rows, self.q_rows) - 1
            last_query = self.split_row(last)[0] if self.config.pack_gqa else last
            lowest, highest = (self.query_keys(query) for query in (first_query, last_query))
            return self.sequence.between(self.config.keys, lowest, highest, self.share)
        return self.sequence.key_tiles(self.config.keys, first_query, rows, causal, self.share)

    def split_row(self, packed) -> tuple:
        """pack_gqa: (the query, the head within the group) of the item's row `packed` (an index value): the
        group divides 64, a power of two, so a shift by its log2 and a mask (made from the group, a kernel
        parameter, where used: held from the item's start, they spilled d 256's consumers)."""
        from mlir_tile.builder.integers import with_operators

        k, group = self.k, with_operators(self.group)
        shift = with_operators(k.index(0))
        for bit in range(1, 7):  # (log2 of the group: the powers of two it reaches)
            shift += k.select(k.compare("uge", group, 1 << bit), k.index(1), k.index(0))
        return packed >> shift, packed & (group - 1)

    def query_keys(self, query) -> tuple:
        """(first, end): the variant's keys of the sequence's query `query`, at its position among the keys,
        clamped into them (`Sequence.clamped`)."""
        sequence = self.sequence
        return sequence.clamped(self.variant.key_interval(self.k, sequence.position(query), sequence.k_length,
                                                          self.extras))

    def walk_covers(self, row):
        """Whether the item's walk (all its splits') holds every key the variant gives the item's `row`, and the
        row sees every key of the tiles the walk takes unmasked (past its first and `lead`, before `unmasked`)
        (an i1): the host checks that the keys are non-decreasing in the row at the longest length and the
        shorter ones up to `variants.SHORTER_CHECKED` only, and where they are not at this one a row gets O NaN,
        not a silently wrong result."""
        from mlir_tile.builder.integers import maximum

        k, walk, keys = self.k, self.walk, self.config.keys
        first, end = self.row_keys(row)
        lowest, beyond = walk.first * keys, (walk.first + walk.count) * keys
        inside = k.compare("sge", first, end) | (k.compare("sge", first, lowest) & k.compare("sle", end, beyond))
        lead = 1 if walk.lead is None else maximum(walk.lead, 1, signed=True)
        whole_from, whole_to = (walk.first + lead) * keys, (walk.first + walk.unmasked) * keys
        seen = k.compare("sle", first, whole_from) & k.compare("sge", end, whole_to)
        return inside & (k.compare("sge", whole_from, whole_to) | seen)

    def row_head_values(self) -> None:
        """pack_gqa (a consumer's): the variant's "head" operands' values at the query heads of the thread's two
        rows, which the item's group of heads shares out (row r's head r mod group), for `head_values`."""
        if self.config.pack_gqa and self.variant is not None and self.variant.operands:
            heads = self.k.as_index(self.heads)
            rows = (self.s_acc.coordinate(self.s_halves.index(half))[0] for half in range(2))
            self.head_values = tuple(self.variant.head_values(self.k, self.batch * heads + self.row_place(row)[2],
                                                              self.extras) for row in rows)

    def q_band_at(self, consumer: int) -> tuple:
        """(the matrix or None, the row, the first column) of the consumer's band of Q: row q0 + 64 consumer of
        the head's rows, or with pack_gqa token (q0 + 64 consumer) / group of the group's first head."""
        row = self.q0 + 64 * consumer
        if self.config.pack_gqa:
            return self.sequence.q_start + self.split_row(row)[0], self.head * self.group, None
        return None, self.q_origin[0] + row, self.q_origin[1]

    def row_place(self, row) -> tuple:
        """(whether the item's `row` (of the accumulators' tile) lies inside the sequence, its query, its query
        head)."""
        k = self.k
        if not self.config.pack_gqa:
            query = self._query(row)
            return k.compare("ult", query, self.sequence.q_length), query, self.head
        packed = self.q0 + (self.consumer * 64 + row)
        query, head = self.split_row(packed)
        return k.compare("ult", packed, self.q_rows), query, self.head * self.group + head

    def store_lse(self, row, log_sum) -> None:
        """The row's log-sum-exp, where the row lies inside the sequence, by the first lane of its quad."""
        inside, query, head = self.row_place(row)
        with self.k.if_(self.k.leads_lanes(4) & inside):
            if self.config.pack_gqa or self.config.split_kv:
                if self.config.split_kv:
                    head = self.split * self.k.as_index(self.heads) + head
                self.g_lse[head, self.sequence.q_start + query] = log_sum
            else:
                self.g_lse[self.sequence.q_start + query] = log_sum

    def load_pages(self, index, key) -> None:
        """Paged K/V (its stage free): the key tile from key `key` on as boxes of `page_rows` rows, each box's K
        and V from its page's rows (`Pages.rows`: the tile's block table entries, read together once the stage
        is free; read before the stage's wait they had spilled the producer's registers); fp8, V's into its
        staging stage once the transposer is done with that."""
        ring, rows, column = self.ring, self.config.page_rows, self.kv_origin[1]
        stage, staged = ring.stage(index), None
        if self.config.fp8:
            self.staging.acquire(index)
            staged = self.staging_ring.offset(self.staging_ring.stage(index))
        for box, row in enumerate(self.pages.rows(key, self.config.keys // rows, rows)):
            for part, tensor_map in enumerate((self.k_map, self.v_map)):
                pipeline, at = (self.staging, staged) if part and staged is not None else (
                    self.pipeline, ring.offset(stage, part))
                self.load_boxes(pipeline, index, at + box * rows * ROW_BYTES, "k_page", tensor_map, row, column)

    def store_o_rows(self, inverses) -> None:
        """O's rows inside the sequence stored from the registers into O [total_q, heads x d] (`o_map`: its
        16-bit pairs; `store_rows`: a box would write into the next sequence's rows); split-KV, into this
        split's fp32 O [splits, total_q, heads x d]."""
        from mlir.dialects import arith

        k, d, sequence, split = self.k, self.d, self.sequence, self.config.split_kv
        per_word = 1 if split else 2  # (elements a 4-byte word)
        words = k.as_index(self.heads) * (d // per_word)  # (a token's row of O in 4-byte words)
        first_token = self.split * k.as_index(self.total_q) + sequence.q_start if split else sequence.q_start

        def first_word(row):
            inside, query, head = self.row_place(row)
            return inside, (first_token + query) * words + head * (d // per_word)
        store_rows(k, self.o_acc, self.o_map, "f32" if split else output_element(self.config.element), first_word,
                   lambda half, x: arith.mulf(x, inverses[half]))


def store_rows(kernel, accumulators, out, element: str, first_word, value) -> None:
    """A warpgroup's 64 x N accumulators (`Accumulators`) rounded to `element` and stored from the registers into
    the global 16-bit tensor `out` (a Global of i32: pairs) as 4-byte words, each pair a row's two columns side by
    side (`element` "f32": into the fp32 tensor `out`, a word an element): `first_word(row)` of each of the
    thread's two rows (an index value of the accumulators' tile) gives (whether the row is stored, an i1; the
    word of its column 0), `value(half, x)` each element before rounding. ValueError where the atom's slots 2i
    and 2i + 1 are not one row's neighbours."""
    from mlir_tile.kernels.flash.sm90_layouts import column_steps, row_halves

    k, atom = kernel, accumulators.atom
    columns, halves = column_steps(atom), row_halves(atom)
    slots = range(0, atom.shape[1] // 2, 2)
    if any(columns[s + 1] != columns[s] + 1 or halves[s + 1] != halves[s] for s in slots):
        raise ValueError(f"hopper attention: {atom.name}'s slots 2i and 2i + 1 are not one row's two columns side "
                         f"by side")
    for half in range(2):
        row, _ = accumulators.coordinate(halves.index(half))
        stored, first = first_word(row)
        with k.if_(stored):
            for slot in (s for s in slots if halves[s] == half):
                _, column = accumulators.coordinate(slot)
                pair = [value(half, k.load(accumulators.registers, [slot + i])) for i in range(2)]
                if element == "f32":
                    for i, x in enumerate(pair):
                        k.store(x, out, [first + (column + i)])
                else:
                    k.store(k.pack_f16(*pair, element), out, [first + column // 2])
