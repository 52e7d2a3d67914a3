"""Attention of new queries against a KV cache (FlashAttention's `flash_attn_with_kvcache` convention, Hopper's
path): per-sequence cache lengths on the device, new keys and values appended in place, GQA, causal aligned to
each sequence's last key. No kernel of its own: the packed kernels (`attention_varlen`) read the cache where it
lies, sequence b's keys rows b x rows_per_entry to that + its length, each sequence followed by an empty one
whose keys are the cache's unused rows up to the next entry (`cache_offsets`), so that one int32 offset array
made on the device (no host synchronization: a CUDA graph holds the call) bounds them all."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

import mlir_tile.kernels.ops  # noqa: F401  (registers torch.ops.mlir_tile.attention_varlen)
from mlir_tile.kernels.flash.launch import sequence_offsets
from mlir_tile.kernels.flash.sm90_tiles import HEAD_DIMS


def attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens,
                           k_new: Optional[torch.Tensor] = None, v_new: Optional[torch.Tensor] = None, *,
                           causal: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """(o [batch, seq_q, heads, d], lse [batch, heads, seq_q] fp32) of q [batch, seq_q, heads, d] against the
    first cache_seqlens[b] keys and values of k_cache and v_cache [batch, seq_cache, kv_heads, d] (kv_heads
    dividing heads; cache_seqlens an int32 [batch] CUDA tensor or one int for all). With k_new and v_new
    [batch, seq_new, kv_heads, d], those are first written into the caches at rows cache_seqlens[b] on (in
    place; cache_seqlens itself is not changed) and attended to as well. Keys past seq_cache are dropped, the
    lengths clamped to [0, seq_cache]: never a write or read outside the caches. Causal: query i of sequence b
    sees keys up to i + length_b - seq_q. fp16 or bf16, d 64, 128 or 256; ValueError in one line otherwise."""
    batch, seq_q, heads, d = _checked(q, k_cache, v_cache, k_new, v_new)
    seq_cache = k_cache.shape[1]
    lengths = _lengths(cache_seqlens, batch, q.device)
    if not batch:  # (torch's: empty results)
        return q.new_empty(q.shape), q.new_empty((0, heads, seq_q), dtype=torch.float32)
    lengths = lengths.clamp(0, seq_cache)  # (before the append: a negative length would index from the end)
    if k_new is not None and seq_cache:
        _append(k_cache, v_cache, k_new, v_new, lengths)
        lengths = (lengths + k_new.shape[1]).clamp(max=seq_cache)
    k_rows, v_rows, rows_per_entry = _cache_rows(k_cache, v_cache)
    o, lse = torch.ops.mlir_tile.attention_varlen(
        q.reshape(batch * seq_q, heads, d), k_rows, v_rows, sequence_offsets(batch, seq_q, q.device, gaps=True),
        cache_offsets(lengths, rows_per_entry, k_rows.shape[0]), seq_q, seq_cache, bool(causal))
    return o.view(batch, seq_q, heads, d), lse.view(heads, batch, seq_q).permute(1, 0, 2)


def cache_offsets(lengths: torch.Tensor, rows_per_entry: int, total: int) -> torch.Tensor:
    """int32 [2 batch + 1]: sequence 2b's keys rows b x rows_per_entry to that + lengths[b], sequence 2b + 1's
    the rest up to the next entry (its queries none: `sequence_offsets(gaps=True)`), the last ending at
    `total`."""
    starts = torch.arange(lengths.shape[0], dtype=torch.int32, device=lengths.device) * rows_per_entry
    ends = torch.full((1,), total, dtype=torch.int32, device=lengths.device)
    return torch.cat((torch.stack((starts, starts + lengths), 1).flatten(), ends))


def _append(k_cache, v_cache, k_new, v_new, lengths) -> None:
    """k_new and v_new written at rows lengths[b] + j of each cache entry, those past the cache dropped: a row
    that does not fit is written instead where the entry's first new row goes, with that row's value (or, where
    none fits, the cache's last row with its own value), so no index leaves the cache and every row written
    twice gets one value."""
    batch, seq_new = k_new.shape[:2]
    seq_cache = k_cache.shape[1]
    entry = torch.arange(batch, device=k_new.device)[:, None].expand(batch, seq_new)
    new = torch.arange(seq_new, device=k_new.device)[None, :]
    rows = lengths[:, None].long() + new
    fits, first_fits = rows < seq_cache, (lengths < seq_cache)[:, None]
    target = torch.where(fits, rows, torch.where(first_fits, lengths[:, None].long(), seq_cache - 1))
    source = torch.where(fits, new, 0).expand(batch, seq_new)
    unchanged = (~fits & ~first_fits)[..., None, None]
    for cache, values in ((k_cache, k_new), (v_cache, v_new)):
        written = torch.where(unchanged, cache[entry, target], values[entry, source])
        cache.index_put_((entry, target), written)


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


def _lengths(cache_seqlens, batch: int, device) -> torch.Tensor:
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    if not (isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.dtype == torch.int32
            and tuple(cache_seqlens.shape) == (batch,) and cache_seqlens.device == device):
        raise ValueError(f"attention_with_kvcache: cache_seqlens an int or an int32 [batch] = [{batch}] tensor on "
                         f"{device}, got {_described(cache_seqlens)}")
    return cache_seqlens


def _checked(q, k_cache, v_cache, k_new, v_new) -> tuple:
    """q's [batch, seq_q, heads, d], each argument checked before the caches are written; ValueError in one line
    otherwise."""
    tensors = (q, k_cache, v_cache) + tuple(x for x in (k_new, v_new) if x is not None)
    if not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in tensors):
        raise ValueError(f"attention_with_kvcache: q [batch, seq_q, heads, d], k_cache and v_cache [batch, "
                         f"seq_cache, kv_heads, d], 4-D tensors; got {', '.join(_described(x) for x in tensors)}")
    batch, _, heads, d = q.shape
    if k_cache.shape != v_cache.shape or k_cache.shape[0] != batch or k_cache.shape[3] != d:
        raise ValueError(f"attention_with_kvcache: k_cache and v_cache [batch, seq_cache, kv_heads, d] alike, with "
                         f"q's batch and d; got q {tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"attention_with_kvcache: q, k_cache and v_cache all float16 or all bfloat16, got {q.dtype}, "
                         f"{k_cache.dtype}, {v_cache.dtype}")
    if d not in HEAD_DIMS or not k_cache.shape[2] or heads % k_cache.shape[2]:
        raise ValueError(f"attention_with_kvcache: head dim {', '.join(map(str, HEAD_DIMS))} and kv_heads dividing "
                         f"heads, got d {d}, {heads} heads and {k_cache.shape[2]} kv_heads")
    if len({x.device for x in tensors}) != 1 or not q.is_cuda:
        raise ValueError(f"attention_with_kvcache: every tensor on one CUDA device, got "
                         f"{', '.join(str(x.device) for x in tensors)}")
    if (k_new is None) != (v_new is None) or k_new is not None and (
            k_new.shape != v_new.shape or k_new.shape[0] != batch or k_new.shape[2:] != k_cache.shape[2:]
            or k_new.dtype != k_cache.dtype or v_new.dtype != v_cache.dtype):
        raise ValueError(f"attention_with_kvcache: k_new and v_new both or neither, [batch, seq_new, kv_heads, d] "
                         f"of the caches' batch, heads, d and dtype; got {_described(k_new)}, {_described(v_new)}")
    return tuple(q.shape)


def _described(x) -> str:
    return f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)
