"""Attention of new queries against a KV cache (FlashAttention's `flash_attn_with_kvcache` convention, Hopper's
path): per-sequence cache lengths on the device, new keys and values appended in place, GQA, causal aligned to
each sequence's last key, the cache [batch, seq_cache, kv_heads, d] or paged (a pool of pages and a block
table, vLLM's). A cache of one entry a sequence needs no kernel of its own: the packed kernels
(`attention_cached`, `attention_varlen`'s launch) read it where it lies, sequence b's keys rows b x
rows_per_entry to that + its length, each sequence followed by an empty one whose keys are the cache's unused
rows up to the next entry (`cache_offsets`), so that one int32 offset array made on the device bounds them all
(split-KV shares out by the entries, not the empty ones). A paged cache goes to the packed kernels' paged form
(`attention_paged`, `sm90_varlen.Pages`). Nothing waits on the host: a CUDA graph holds the call."""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from mlir_tile.kernels.flash.launch import kept_per_shape, sequence_offsets
from mlir_tile.kernels import variant_ops
from mlir_tile.kernels.common import Plans
from mlir_tile.kernels.flash.packed import checked_paged, descale_addresses, entries_as_pages, token_rows
from mlir_tile.kernels.flash.sm90_tiles import FP8_HEAD_DIMS, HEAD_DIMS
from mlir_tile.kernels.flash.variants import variant_arguments
from mlir_tile.kernels.registry import kernels_on, no_backward, plain_call, register_operator
from mlir_tile.runtime import torch_stream


def attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens,
                           k_new: Optional[torch.Tensor] = None, v_new: Optional[torch.Tensor] = None, *,
                           causal: bool = True, block_table: Optional[torch.Tensor] = None, variant=None,
                           operands=(), descale_q=None, descale_k=None,
                           descale_v=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """(o [batch, seq_q, heads, d], lse [batch, heads, seq_q] fp32) of q [batch, seq_q, heads, d] against the
    first cache_seqlens[b] keys and values of k_cache and v_cache [batch, seq_cache, kv_heads, d] (kv_heads
    dividing heads; cache_seqlens an int32 [batch] CUDA tensor or one int for all). Paged (`block_table` int32
    [batch, pages_per_sequence]): k_cache and v_cache pools [pages, page_size, kv_heads, d] (page_size a multiple
    of 16), sequence b's key i on page block_table[b, i / page_size], seq_cache pages_per_sequence x page_size.
    With k_new and v_new [batch, seq_new, kv_heads, d], those are first written into the caches at keys
    cache_seqlens[b] on (in place; cache_seqlens itself is not changed) and attended to as well. Keys past
    seq_cache, or on a page id outside the pool, are dropped, the lengths clamped to [0, seq_cache]: never a
    write or read outside the caches. Causal: query i of sequence b sees keys up to i + length_b - seq_q.
    `variant` (`flash.variants.Variant`: a mask, a score step, a sink) with its `operands` as `ops.attention`'s
    (a head's [heads] or [batch, heads]), `query` in its functions query i's position i + length_b - seq_q
    among the sequence's keys and `seq` its length, the keys' rules checked on the host at seq_cache and below:
    a sliding window, softcap, ALiBi or sinks on a decode step (no backward). fp16 or bf16, d 64, 128 or 256; or
    an fp8 cache (vLLM's and FlashAttention-3's): q, the caches and the new keys and values float8_e4m3fn, d 128,
    with `descale_q`, `descale_k`, `descale_v` (fp32, each of one element or each [batch, kv_heads], as
    `attention`'s and FlashAttention-3's: a K/V head's scores (q k^T) descale_q descale_k / sqrt(d), O P v
    descale_v), o bf16, with a variant too. ValueError in one line otherwise."""
    descales = (descale_q, descale_k, descale_v)
    fp8 = q.dtype == torch.float8_e4m3fn or any(x is not None for x in descales)
    if fp8 and any(x is None for x in descales):
        raise ValueError("attention_with_kvcache: float8_e4m3fn q and caches take descale_q, descale_k and descale_v")
    plain = plain_call(q, k_cache, v_cache, k_new, v_new, block_table, *descales)
    eager = plain and variant is None and not operands and k_new is None and v_new is None
    if eager:
        key = _step_key(q, k_cache, v_cache, cache_seqlens, block_table, descales, causal)
        step = _steps.get(key)
        if step is not None:
            return step(q, k_cache, v_cache, cache_seqlens, block_table, descales)
    entry_table = None
    if block_table is None and _entries_as_pages(q, k_cache, v_cache):  # (the paged kernels: no offsets to make)
        block_table = entry_table = _entry_table(k_cache.shape[0], q.device)
    batch, seq_q, heads, d = _checked(q, k_cache, v_cache, k_new, v_new, block_table, fp8)
    seq_cache = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    # (clamped before an append, where a negative length would index from the end, and for a contiguous cache's
    # offsets; the paged kernels clamp them themselves)
    clamped = k_new is not None or block_table is None
    lengths = (_clamped_lengths if clamped else _given_lengths)(cache_seqlens, batch, seq_cache, q.device)
    if not batch:  # (torch's: empty results)
        return q.new_empty(q.shape, dtype=_output(q)), q.new_empty((0, heads, seq_q), dtype=torch.float32)
    scales = list(descales) if fp8 else []  # (the operators' schema: a list, empty for none)
    if variant is not None or operands:  # (checked before the caches are written)
        operands = _variant_operands(variant, operands, bool(causal), seq_cache, batch, heads, q.device,
                                     tuple(x for x in (q, k_cache, v_cache, k_new, v_new) if x is not None),
                                     entries_twice=block_table is None)
    queries, query_offsets = q.reshape(batch * seq_q, heads, d), sequence_offsets(batch, seq_q, q.device)
    if block_table is not None and k_new is not None:  # (the pools' pages, page size and layout, before they are
        # written; unwritten, the operator checks them, once a call)
        checked_paged(queries, k_cache, v_cache, query_offsets, lengths, block_table, seq_q)
    if k_new is not None and seq_cache and k_new.shape[1]:  # (argmax takes no empty tensor)
        lengths = _appended(q, k_cache, v_cache, k_new, v_new, lengths, block_table, seq_cache)
    if block_table is not None:  # (the packed kernels' inputs: paged, each sequence's count of keys)
        inputs = (queries, k_cache, v_cache, query_offsets, lengths)
    else:  # (a contiguous cache's rows, its entries every other sequence: `cache_offsets`)
        k_rows, v_rows, rows_per_entry = _cache_rows(k_cache, v_cache)
        entries = (rows_per_entry, k_rows.shape[0])
        inputs = (queries, k_rows, v_rows, sequence_offsets(batch, seq_q, q.device, gaps=True),
                  cache_offsets(lengths, *entries))
    if variant is not None:
        o, lse = variant_ops.packed(*inputs, block_table, seq_q, seq_cache, bool(causal), variant, operands,
                                    gaps=block_table is None, descales=scales)
    elif eager:
        o, lse = _first_step(key, inputs, block_table, (batch, seq_q, heads, d), seq_cache, bool(causal), scales,
                             (q, k_cache, v_cache), None if block_table is not None else entries, entry_table)
    elif block_table is not None:
        paged = _attention_paged if plain else torch.ops.mlir_tile.attention_paged
        o, lse = paged(*inputs, block_table, seq_q, bool(causal), scales)
    else:
        cached = _attention_cached if plain else torch.ops.mlir_tile.attention_cached
        o, lse = cached(*inputs, seq_q, seq_cache, bool(causal), scales)
    return o.view(batch, seq_q, heads, d), lse.view(heads, batch, seq_q).permute(1, 0, 2)


_steps = Plans(kept=1024)  # the eager decode steps (`_EagerStep`) by `_step_key`


