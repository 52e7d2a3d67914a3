"""The packed kernels' launches (`sm90_varlen`: sequences packed as token rows, FlashAttention's varlen form):
packed K/V (`PackedAttention.packed`), a paged cache (`PackedAttention.paged`), the configuration each call
takes (`packed_config`: the measured one for its length, pack_gqa for a decode step's few queries, page boxes,
and split-KV where a decode step's items leave SMs idle, `kv_splits`, whose splits `combine` sums), and the
checks of their arguments. `launch.HopperAttention` holds one (`packed`, `paged`)."""
from __future__ import annotations

import functools
from dataclasses import replace
from functools import partial

from mlir_tile.kernels.common import MapOperand, allocator, on_16_bytes, operand_slots, output_element
from mlir_tile.kernels.flash import combine, sm90, sm90_layouts
from mlir_tile.kernels.flash.sm90_tiles import (FP8_HEAD_DIMS, HEAD_DIMS, PAGE_ROWS, HopperAttentionConfig,
                                                page_box_rows)
from mlir_tile.kernels.flash.variants import variant_arguments
from mlir_tile.runtime import POINTER, TENSOR_MAP

MAX_SPLITS = 32  # split-KV's most splits (flash-decoding's 128 is for longer caches than a decode step's SMs need)
ENTRY_PAGE_ROWS = 64  # a contiguous cache whose entries are a multiple of this many rows runs as pages of one entry


def entries_as_pages(seq_cache: int) -> bool:
    """Whether a contiguous KV cache of `seq_cache` rows a sequence (laid out whole, `kvcache._entries_as_pages`)
    runs on the paged kernels, each sequence's entry its one page: the paged kernels take each sequence's length
    as it is, where the contiguous form's offsets take torch's ops a step; entries of a multiple of
    ENTRY_PAGE_ROWS rows, so that a key tile is one or two boxes (`page_box_rows`)."""
    return seq_cache > 0 and seq_cache % ENTRY_PAGE_ROWS == 0


