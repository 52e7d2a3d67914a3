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


class Sequence:
    """Sequence `batch`'s bounds, read from cu_seqlens_q and cu_seqlens_k (Global i32 arguments) and clamped
    into the tensors' `total_q` and `total_k` rows (offsets past them, or out of order, make a shorter or empty
    sequence, never a write outside O or the log-sum-exp): its first query and key rows (`q_start`, `k_start`),
    its lengths, and `shift` = len_k - len_q (an index value read as signed: the bottom-right causal diagonal's
    offset). `key_lengths` (paged K/V): cu_seqlens_k holds each sequence's count of keys, not offsets (its keys
    lie on its pages, `Pages`, from key 0), clamped to `total_k`, the most its block table's row holds."""

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
            self.k_length = with_operators(k.minimum(k.as_index(k.load(cu_seqlens_k, [batch]), unsigned_from="i32"),
                                                     total_k))
        else:
            self.k_start, self.k_length = bounds(cu_seqlens_k, total_k)
        self.shift = self.k_length - self.q_length

    def key_tiles(self, keys: int, first_row, rows: int, causal: bool):
        """The key tiles (`KeyTiles`) query rows [first_row, first_row + rows) of the sequence walk: its keys
        (causal: up to each row's diagonal, the walk's first row clamped at 0 where the diagonal starts before
        the keys), one tile at least, so that rows that see no key walk a tile that is all masked (O 0,
        log-sum-exp -inf) rather than none."""
        from mlir_tile.builder.integers import maximum
        from mlir_tile.builder.schedule import KeyTiles

        k = self.k
        first = maximum(first_row + self.shift, 0, signed=True) if causal else first_row
        walk = KeyTiles(k, self.k_length, keys, first, rows=rows, causal=causal)
        walk.count = k.maximum(walk.count, 1)
        return walk

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

    def row(self, key):
        """The pool row (an index value) of the sequence's key `key` (an index value counted from its first)."""
        k = self.k
        page_index = key // self.page_size
        inside = k.compare("ult", page_index, self.pages_per_sequence)
        entry = k.select(inside, self.first_entry + page_index, self.first_entry)  # (a load inside the row)
        page = k.as_index(k.load(self.table, [entry]), unsigned_from="i32")
        on_pool = inside & k.compare("ult", page, self.pages)
        return k.select(on_pool, page * self.page_size + key % self.page_size, self.pool_rows)


def store_rows(kernel, accumulators, out, element: str, first_word, value) -> None:
    """A warpgroup's 64 x N accumulators (`Accumulators`) rounded to `element` and stored from the registers into
    the global 16-bit tensor `out` (a Global of i32: pairs) as 4-byte words, each pair a row's two columns side by
    side: `first_word(row)` of each of the thread's two rows (an index value of the accumulators' tile) gives
    (whether the row is stored, an i1; the word of its column 0), `value(half, x)` each element before rounding.
    ValueError where the atom's slots 2i and 2i + 1 are not one row's neighbours."""
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
                k.store(k.pack_f16(*pair, element), out, [first + column // 2])