def varlen_over_cache(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, seqused_k,
                      block_table, causal: bool, variant=None, operands=()):
    """`ops.attention_varlen` over a KV cache, as FlashAttention-3's and vLLM's varlen calls take one (a batch of
    prefill chunks and decode steps in one call): sequence b's keys the first seqused_k[b] (int32 [batch] on the
    device, clamped to what the sequence holds) of its rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] of k and v
    [total_k, kv_heads, d], or with `block_table` (cu_seqlens_k None) of its pages, k and v pools [pages,
    page_size, kv_heads, d] (`attention_paged`; max_seqlen_k unused: the table bounds the keys). Causal aligned
    to each sequence's last used key. No backward. ValueError in one line for what it does not take."""
    _checked_varlen_cache(q, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table)
    if block_table is not None:
        lengths, keys = seqused_k, k.shape[1] * block_table.shape[1] if k.dim() == 4 else 0  # (the kernels clamp them)
        offsets_q = cu_seqlens_q
    else:
        (offsets_q, lengths), keys = used_key_offsets(cu_seqlens_q, cu_seqlens_k, seqused_k), max_seqlen_k
    if variant is not None:
        return variant_ops.packed(q, k, v, offsets_q, lengths, block_table, max_seqlen_q, keys, bool(causal),
                                  variant, operands, gaps=block_table is None)
    plain = plain_call(q, k, v, cu_seqlens_q, lengths, block_table)
    if block_table is not None:
        paged = _attention_paged if plain else torch.ops.mlir_tile.attention_paged
        return paged(q, k, v, offsets_q, lengths, block_table, max_seqlen_q, bool(causal), [])
    cached = _attention_cached if plain else torch.ops.mlir_tile.attention_cached
    return cached(q, k, v, offsets_q, lengths, max_seqlen_q, keys, bool(causal), [])


def used_key_offsets(cu_seqlens_q, cu_seqlens_k, seqused_k) -> tuple:
    """(cu_seqlens_q, cu_seqlens_k) of the packed kernels, int32 [2 batch + 1], for sequence b's queries
    against the first seqused_k[b] (clamped to [0, its keys]) of its keys: sequence 2b those, 2b + 1 no query and
    the keys past them (`sequence_offsets(gaps=True)`'s form, as a cache's `cache_offsets`)."""
    starts, ends = cu_seqlens_k[:-1], cu_seqlens_k[1:]
    used = torch.minimum(seqused_k.clamp(min=0), ends - starts)
    return (torch.cat((torch.stack((cu_seqlens_q[:-1], cu_seqlens_q[1:]), 1).flatten(), cu_seqlens_q[-1:])),
            torch.cat((torch.stack((starts, starts + used), 1).flatten(), cu_seqlens_k[-1:])))


def _checked_varlen_cache(q, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table) -> None:
    """`varlen_over_cache`'s offsets and used lengths checked before torch's ops read them (the kernels' own
    checks follow); ValueError in one line otherwise."""
    def offsets(x) -> bool:
        return isinstance(x, torch.Tensor) and x.dtype == torch.int32 and x.dim() == 1 and x.shape[0] >= 2
    if not offsets(cu_seqlens_q):
        raise ValueError(f"attention_varlen: cu_seqlens_q int32 [batch + 1] (batch >= 1), got "
                         f"{_described(cu_seqlens_q)}")
    batch = cu_seqlens_q.shape[0] - 1
    if block_table is None and not (offsets(cu_seqlens_k) and cu_seqlens_k.shape == cu_seqlens_q.shape):
        raise ValueError(f"attention_varlen: cu_seqlens_k int32 [batch + 1] = [{batch + 1}] beside seqused_k, got "
                         f"{_described(cu_seqlens_k)}")
    if block_table is not None and cu_seqlens_k is not None:
        raise ValueError("attention_varlen: a paged cache (block_table) takes cu_seqlens_k=None, its keys "
                         "seqused_k's on the table's pages")
    if not (isinstance(seqused_k, torch.Tensor) and seqused_k.dtype == torch.int32
            and tuple(seqused_k.shape) == (batch,) and seqused_k.device == q.device):
        raise ValueError(f"attention_varlen: seqused_k int32 [batch] = [{batch}] on q's device {q.device}"
                         f"{' (a paged cache takes it)' if block_table is not None else ''}, got "
                         f"{_described(seqused_k)}")
    if any(x is not None and x.device != q.device for x in (cu_seqlens_q, cu_seqlens_k)):
        raise ValueError(f"attention_varlen: cu_seqlens_q and cu_seqlens_k on q's device {q.device}")


def _step_key(q, k_cache, v_cache, cache_seqlens, block_table, descales, causal) -> tuple:
    """What an eager step's launch depends on: each tensor's shape, strides, dtype, device and the bytes past 16
    its data starts at (cache_seqlens: its type where it is an int), and the mask."""
    return bool(causal), *[(x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15)
                           if isinstance(x, torch.Tensor) else type(x)
                           for x in (q, k_cache, v_cache, cache_seqlens, block_table, *descales)]