class PackedAttention:
    """`HopperAttention`'s launches of the packed kernels, its library's, tensor maps and plans."""

    def __init__(self, library, maps, plans, sms: int):
        self.library, self.maps, self.plans, self.sms = library, maps, plans, sms

    def packed(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, *, causal: bool = False,
               max_seqlen_k: int | None = None, queried: int | None = None, variant=None, operands=(),
               descales=None, with_plan: bool = False):
        """(O [total_q, heads, d], log-sum-exp [heads, total_q] fp32) of packed sequences (`sm90_varlen`: q
        [total_q, heads, d], k and v [total_k, kv_heads, d], kv_heads dividing heads; cu_seqlens_q and _k int32
        [batch + 1] on q's device; `max_seqlen_q` at least the longest sequence's queries, which the grid
        covers: rows past it are not computed; `max_seqlen_k` at least its keys, None: total_k, which split-KV
        shares out; `queried`, the sequences that hold queries where the others hold none, None: all, by which
        split-KV shares out). f16 or bf16; q, k and v read in place where each token's row is (`token_rows`), O
        contiguous. `variant` with its `operands` as `HopperAttention`'s (a head's [heads] or [batch, heads], a
        row of each sequence), `query` in its functions the query's position among its sequence's keys (query
        i of len_q at i + len_k - len_q, as causal) and `seq` its keys: the host checks its keys' rules at
        `max_seqlen_k` and at every length up to `variants.SHORTER_CHECKED` (`variants.variant_arguments`).
        float8_e4m3fn q, k and v (d 128) with `descales` (q's, k's, v's: fp32 tensors of one element,
        as `HopperAttention`'s), O then bf16. `with_plan`: and the launch plan that ran (`_PackedPlan`; None
        where none did), which a call on tensors of the same shapes, strides and dtypes may run again."""
        element = checked_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q)
        q, k, v = (token_rows(x) for x in (q, k, v))
        total_k, kv_heads = k.shape[:2]
        longest = total_k if max_seqlen_k is None else min(max_seqlen_k, total_k)
        return self._run(q, k, v, kv_heads, element, bool(causal), max_seqlen_q, longest, cu_seqlens_q.shape[0] - 1,
                         (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()), queried=queried, variant=variant,
                         operands=operands, query_offsets=cu_seqlens_q, descales=descales, with_plan=with_plan)

    def paged(self, q, k_pool, v_pool, cu_seqlens_q, cache_lengths, block_table, max_seqlen_q: int, *,
              causal: bool = False, variant=None, operands=(), descales=None, with_plan: bool = False):
        """(O [total_q, heads, d], log-sum-exp [heads, total_q] fp32) of packed queries against a paged K/V cache
        (`sm90_varlen.Pages`): k_pool and v_pool [pages, page_size, kv_heads, d] (page_size a multiple of 16),
        sequence b's keys its first cache_lengths[b] (int32 [batch]) on its pages block_table[b] (int32 [batch,
        pages_per_sequence]); q, cu_seqlens_q, max_seqlen_q, `variant`, `operands` and `descales` as `packed`'s
        (its keys checked at the table's keys a sequence and below), `with_plan` too. ValueError in one line for
        what the kernel does not take."""
        element, (k_rows, v_rows) = checked_paged(q, k_pool, v_pool, cu_seqlens_q, cache_lengths, block_table,
                                                  max_seqlen_q)
        q, block_table = token_rows(q), block_table.contiguous()
        (pages, page_size, kv_heads, _), (batch, per_sequence) = k_pool.shape, block_table.shape
        return self._run(q, k_rows, v_rows, kv_heads, element, bool(causal), max_seqlen_q,
                         per_sequence * page_size if pages else 0, batch,
                         (cu_seqlens_q.data_ptr(), cache_lengths.data_ptr(), block_table.data_ptr()),
                         paging=(per_sequence, page_size, pages), variant=variant, operands=operands,
                         query_offsets=cu_seqlens_q, descales=descales, with_plan=with_plan)

    def _run(self, q, k, v, kv_heads: int, element: str, causal: bool, max_seqlen_q: int, max_seqlen_k: int,
             batch: int, pointers: tuple, paging: tuple = (), queried: int | None = None, variant=None,
             operands=(), query_offsets=None, descales=None, with_plan: bool = False):
        """O and the log-sum-exp of token rows q, k and v (paged: the pools' rows) by the plan of their shape
        (`with_plan`: and that plan, None where no kernel runs), the split-KV partials made by it where it splits
        (shared out by the `queried` sequences, None: all); `variant` with its `operands` (`query_offsets`:
        cu_seqlens_q, for the sinks where no sequence has a key); fp8's `descales`."""
        import torch

        from mlir_tile.runtime import torch_stream

        total_q, heads, d = q.shape
        kv_heads_of = (queried or batch, kv_heads)  # (a contiguous cache: its entries' rows, each sequence's pair)
        scales = descale_addresses(descales, element, q.device, kv_heads_of, batch // kv_heads_of[0])
        # (`kept`: the per-head values as the kernel reads them, held until it is launched)
        arguments, kept = variant_arguments(variant, operands, causal, max_seqlen_k, (batch, heads, q.device),
                                            shorter=True)
        if not (total_q and batch and max_seqlen_q and k.shape[0] and max_seqlen_k):
            o = torch.empty(q.shape, dtype=torch.bfloat16 if element == "e4m3" else q.dtype, device=q.device)
            lse = torch.empty(heads, total_q, dtype=torch.float32, device=q.device)
            if total_q and batch and max_seqlen_q:  # (no sequence has a key: each row's O 0, its log-sum-exp -inf)
                o, lse = o.zero_(), keyless_lse(lse, variant, kept, query_offsets)
            return (o, lse, None) if with_plan else (o, lse)
        config, tiles, splits = packed_config(d, causal, element, max_seqlen_q, heads // kv_heads,
                                              paging[1] if paging else 0, max_seqlen_k=max_seqlen_k,
                                              kv_items=(batch if queried is None else queried) * kv_heads,
                                              sms=self.sms)
        pitches = tuple(row_pitch(x) for x in (q, k, v))
        shape = (total_q, k.shape[0], heads, kv_heads, batch, tiles, splits, pitches, paging, variant)
        plan = self.plans.of(("packed", config, *shape), lambda: self._plan(config, *shape, device=q.device))
        o, lse = plan.run(torch_stream(q), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                          tuple(scales) + pointers + tuple(arguments))
        return (o, lse, plan) if with_plan else (o, lse)

    def _plan(self, config, total_q: int, total_k: int, heads: int, kv_heads: int, batch: int, tiles: int,
              splits: int, pitches: tuple, paging: tuple, variant=None, *, device=None):
        """The launch over `batch` sequences' `tiles` row tiles (of the longest; pack_gqa, of its rows times the
        group) of `heads` query heads (pack_gqa: of the K/V heads), `splits` CTAs each (then the combine's):
        Q's, K's and V's 2-D maps over [tokens, heads x d], rows `pitches` bytes apart (pack_gqa: Q's 3-D over
        [tokens, heads, d], a box 64 / group tokens of `group` heads); `paging` (paged K/V): pages a sequence,
        the page size and the pool's pages (K's and V's tokens); fp8's descales first, a variant's operands
        last; O, the log-sum-exp and split-KV's partials allocated on `device` by it (`_PackedPlan.run`)."""
        import torch

        module = self.library.module(str(config) + (variant.suffix if variant else ""),
                                     partial(sm90.build_module, config, variant=variant))
        box, d, group = sm90_layouts.boxes(config), config.head_dim, heads // kv_heads
        maps = [MapOperand(self.maps, (total, count * d), pitch, box[name]) for name, total, count, pitch in (
            ("q", total_q, heads, pitches[0]), ("k", total_k, kv_heads, pitches[1]), ("v", total_k, kv_heads, pitches[2]))]
        if config.pack_gqa:
            maps[0] = MapOperand(self.maps, (total_q, heads, d), d * config.element_bytes, box["q"], pitches[0],
                                 box_matrices=box["q"].rows // group)
        items = batch * (kv_heads if config.pack_gqa else heads)
        # (paged: a sequence's keys at most its table row's, then the table's address and shape)
        keys = [paging[0] * paging[1], POINTER, *paging] if paging else [total_k]
        launch = module.prepare(sm90.KERNEL, [TENSOR_MAP] * 3 + [POINTER] * 2 + [tiles * config.rows, items, group]
                                + [POINTER] * (sm90.FP8_PARAMETERS * config.fp8 + 2) + [heads, total_q] + keys
                                + ([splits] if config.split_kv else [])
                                + operand_slots(variant.operands if variant else ()),
                                grid=config.grid(items, tiles * config.rows, self.sms) * splits,
                                block=config.threads, shared_bytes=config.shared_bytes)
        combined = None
        if config.split_kv:
            summing = combine.CombineConfig(d, output_element(config.element))
            combined = self.library.module(str(summing), partial(combine.build_module, summing)).prepare(
                combine.KERNEL, [POINTER] * 4 + [splits, total_q, heads], grid=summing.grid(total_q * heads),
                block=summing.threads, dependent=True)  # (its launch under the splits' work: `combine`)
        o_type = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[output_element(config.element)])
        outputs = [((total_q, heads, d), o_type), ((heads, total_q), torch.float32)]
        if config.split_kv:  # (each split's fp32 O, then its log-sum-exp, which the combine sums: one buffer)
            outputs += [((splits * heads * total_q * (d + 1),), torch.float32)]
        return _PackedPlan(launch, maps, [allocator(shape, dtype, device) for shape, dtype in outputs], combined,
                           4 * splits * total_q * heads * d)


@functools.lru_cache(maxsize=1024)  # (each call asks; the configurations' checks cost host time a decode step has not)
def packed_config(d: int, causal: bool, element: str, max_seqlen_q: int, group: int, page_size: int = 0, *,
                  max_seqlen_k: int = 0, kv_items: int = 0, sms: int = 0):
    """(the packed kernels' configuration, its row tiles a sequence, its splits) for sequences of at most
    `max_seqlen_q` queries and `max_seqlen_k` keys, `group` query heads a K/V head, K/V in pages of `page_size`
    tokens (0: packed rows): the measured configuration for that length (`HopperAttentionConfig.packed`), with
    pack_gqa where a sequence's queries fill less than a row tile and the group divides a consumer's 64 rows (a
    decode step's: the group's heads fill the rows, and K and V are read once a group), page boxes of a whole
    key tile where the pages hold whole ones, else of 64 or 16 rows (`page_box_rows`), split-KV for such a step's
    `kv_items` (batch x K/V heads) on `sms` SMs (`kv_splits`)."""
    config = HopperAttentionConfig.packed(d, causal, element, max_seqlen_q)
    decode = max_seqlen_q < config.rows
    pack = decode and 1 < group and 64 % group == 0
    config = config.decoding() if pack else config
    rows = page_box_rows(page_size, config.keys) if page_size else 0
    tiles = -(-max_seqlen_q * (group if pack else 1) // config.rows)
    ctas = kv_items * (1 if pack else group) * tiles
    splits = kv_splits(ctas, -(-max_seqlen_k // config.keys), sms) if decode and sms else 1
    return replace(config, pack_gqa=pack, page_rows=rows, split_kv=splits > 1), tiles, splits


def keyless_lse(lse, variant, kept: list, query_offsets):
    """The log-sum-exp [heads, total_q] of rows where no sequence has a key: -inf, or a sink's logit where the
    variant's sink is a head operand (`kept`: its values [batch, heads] as `variant_arguments` laid them out;
    each token's sequence from `query_offsets`, cu_seqlens_q, on the device). A sink function, which only the
    kernel evaluates, is refused in one line: no kernel launches without a key."""
    import torch

    if variant is None or variant.sink is None:
        return lse.fill_(float("-inf"))
    if variant.sink_operand is None:
        raise ValueError(f"attention: variant {variant.name!r}'s sink is a function, which runs in the kernel, and "
                         f"no sequence has a key to launch one; give the sinks as a head operand")
    sinks = kept[[operand.name for operand in variant.operands].index(variant.sink_operand)]
    tokens = torch.arange(lse.shape[1], device=lse.device, dtype=query_offsets.dtype)
    rows = torch.searchsorted(query_offsets[1:], tokens, right=True).clamp(max=sinks.shape[0] - 1)
    return lse.copy_(sinks[rows].t())


def kv_splits(ctas: int, key_tiles: int, slots: int) -> int:
    """Split-KV's splits of `ctas` CTAs walking up to `key_tiles` key tiles each on `slots` SMs, one split CTA an SM
    where a configuration holds more (a decode tile's two CTAs an SM hide one's prologue and stores under the
    other's loads; twice the splits only shortened each: 32 of 64-key tiles at batch 1 x 4,096 keys took 12.68 us
    against 16's 9.64 on the H100): none where they fill most slots already;
    else as many as fill them once without a second, partial wave (4 x 8,192 keys on the H100 took 87.2 us in 5
    splits, 160 CTAs on 132 SMs, and 79.2 in 4; 1 x 16,384 59.6 in 17, 57.9 in 16: docs/notes/serving-plan.md),
    each split two key tiles at least (a split's fp32 O, written and read back by the combine, costs about a key
    tile's K and V), at most MAX_SPLITS."""
    if 5 * ctas >= 4 * slots:
        return 1
    return max(1, min(slots // ctas, key_tiles // 2, MAX_SPLITS))


class _PackedPlan:
    """One packed-sequences shape's launch: q's, k's and v's tensor maps, O's, the log-sum-exp's and the
    offsets' addresses (paged: the cache lengths' and the block table's); split-KV, the partials' and the
    combine's launch. `outputs` make O, the log-sum-exp and the partials (`common.allocator`: split-KV's O and
    log-sum-exp in one buffer, the latter `lse_bytes` into it)."""

    def __init__(self, launch, maps: list, outputs: list, combined=None, lse_bytes: int = 0):
        self.launch, self.maps, self.outputs, self.combined, self.lse_bytes = launch, maps, outputs, combined, lse_bytes

    def run(self, stream: int, q: int, k: int, v: int, pointers: tuple) -> tuple:
        """(O, the log-sum-exp) of the kernel on q, k and v at these addresses, `pointers` its other ones."""
        o, lse, *partials = (new() for new in self.outputs)
        map_q, map_k, map_v = self.maps
        if self.combined is None:
            self.launch(stream, map_q(q), map_k(k), map_v(v), o.data_ptr(), lse.data_ptr(), *pointers)
            return o, lse
        first = partials[0].data_ptr()  # (O's [splits, total_q, heads, d], then [splits, heads, total_q])
        addresses = (first, first + self.lse_bytes)
        self.launch(stream, map_q(q), map_k(k), map_v(v), *addresses, *pointers)
        self.combined(stream, *addresses, o.data_ptr(), lse.data_ptr())
        return o, lse


def pool_rows(*pools) -> tuple:
    """Paged K/V pools [pages, page_size, kv_heads, d] as the kernel's maps read them, [pages x page_size,
    kv_heads, d] token rows (views: `checked_paged` proves that the pages lie one after another)."""
    return tuple(x.view(x.shape[0] * x.shape[1], *x.shape[2:]) for x in pools)


def checked_paged(q, k_pool, v_pool, cu_seqlens_q, cache_lengths, block_table, longest) -> tuple:
    """(the element, the pools' `pool_rows`) of `PackedAttention.paged`'s arguments, each checked (the pools'
    pages lying one after another, each token's heads x d contiguous on 16 bytes: a pool is not copied);
    ValueError in one line otherwise."""
    import torch

    if not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in (k_pool, v_pool)) or k_pool.shape != v_pool.shape:
        raise ValueError(f"attention (paged): k and v pools [pages, page_size, kv_heads, d] alike, got "
                         f"{_described(k_pool)}, {_described(v_pool)}")
    pages, page_size, kv_heads, d = k_pool.shape
    if page_size % PAGE_ROWS or not page_size or (pages * max(page_size, 1) >= 2 ** 31):
        raise ValueError(f"attention (paged): a page size of a multiple of {PAGE_ROWS} tokens, fewer than 2^31 "
                         f"tokens in the pool; got {pages} pages of {page_size}")
    # (the views made once, a decode step's host time is some us a torch op; they exist where pages lie one after
    # another)
    placed = not any(pages > 1 and x.stride(0) != page_size * x.stride(1) for x in (k_pool, v_pool))
    rows = pool_rows(k_pool, v_pool) if placed else ()
    if not placed or any(token_rows(x) is not x for x in rows):
        raise ValueError("attention (paged): a pool's pages one after another, each token's kv_heads x d contiguous, "
                         "on 16 bytes (a pool is read in place, never copied)")
    element = checked_packed(q, *rows, cu_seqlens_q, cu_seqlens_q, longest)
    batch = cu_seqlens_q.shape[0] - 1
    if any(not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or x.device != q.device
           for x in (cache_lengths, block_table)) or cache_lengths.shape != (batch,) or (
            block_table.dim() != 2 or block_table.shape[0] != batch or block_table.shape[1] * page_size >= 2 ** 31):
        raise ValueError(f"attention (paged): cache lengths int32 [batch] = [{batch}] and a block table int32 [batch, "
                         f"pages_per_sequence] on {q.device}; got {_described(cache_lengths)}, "
                         f"{_described(block_table)}")
    return element, rows


def checked_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, longest, name: str = "max_seqlen_q") -> str:
    """The element ("f16", "bf16", "e4m3") of packed sequences' q, k, v, each argument checked
    (`PackedAttention.packed`; `longest` the bound the launch's grid is made for, the argument `name`); ValueError
    in one line otherwise."""
    import torch

    element = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3"}.get(q.dtype)
    if (element is None or k.dtype != q.dtype or v.dtype != q.dtype or q.dim() != 3 or k.dim() != 3
            or k.shape != v.shape or k.shape[2] != q.shape[2] or not k.shape[1] or q.shape[1] % k.shape[1]):
        raise ValueError(f"attention_varlen: q [total_q, heads, d], k and v [total_k, kv_heads, d] with kv_heads "
                         f"dividing heads, all float16, bfloat16 or float8_e4m3fn; got {tuple(q.shape)} {q.dtype}, "
                         f"{tuple(k.shape)} {k.dtype}, {tuple(v.shape)} {v.dtype}")
    dims = FP8_HEAD_DIMS if element == "e4m3" else HEAD_DIMS
    if q.shape[2] not in dims:
        raise ValueError(f"attention_varlen: head dim {', '.join(map(str, dims))} ({q.dtype}), got {q.shape[2]}")
    if not all(x.is_cuda for x in (q, k, v)):
        raise ValueError(f"attention_varlen: q, k and v on a CUDA device, got {q.device}, {k.device}, {v.device}")
    if any(not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or x.dim() != 1 or x.device != q.device
           or not x.is_contiguous() for x in (cu_seqlens_q, cu_seqlens_k)) or not (
            2 <= cu_seqlens_q.shape[0] == cu_seqlens_k.shape[0]):
        raise ValueError(f"attention_varlen: cu_seqlens_q and cu_seqlens_k int32 [batch + 1] (batch >= 1) on "
                         f"{q.device}, contiguous; got {_described(cu_seqlens_q)}, {_described(cu_seqlens_k)}")
    if isinstance(longest, bool) or not isinstance(longest, int) or longest < 0:
        raise ValueError(f"attention_varlen: {name} a non-negative int, got {longest!r}")
    return element


def descale_addresses(descales, element: str, device, rows: tuple = (), sequences_per_row: int = 1) -> list:
    """fp8's descales as the kernels read them (`sm90._HopperAttention.descale`): q's, k's and v's addresses, then
    their stride (0: one a tensor; 1: one a sequence's K/V head, FlashAttention-3's [batch, kv_heads] `rows`) and
    `sequences_per_row` (a contiguous cache's two). Checked: float32 on `device`, each of one element (or a view
    of one, strides 0: `expand`ed) or each a contiguous `rows`; none for 16-bit inputs. ValueError otherwise."""
    import torch

    if element != "e4m3":
        if descales is not None:
            raise ValueError("hopper attention: descales are for float8_e4m3fn inputs")
        return []
    if not isinstance(descales, (tuple, list)) or len(descales) != 3 or any(
            not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.device != device for x in descales):
        raise ValueError(f"hopper attention: float8_e4m3fn inputs take descales (q's, k's, v's), float32 tensors "
                         f"on {device}")
    if all(x.numel() and all(stride == 0 or size == 1 for size, stride in zip(x.shape, x.stride())) for x in descales):
        return [x.data_ptr() for x in descales] + [0, 1]  # (one value each: every extent past 1 of stride 0)
    if rows and all(tuple(x.shape) == tuple(rows) and x.is_contiguous() for x in descales):
        return [x.data_ptr() for x in descales] + [1, sequences_per_row]
    raise ValueError(f"hopper attention: the descales (q's, k's, v's) each of one element, or each contiguous "
                     f"[batch, kv_heads] {list(rows) if rows else ''}; got "
                     + ", ".join(f"{tuple(x.shape)} strides {x.stride()}" for x in descales))


def token_rows(x):
    """Packed `x` [tokens, heads, d] as the packed kernels' 2-D maps read it, [tokens, heads x d] with a row stride
    of whole 16 bytes: `x` itself where each token's heads x d are contiguous and on 16 bytes (a slice of a fused
    projection, qkv.view(tokens, 3, heads, d)[:, 0], included: no copy), else a contiguous copy."""
    _, heads, d = x.shape
    rows = (x.stride(2) == 1 or d == 1) and (x.stride(1) == d or heads == 1)
    pitch = row_pitch(x)
    if rows and pitch >= heads * d * x.element_size() and pitch % 16 == 0 and x.data_ptr() % 16 == 0:
        return x
    return on_16_bytes(x.contiguous())


def row_pitch(x) -> int:
    """The bytes from one token's row of `token_rows(x)` to the next."""
    return (x.stride(0) if x.shape[0] > 1 else x.shape[1] * x.shape[2]) * x.element_size()


def _described(x) -> str:
    import torch

    return f"{x.dtype} {tuple(x.shape)} on {x.device}" if isinstance(x, torch.Tensor) else repr(x)