def _first_step(key, inputs, block_table, shape: tuple, seq_cache: int, causal: bool, scales: list, given: tuple,
                entries: tuple | None, entry_table=None) -> tuple:
    """(O, the log-sum-exp) of an eager step's first call of `key` (`inputs` the packed kernels'; a contiguous
    cache's `entries`: its rows from one entry to the next and all its rows, `cache_offsets`'; `entry_table`: a
    whole contiguous cache's table where it runs as pages, which the key does not hold), its launch then kept as
    an `_EagerStep` where the kernel read q and the caches in place (`given`: q, k_cache and v_cache, at the
    addresses the kernel was given)."""
    packing, seq_q = _hopper_packing(given[0].device), shape[1]
    if block_table is not None:
        o, lse, plan = packing.paged(*inputs, block_table, seq_q, causal=causal, descales=scales or None,
                                     with_plan=True)
    else:
        o, lse, plan = packing.packed(*inputs, seq_q, causal=causal, max_seqlen_k=seq_cache,
                                      queried=inputs[3].shape[0] // 2, descales=scales or None, with_plan=True)
    read = inputs[:1] if block_table is not None else inputs[:3]  # (the pools: in place, else `paged` refused them)
    in_place = all(x is token_rows(x) and x.data_ptr() == y.data_ptr() for x, y in zip(read, given))
    if plan is not None and in_place:  # (the descales' stride and sequences a row, as the plan took them)
        form = descale_addresses(scales, "e4m3", given[0].device, (shape[0], given[1].shape[2]),
                                 1 if entries is None else 2)[3:] if scales else []
        _steps.keep(key, _EagerStep(plan, shape, seq_cache, entries, tuple(form), entry_table))
    return o, lse


class _EagerStep:
    """An eager decode step (no append, no variant) whose key (`_step_key`) an earlier call checked and ran: a
    contiguous cache's lengths clamped and its offsets made (`cache_offsets`, its `entries`; None: paged, the
    kernels clamp the lengths), the packed
    kernels' plan (`packed._PackedPlan`) launched on the tensors' addresses (fp8: the descales' `form`, their
    stride and sequences a row, `descale_addresses`; `entry_table`: the table of a whole contiguous cache run as
    pages, `_entries_as_pages`, which its calls do not pass)."""

    def __init__(self, plan, shape: tuple, seq_cache: int, entries: tuple | None, form: tuple = (), entry_table=None):
        self.plan, self.shape, self.seq_cache, self.entries, self.form = plan, shape, seq_cache, entries, form
        self.entry_table = entry_table

    def __call__(self, q, k_cache, v_cache, cache_seqlens, block_table, descales):
        batch, seq_q, heads, d = self.shape
        lengths = (_given_lengths if self.entries is None else _clamped_lengths)(cache_seqlens, batch, self.seq_cache,
                                                                                 q.device)
        if self.entries is None:
            table = block_table if self.entry_table is None else self.entry_table
            pointers = (sequence_offsets(batch, seq_q, q.device).data_ptr(), lengths.data_ptr(), table.data_ptr())
        else:
            offsets = cache_offsets(lengths, *self.entries)
            pointers = (sequence_offsets(batch, seq_q, q.device, gaps=True).data_ptr(), offsets.data_ptr())
        scales = tuple(x.data_ptr() for x in descales if x is not None) + self.form
        o, lse = self.plan.run(torch_stream(q), q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), scales + pointers)
        return o.view(batch, seq_q, heads, d), lse.view(heads, batch, seq_q).permute(1, 0, 2)


def _hopper_packing(device):
    """The packed kernels' launches (`flash.packed.PackedAttention`) on `device`; ValueError off Hopper."""
    paths = kernels_on(device).attention
    if paths.hopper is None:
        raise ValueError(f"attention_with_kvcache: a KV cache runs on Hopper's path (sm_90), which this GPU "
                         f"({paths.library.chip}) has not")
    return paths.hopper.packing


def _appended(q, k_cache, v_cache, k_new, v_new, lengths, block_table, seq_cache: int):
    """The lengths after k_new and v_new are written into the caches at keys lengths[b] on (`_append`; paged:
    at their pages' rows, `_page_rows`), those past seq_cache dropped."""
    keys = lengths[:, None].long() + torch.arange(k_new.shape[1], device=q.device)
    if block_table is None:
        entries = torch.arange(q.shape[0], device=q.device)[:, None].expand_as(keys)
        _append((k_cache, v_cache), (k_new, v_new), (entries, keys), keys < seq_cache)
    else:
        pools = tuple(x.view(-1, *x.shape[2:]) for x in (k_cache, v_cache))  # (`checked_paged`: pages in a row)
        _append(pools, (k_new, v_new), *_page_rows(keys, block_table, k_cache.shape[:2]))
    return (lengths + k_new.shape[1]).clamp(max=seq_cache)


def _variant_operands(variant, operands, causal: bool, seq_cache: int, batch: int, heads: int, device,
                      tensors: tuple, entries_twice: bool) -> list:
    """The variant's operands checked (`variant_arguments`: that there is a variant, their kinds, its keys' rules
    at seq_cache and the lengths below, causal beside keys of its own; no gradient asked of `tensors` or them),
    its "head" operands as `variant_arguments` lays them out, fp32 [batch, heads] (`entries_twice`: each row
    twice, a contiguous cache's entries being every other sequence)."""
    _, laid = variant_arguments(variant, operands, causal, seq_cache, (batch, heads, device), shorter=True)
    variant_ops.refuse_gradients(variant, *tensors, *(x for x in operands if isinstance(x, torch.Tensor)))
    return [x if values is None else values.repeat_interleave(2, 0) if entries_twice else values
            for x, values in zip(operands, laid)]


def cache_offsets(lengths: torch.Tensor, rows_per_entry: int, total: int) -> torch.Tensor:
    """int32 [2 batch + 1]: sequence 2b's keys rows b x rows_per_entry to that + lengths[b], sequence 2b + 1's
    the rest up to the next entry (its queries none: `sequence_offsets(gaps=True)`), the last ending at
    `total`."""
    starts, ends = _entry_bounds(lengths.shape[0], rows_per_entry, total, lengths.device)
    return starts.index_add(0, ends, lengths)  # (one op: a decode step's host time is torch's ops, some us each)


@kept_per_shape
def _entry_bounds(batch: int, rows_per_entry: int, total: int, device):
    """([2 batch + 1] int32: each entry's first row twice, then `total`; the positions of the second ones), made
    once a shape."""
    starts = torch.arange(2 * batch + 1, dtype=torch.int32, device=device).div(2, rounding_mode="floor")
    starts = torch.where(starts < batch, starts * rows_per_entry, total).int()
    return starts, torch.arange(1, 2 * batch, 2, device=device)


def _append(caches, news, index, fits) -> None:
    """news[b, j] (each [batch, seq_new, kv_heads, d]) written into its cache at index[b, j] (`index` a tuple of
    long [batch, seq_new] tensors) where fits[b, j]; each write that does not fit goes where the first that fits
    goes, with its value (where none fits, to the index of the first with the value already there), so no index
    leaves the cache, nothing waits on the host and every row written twice gets one value."""
    # (indices of one element, [1], not 0-d: torch reads a 0-d index tensor on the host, which a CUDA graph's
    # capture refuses)
    fits = fits.flatten()
    first = fits.int().argmax().view(1)  # (0 where none fits)
    some = fits[first]
    index = tuple(torch.where(fits, i.flatten(), torch.where(some, i.flatten()[first], 0)) for i in index)
    for cache, new in zip(caches, news):
        if cache.dtype == torch.float8_e4m3fn:  # (its bytes: torch's where and index_put take no fp8)
            cache, new = cache.view(torch.uint8), new.view(torch.uint8)
        new = new.flatten(0, 1)
        fallback = torch.where(some[:, None, None], new[first], cache[tuple(i[:1] for i in index)])
        cache.index_put_(index, torch.where(fits[:, None, None], new, fallback))


def _page_rows(keys, block_table, pool_shape):
    """((pool rows,), whether each fits) of keys [batch, seq_new] (long) of a paged cache: key i of sequence b at
    row block_table[b, i / page_size] x page_size + i mod page_size of the pool's pages x page_size; it fits
    where i is inside the table's row and the page inside the pool."""
    pages, page_size = pool_shape
    page_index = keys // page_size
    inside = page_index < block_table.shape[1]
    page = block_table.gather(1, page_index.clamp(max=block_table.shape[1] - 1)).long()
    fits = inside & (page >= 0) & (page < pages)
    return (page * page_size + keys % page_size,), fits  # (those that do not fit: `_append` moves them)


def _cache_rows(k_cache, v_cache):
    """(k, v as [rows, kv_heads, d] token rows, rows from one cache entry to the next): views where the two
    caches' entries lie the same whole number (seq_cache or more) of token rows apart, else contiguous copies
    (`attention_varlen` copies those whose tokens' heads x d do not lie together)."""
    batch, seq_cache, kv_heads, d = k_cache.shape
    if not seq_cache:
        empty = k_cache.new_empty(0, kv_heads, d)
        return empty, empty, 0
    apart = {x.stride(0) // x.stride(1) if x.stride(1) and x.stride(0) % x.stride(1) == 0 else -1
             for x in (k_cache, v_cache)}
    rows_per_entry = apart.pop() if batch > 1 and len(apart) == 1 else seq_cache
    if rows_per_entry < seq_cache:  # (entries overlapping, or apart by part of a row)
        k_cache, v_cache, rows_per_entry = k_cache.contiguous(), v_cache.contiguous(), seq_cache
    total = (batch - 1) * rows_per_entry + seq_cache
    return (*(x.as_strided((total, kv_heads, d), x.stride()[1:]) for x in (k_cache, v_cache)), rows_per_entry)


def _clamped_lengths(cache_seqlens, batch: int, seq_cache: int, device) -> torch.Tensor:
    """cache_seqlens (an int, or an int32 [batch] tensor on `device`) as an int32 [batch] tensor clamped to [0,
    seq_cache]; ValueError otherwise."""
    return _given_lengths(cache_seqlens, batch, seq_cache, device).clamp(0, seq_cache)


def _given_lengths(cache_seqlens, batch: int, seq_cache: int, device) -> torch.Tensor:
    """cache_seqlens as the paged kernels read it (they clamp it): the int32 [batch] tensor itself, or an int's,
    clamped to [0, seq_cache] and made once a value (`kept_per_shape`: no op a step); ValueError otherwise."""
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        return _constant_lengths(min(max(cache_seqlens, 0), seq_cache), batch, device)
    if not (isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.dtype == torch.int32
            and tuple(cache_seqlens.shape) == (batch,) and cache_seqlens.device == device):
        raise ValueError(f"attention_with_kvcache: cache_seqlens an int or an int32 [batch] = [{batch}] tensor on "
                         f"{device}, got {_described(cache_seqlens)}")
    return cache_seqlens


@kept_per_shape
def _constant_lengths(length: int, batch: int, device) -> torch.Tensor:
    return torch.full((batch,), length, dtype=torch.int32, device=device)


def _entries_as_pages(q, k_cache, v_cache) -> bool:
    """Whether a contiguous cache [batch, seq_cache, kv_heads, d] runs as a pool of `batch` pages of seq_cache
    rows, each sequence's own (`_entry_table`): the paged kernels take each sequence's length as it is, where the
    contiguous form's offsets take torch's ops a step (three small kernels in a decode step's graph). Where its
    entries lie one after another on 16 bytes, q's batch and d theirs, and seq_cache one `packed.entries_as_pages`
    takes."""
    return (all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in (q, k_cache, v_cache))
            and k_cache.shape == v_cache.shape and k_cache.dtype == v_cache.dtype == q.dtype
            and (k_cache.shape[0], k_cache.shape[3]) == (q.shape[0], q.shape[3]) and entries_as_pages(k_cache.shape[1])
            and all(x.is_cuda and x.is_contiguous() and x.data_ptr() % 16 == 0 for x in (k_cache, v_cache)))


@kept_per_shape
def _entry_table(batch: int, device) -> torch.Tensor:
    """The block table of a contiguous cache seen as pages (`_entries_as_pages`): sequence b's one page, entry b."""
    return torch.arange(batch, dtype=torch.int32, device=device).view(batch, 1)


def _output(q) -> torch.dtype:
    return torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype


def _checked(q, k_cache, v_cache, k_new, v_new, block_table, fp8: bool) -> tuple:
    """q's [batch, seq_q, heads, d], each argument checked before the caches are written (`fp8`: float8_e4m3fn
    with descales); ValueError in one line otherwise."""
    four_d = (q, k_cache, v_cache) + tuple(x for x in (k_new, v_new) if x is not None)
    tensors = four_d + ((block_table,) if block_table is not None else ())
    cache = "[batch, seq_cache, kv_heads, d]" if block_table is None else "pools [pages, page_size, kv_heads, d]"
    if not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in four_d):
        raise ValueError(f"attention_with_kvcache: q [batch, seq_q, heads, d], k_cache and v_cache {cache}, 4-D "
                         f"tensors; got {', '.join(_described(x) for x in four_d)}")
    batch, _, heads, d = q.shape
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != d or block_table is None and k_cache.shape[0] != batch:
        raise ValueError(f"attention_with_kvcache: k_cache and v_cache {cache} alike, with q's d (and batch); got q "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if block_table is not None and not (isinstance(block_table, torch.Tensor) and block_table.dtype == torch.int32
                                        and block_table.dim() == 2 and block_table.shape[0] == batch):
        raise ValueError(f"attention_with_kvcache: block_table int32 [batch, pages_per_sequence] with q's batch "
                         f"{batch}, got {_described(block_table)}")
    elements = (torch.float8_e4m3fn,) if fp8 else (torch.float16, torch.bfloat16)
    if q.dtype not in elements or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"attention_with_kvcache: q, k_cache and v_cache all float16 or all bfloat16 (with "
                         f"descales, all float8_e4m3fn), got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    dims = FP8_HEAD_DIMS if fp8 else HEAD_DIMS
    if d not in dims or not k_cache.shape[2] or heads % k_cache.shape[2]:
        raise ValueError(f"attention_with_kvcache: head dim {', '.join(map(str, dims))} ({q.dtype}) and kv_heads "
                         f"dividing heads, got d {d}, {heads} heads and {k_cache.shape[2]} kv_heads")
    if len({x.device for x in tensors}) != 1 or not q.is_cuda:
        raise ValueError(f"attention_with_kvcache: every tensor on one CUDA device, got "
                         f"{', '.join(str(x.device) for x in tensors)}")
    if (k_new is None) != (v_new is None) or k_new is not None and (
            k_new.shape != v_new.shape or k_new.shape[0] != batch or k_new.shape[2:] != k_cache.shape[2:]
            or k_new.dtype != k_cache.dtype or v_new.dtype != v_cache.dtype):
        raise ValueError(f"attention_with_kvcache: k_new and v_new both or neither, [batch, seq_new, kv_heads, d] "
                         f"of the caches' batch, heads, d and dtype; got {_described(k_new)}, {_described(v_new)}")
    return tuple(q.shape)


def _attention_paged(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cache_lengths: torch.Tensor, block_table: torch.Tensor, max_seqlen_q: int, causal: bool,
                     descales: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return _hopper_packing(q.device).paged(q, k_pool, v_pool, cu_seqlens_q, cache_lengths, block_table, max_seqlen_q,
                                      causal=causal, descales=descales or None)


def _attention_paged_fake(q, k_pool, v_pool, cu_seqlens_q, cache_lengths, block_table, max_seqlen_q, causal,
                          descales):
    return q.new_empty(q.shape, dtype=_output(q)), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


_NO_BACKWARD = ("attention over a KV cache (attention_with_kvcache, attention_varlen's seqused_k and block_table) "
                "has no backward; call it under torch.no_grad()")
register_operator("attention_paged", _attention_paged, fake=_attention_paged_fake, backward=no_backward(_NO_BACKWARD))


def _attention_cached(q: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                      descales: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """`attention_varlen`'s over a contiguous cache's rows: sequence 2b cache entry b's keys with its queries,
    2b + 1 the entry's rows past its length, with none (`cache_offsets`); split-KV shared out by the entries."""
    return _hopper_packing(q.device).packed(q, k_rows, v_rows, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=causal,
                                       max_seqlen_k=max_seqlen_k, queried=cu_seqlens_q.shape[0] // 2,
                                       descales=descales or None)


def _attention_cached_fake(q, k_rows, v_rows, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                           descales):
    return _attention_paged_fake(q, k_rows, v_rows, cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, causal, descales)


register_operator("attention_cached", _attention_cached, fake=_attention_cached_fake,
                  backward=no_backward(_NO_BACKWARD))


def _described(x) -> str:
    return f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)
