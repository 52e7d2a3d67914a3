"""The attention family's one launch module: the FlashAttention-2-form kernel (`Attention`, any sm_80 or newer
GPU) and Hopper's (`HopperAttention`), the path each call takes (`AttentionPaths`), and the kernels shipped per chip."""
from __future__ import annotations

import functools
from dataclasses import replace
from functools import partial

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.common import MapOperand, Plans, TensorMaps, allocator, on_16_bytes, operand_slots
from mlir_tile.kernels.flash import combine, sm80, sm90, sm90_layouts
from mlir_tile.kernels.flash.packed import PackedAttention, descale_addresses, token_rows
from mlir_tile.kernels.flash.sm80_tiles import CONFIGS, Config, picked
from mlir_tile.kernels.flash.sm90_tiles import (FP8_HEAD_DIMS, HEAD_DIMS, PAGE_BOXES, HopperAttentionConfig,
                                                band_lengths, page_box_rows)
from mlir_tile.kernels.flash.variants import variant_arguments
from mlir_tile.runtime import POINTER, TENSOR_MAP


def shipped_kernels(chip: str):
    """(name, build) of every kernel `AttentionPaths` may pick for `chip`: the FlashAttention-2-form kernels
    (`Attention`'s, built for the chip: sm_80 stores O without stmatrix) and, where the chip runs them, Hopper's
    (`hopper_shipped_kernels`)."""
    for config in CONFIGS:
        for kernel in dict.fromkeys((config, picked(config.head_dim, config.causal, config.element, chip))):
            yield str(kernel), partial(sm80.build_module, kernel, chip=chip)
    if runs_warpgroup_kernels(chip):
        yield from hopper_shipped_kernels(chip)


class AttentionPaths:
    """attention(q, k, v, causal, descales) on a library's chip, the one place that picks the kernel: Hopper's
    (`HopperAttention`: TMA, wgmma) where the chip runs it, else the FlashAttention-2-form kernel (`Attention`:
    any sm_80 or newer GPU). Both take q, k and v on 16 bytes: a view off them is copied onto them first.
    fp8 (`descales`): Hopper's only. k and v with fewer heads than q (grouped-query attention): Hopper's kernel
    reads each K/V head for its group's query heads; the other one takes them repeated (a copy)."""

    def __init__(self, library):
        self.library, self.sm80 = library, Attention(library)
        self.hopper = HopperAttention(library) if runs_warpgroup_kernels(library.chip) else None

    def __call__(self, q, k, v, *, causal: bool = False, descales=None, variant=None, operands=()):
        if descales is None and variant is None and not operands and self.takes_token_rows(q, k):
            return self.packed_call(q, k, v, causal)
        q, k, v = (on_16_bytes(x.contiguous()) for x in (q, k, v))
        if _empty(q, k, v):  # (torch's: O and the log-sum-exp empty)
            return self.empty_outputs(q, k, v)
        if variant is not None and self.hopper is None:
            raise ValueError(f"attention: variants run on Hopper's path, which this GPU ({self.library.chip}) has not")
        if variant is not None:
            return self.hopper(q, k, v, causal=causal, descales=descales, variant=variant, operands=operands)
        if descales is not None:
            if self.hopper is None:
                raise ValueError(f"attention: float8_e4m3fn inputs run on Hopper's path, which this GPU "
                                 f"({self.library.chip}) has not")
            return self.hopper(q, k, v, causal=causal, descales=descales)
        if self.hopper is None and k.dim() == 4 and q.dim() == 4 and k.shape[1] != q.shape[1]:
            k, v = _repeated_heads(q, k, v)
        return (self.hopper or self.sm80)(q, k, v, causal=causal)

    def takes_token_rows(self, q, k) -> bool:
        """Whether 16-bit q, k, v run as packed sequences of one length each (`token_major`) on this chip: Hopper's
        path only (its packed kernels)."""
        import torch

        return self.hopper is not None and q.dtype in (torch.float16, torch.bfloat16) and token_major(q, k)

    def empty_outputs(self, q, k, v):
        """(O, log-sum-exp) as a call on q, k, v of these shapes and strides gives them (the operator's fake): O in
        q's shape, the log-sum-exp [batch, heads, seq] fp32, each laid out as the path that runs writes it."""
        import torch

        if self.takes_token_rows(q, k):
            return packing_of(q, k, v).empty_outputs(q)
        o_type = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
        return q.new_empty(q.shape, dtype=o_type), q.new_empty(q.shape[:3], dtype=torch.float32)

    def packed_call(self, q, k, v, causal: bool, with_plan: bool = False):
        """q, k, v [batch, heads, seq, d] as packed sequences (`packing_of`: a batch entry's token rows, or a (batch,
        K/V head)'s rows read in place): O and the log-sum-exp as views of the packed kernel's (`with_plan`: and a
        `TokenRowsStep` that a call on tensors of the same shapes, strides and dtype may run, None where no kernel
        ran)."""
        if not (k.dim() == 4 and k.shape == v.shape and k.shape[0] == q.shape[0] and k.shape[3] == q.shape[3]):
            raise ValueError(f"attention: q [batch, heads, seq_q, d], k and v [batch, kv_heads, seq_k, d]; got "
                             f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
        packing = packing_of(q, k, v)
        if q.shape[0] == 0:  # (torch's: O and the log-sum-exp empty)
            return (*packing.empty_outputs(q), None) if with_plan else packing.empty_outputs(q)
        o, lse, plan = self.hopper.packing.packed(*(packing.rows(x) for x in (q, k, v)), *packing.offsets(q.device),
                                                  packing.queries, causal=packing.causal(causal),
                                                  max_seqlen_k=packing.keys, with_plan=True)
        outputs = packing.outputs(o, lse)
        return (*outputs, plan and TokenRowsStep(plan, packing)) if with_plan else outputs

    def planned(self, q, k, v, causal: bool) -> "PlannedAttention":
        """A call on q, k, v of these shapes and dtype (contiguous, on 16 bytes, 16-bit: a call before checked
        them) as its launch plan and O's dtype: (O, log-sum-exp) given q, k, v."""
        import torch

        element = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
        return PlannedAttention((self.hopper or self.sm80).plans[_plan_key(q, k, causal, element)],
                                allocator(q.shape[:3], torch.float32, q.device))


def _plan_key(q, k, causal: bool, element: str, variant=None) -> tuple:
    """What both paths keep a launch plan by: q's head dim, the mask, the element, q's batch, heads and length,
    k's heads, the variant."""
    batch, heads, seq, d = q.shape
    return d, bool(causal), element, batch, heads, seq, k.shape[1], variant


def token_major(q, k) -> bool:
    """Whether `attention` takes q, k, v [batch, heads, seq, d] as packed sequences of one length each (the
    packed kernels, cu_seqlens of b x seq): where q's and k's lengths differ (causal then aligned to the bottom
    right, FlashAttention's, as a KV cache's queries are its last), or where q lies as [batch, seq, heads, d]
    (a projection's output seen as [batch, heads, seq, d], read in place rather than copied). O, the
    log-sum-exp and the gradients then lie as the packed kernels write them."""
    if q.dim() != 4 or k.dim() != 4:
        return False
    batch, heads, seq, d = q.shape
    return q.shape[2] != k.shape[2] or (not q.is_contiguous() and seq > 1 and q.stride(3) == 1 and q.stride(1) == d
                                        and q.stride(0) == seq * q.stride(2))


def empty_gradients(q, k, v) -> tuple:
    """(dq, dk, dv) as the backward gives them (the operator's fake): contiguous, or laid out as the packed
    sequences it runs where the forward did (`token_major`, `packing_of`)."""
    if not token_major(q, k):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    return packing_of(q, k, v).backward.empty_gradients(q, k, v)


def as_token_rows(x):
    """[batch, heads, seq, d] `x` as [batch x seq, heads, d] token rows: a view where it lies as [batch, seq,
    heads, d] (`token_rows` then reads it in place), else a copy."""
    batch, heads, seq, d = x.shape
    return x.transpose(1, 2).reshape(batch * seq, heads, d)


def heads_as_sequences(q, k, v) -> bool:
    """Whether q, k, v [batch, heads, seq, d] that `attention` runs as packed sequences (`token_major`) are each
    contiguous heads-first (Hugging Face's caches): then they are read in place as sequences of one head
    (`HeadSequences`, `QueryHeadSequences`); else a batch entry's token rows (`TokenRows`: copies of heads-first
    tensors)."""
    return (all(x.dim() == 4 and x.is_contiguous() for x in (q, k, v)) and k.shape == v.shape
            and 1 <= k.shape[1] and q.shape[1] % k.shape[1] == 0)


def packing_of(q, k, v):
    """How a `token_major` call lays q, k, v out as packed sequences: where `heads_as_sequences`, a (batch, K/V
    head) a sequence (`HeadSequences`: each K/V head's queries one head's rows, kv_heads = heads, or one row a
    head, a decode step) or a (batch, query head) one (`QueryHeadSequences`: grouped heads of several queries);
    else `TokenRows`."""
    if not heads_as_sequences(q, k, v):
        return TokenRows(q.shape, k.shape)
    grouped_queries = k.shape[1] != q.shape[1] and q.shape[2] > 1
    return (QueryHeadSequences if grouped_queries else HeadSequences)(q.shape, k.shape)


class TokenRows:
    """q, k, v [batch, heads, seq, d] as packed sequences, one a batch entry, their rows [batch x seq, heads, d]
    (`as_token_rows`: views where they lie as [batch, seq, heads, d], else copies); O, the log-sum-exp and the
    gradients as views of the packed kernels' [tokens, heads, d] and [heads, tokens]."""

    def __init__(self, q_shape, k_shape):
        self.q_shape, self.k_shape = tuple(q_shape), tuple(k_shape)
        self.queries, self.keys = q_shape[2], k_shape[2]
        self.backward = self  # (the packing the backward runs on)

    def rows(self, x):
        return as_token_rows(x)

    def offsets(self, device) -> tuple:
        """cu_seqlens_q and cu_seqlens_k."""
        batch = self.q_shape[0]
        return sequence_offsets(batch, self.queries, device), sequence_offsets(batch, self.keys, device)

    def causal(self, causal: bool) -> bool:
        return causal

    def outputs(self, o, lse) -> tuple:
        return _heads_first(o, lse, self.q_shape)

    def statistic(self, x):
        """A [batch, heads, seq] statistic (the log-sum-exp, its gradient) as the packed kernels' [heads, tokens]."""
        return None if x is None else x.permute(1, 0, 2).reshape(self.q_shape[1], -1)

    def gradients(self, dq, dk, dv) -> tuple:
        return tuple(x.view(shape[0], shape[2], shape[1], shape[3]).transpose(1, 2)
                     for x, shape in zip((dq, dk, dv), (self.q_shape, self.k_shape, self.k_shape)))

    def empty_outputs(self, q) -> tuple:
        import torch

        batch, heads, seq, d = q.shape
        return (q.new_empty(batch, seq, heads, d).transpose(1, 2),
                q.new_empty(heads, batch, seq, dtype=torch.float32).permute(1, 0, 2))

    def empty_gradients(self, q, k, v) -> tuple:
        return tuple(x.new_empty(x.shape[0], x.shape[2], x.shape[1], x.shape[3]).transpose(1, 2) for x in (q, k, v))


class HeadSequences(TokenRows):
    """q, k, v [batch, heads, seq, d] (`heads_as_sequences`, kv_heads = heads or one query a head) as packed
    sequences of one head, one a (batch, K/V head): its queries the rows of its query heads one after another,
    [batch x heads x seq, 1, d] read in place;
    O, the log-sum-exp and the gradients contiguous heads-first. Grouped heads come here with one query row a head,
    which sees every key, causal or not: a sequence of several rows is then run without the mask (which would
    hide a sequence's last keys from its first rows)."""

    def __init__(self, q_shape, k_shape):
        super().__init__(q_shape, k_shape)
        self.queries = q_shape[1] // k_shape[1] * q_shape[2]

    def rows(self, x):
        return x.reshape(-1, 1, x.shape[3])

    def offsets(self, device) -> tuple:
        sequences = self.k_shape[0] * self.k_shape[1]
        return sequence_offsets(sequences, self.queries, device), sequence_offsets(sequences, self.keys, device)

    def causal(self, causal: bool) -> bool:
        return causal and self.queries == self.q_shape[2]

    def outputs(self, o, lse) -> tuple:
        return o.view(self.q_shape), lse.view(self.q_shape[:3])

    def statistic(self, x):
        return None if x is None else x.reshape(1, -1)

    def gradients(self, dq, dk, dv) -> tuple:
        return dq.view(self.q_shape), dk.view(self.k_shape), dv.view(self.k_shape)

    def empty_outputs(self, q) -> tuple:
        import torch

        return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)

    def empty_gradients(self, q, k, v) -> tuple:
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


class QueryHeadSequences(HeadSequences):
    """Contiguous heads-first q, k, v (`heads_as_sequences`) with grouped heads of several queries each: each
    (batch, query head) a packed sequence of one head, its queries [batch x heads x seq, 1, d] and its K/V
    head's keys read in place, each sequence followed by an empty one so that the next may start its keys
    anywhere (`sequence_offsets(gaps=True)`'s form: the query heads of a K/V head read its rows in turn), causal
    as any sequence of a head's queries; O and the log-sum-exp contiguous heads-first. The backward runs on token
    rows (`backward`: copies), whose sequences add a K/V head's query heads into its dK and dV (sequences of
    their own would each write them)."""

    def __init__(self, q_shape, k_shape):
        super().__init__(q_shape, k_shape)
        self.queries, self.backward = q_shape[2], TokenRows(q_shape, k_shape)

    def offsets(self, device) -> tuple:
        batch, heads = self.q_shape[:2]
        return (sequence_offsets(batch * heads, self.queries, device, gaps=True),
                _query_head_keys(batch, heads, self.k_shape[1], self.keys, device))


def kept_per_shape(make, most: int = 256):
    """`make` (device tensors from ints and a device) made once a shape and kept (the first `most` shapes). A
    CUDA graph's capture reads one made before it (its memory written, never freed); one first asked for under a
    capture is made afresh there and not kept (the capture only records the ops: kept, its memory would be read
    by eager calls before any replay had written it). (Made afresh in every capture, they were some ten small
    kernels in each replay of a decode step's graph.)"""
    kept = {}

    @functools.wraps(make)
    def made(*arguments):
        import torch

        if arguments in kept:
            return kept[arguments]
        value = make(*arguments)
        if len(kept) < most and not torch.cuda.is_current_stream_capturing():
            kept[arguments] = value
        return value
    return made


@kept_per_shape
def _offsets(batch: int, seq: int, device, gaps: bool):
    import torch

    if gaps:  # (sequence 2b's first token b x seq, 2b + 1's too)
        return torch.arange(2 * batch + 1, dtype=torch.int32, device=device).add(1).div(2, rounding_mode="floor") * seq
    return torch.arange(batch + 1, dtype=torch.int32, device=device) * seq


@kept_per_shape
def _query_head_keys(batch: int, heads: int, kv_heads: int, seq: int, device):
    """cu_seqlens_k of `QueryHeadSequences`: (batch b, query head h)'s keys the rows of K/V head h / group of
    [batch x kv_heads x seq] (its sequence 2 (b heads + h)), each followed by an empty sequence (int32 [2 batch
    heads + 1])."""
    import torch

    sequence = torch.arange(batch * heads, device=device)
    starts = (sequence // heads * kv_heads + sequence % heads // (heads // kv_heads)) * seq
    ends = torch.stack((starts, starts + seq), 1).flatten()
    return torch.cat((ends, ends.new_full((1,), batch * kv_heads * seq))).to(torch.int32)


def sequence_offsets(batch: int, seq: int, device, *, gaps: bool = False):
    """cu_seqlens of `batch` sequences of `seq` tokens each (int32 [batch + 1] on `device`), or with `gaps` each
    followed by an empty one ([2 batch + 1]: what a cache's queries pair with its keys' `cache_offsets`), made
    once a shape (`kept_per_shape`)."""
    return _offsets(batch, seq, device, gaps)


def grouped_heads(q, k, v) -> bool:
    """Whether k and v are [batch, kv_heads, seq, d] of one shape beside q's [batch, heads, seq, d], kv_heads
    dividing heads (grouped-query attention; kv_heads = heads: the plain case)."""
    return (q.dim() == 4 and k.dim() == 4 and k.shape == v.shape and k.shape[0] == q.shape[0]
            and k.shape[2:] == q.shape[2:] and k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0)


def _repeated_heads(q, k, v):
    """k and v with each head repeated for its group of q's heads (checked: `grouped_heads`), as the
    FlashAttention-2-form kernel reads one K/V head a query head."""
    if not grouped_heads(q, k, v):
        raise ValueError(f"attention: q [batch, heads, seq, d], k and v [batch, kv_heads, seq, d] with kv_heads "
                         f"dividing heads, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    return (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))


def _heads_first(o, lse, shape):
    """The packed kernels' O [tokens, heads, d] and log-sum-exp [heads, tokens] as [batch, heads, seq, d] and
    [batch, heads, seq] views."""
    batch, heads, seq, d = shape
    return o.view(batch, seq, heads, d).transpose(1, 2), lse.view(heads, batch, seq).permute(1, 0, 2)


class TokenRowsStep:
    """An eager `attention` call on q, k, v run as packed sequences (`token_major`) whose shapes, strides, dtype
    and offset past 16 bytes an earlier call checked (its key): the rows (its `packing`'s, read in place where the
    first call's were, else `token_rows`' copies), the offsets, the packed plan's launch (`_PackedPlan.run`)."""

    def __init__(self, plan, packing: TokenRows):
        self.plan, self.packing, self.in_place = plan, packing, None

    def __call__(self, q, k, v):
        from mlir_tile.runtime import torch_stream

        rows = [self.packing.rows(x) for x in (q, k, v)]
        if self.in_place is None:  # (what the key fixes decides it: the first call's answer is every call's)
            self.in_place = [token_rows(x) is x for x in rows]
        rows = [x if kept else token_rows(x) for x, kept in zip(rows, self.in_place)]
        offsets = self.packing.offsets(q.device)
        o, lse = self.plan.run(torch_stream(q), *(x.data_ptr() for x in rows), tuple(x.data_ptr() for x in offsets))
        return self.packing.outputs(o, lse)


class PlannedAttention:
    """A plan's call on 16-bit q, k, v: O (as q) and the log-sum-exp (`new_lse`) allocated, the addresses given
    to the launch."""

    def __init__(self, plan, new_lse):
        import torch

        from mlir_tile.runtime import torch_stream

        self.plan, self.new_lse, self.stream, self.empty_like = plan, new_lse, torch_stream, torch.empty_like

    def __call__(self, q, k, v):
        o, lse = self.empty_like(q), self.new_lse()  # (q is contiguous: O is laid out as it)
        self.plan(self.stream(q), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
        return o, lse


class Attention:
    """O, lse = attention(q, k, v, causal) on torch tensors [batch, heads, seq, d] (contiguous, fp16 or bf16,
    d 64 or 128) by the FlashAttention-2-form kernel built for the library's chip (sm_80 or newer), through
    mlir-tile's runtime on torch's current stream. ValueError for what it does not take."""

    def __init__(self, library, shapes: dict | None = None):
        """`library`: where the kernels come from (a `KernelLibrary`); `shapes`: per head dim, the Config fields
        (warps, row_blocks, keys, ...) of the kernels to use; else `picked`'s for the (head dim, causal), else the
        default CTA."""
        self.library, self.plans, self.shapes = library, Plans(), shapes or {}

    def __call__(self, q, k, v, *, causal: bool = False):
        import torch

        from mlir_tile.runtime import torch_stream

        element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(q.dtype)
        if element is None or k.dtype != q.dtype or v.dtype != q.dtype:
            raise ValueError(f"attention: q, k, v all float16 or all bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}")
        if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
            raise ValueError(f"attention: q, k, v of one shape [batch, heads, seq, d], got {tuple(q.shape)}, "
                             f"{tuple(k.shape)}, {tuple(v.shape)}")
        batch, heads, seq, d = q.shape
        if d not in (64, 128):
            raise ValueError(f"attention: head dim 64 or 128, got {d}")
        if not all(x.is_cuda and x.is_contiguous() for x in (q, k, v)) or seq == 0:
            raise ValueError("attention: contiguous CUDA tensors with seq >= 1")
        if any(x.data_ptr() % 16 for x in (q, k, v)):  # (its copies are 16-byte cp.async: else a misaligned fault)
            raise ValueError("attention: q, k and v start on 16 bytes (the kernel copies 16-byte chunks); a view "
                             "that starts elsewhere needs .clone() first")
        plan = self.plans.of(_plan_key(q, k, causal, element),
                             lambda: self._plan(d, bool(causal), element, batch * heads, seq))
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, seq, dtype=torch.float32, device=q.device)
        plan(torch_stream(q), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
        return o, lse

    def _plan(self, d: int, causal: bool, element: str, heads: int, seq: int):
        """The launch of the kernel for (d, causal, element) over `heads` heads of `seq` rows (`runtime.Launch`)."""
        config = Config(d, causal, element, **self.shapes[d]) if d in self.shapes else picked(d, causal, element,
                                                                                               self.library.chip)
        module = self.library.module(str(config), partial(sm80.build_module, config, chip=self.library.chip))
        return module.prepare(sm80.KERNEL, [POINTER] * 5 + [seq], grid=config.grid(heads, seq), block=config.threads,
                              shared_bytes=config.shared_bytes)


def hopper_shipped_kernels(chip: str):
    """(name, build) of the kernels `HopperAttention` picks where `chip` runs them: each head dim, mask and
    element, and where the measured table changes it up to a length (`band_lengths`), those too; packed
    sequences', and theirs over a paged cache (`page_rows`: boxes of 16 and 64 rows, and of whole key tiles); a decode
    step's (`packed.packed_config`: a sequence's queries fewer than a row tile), with pack_gqa and split-KV, and
    split-KV's combines (e4m3's too: an fp8 KV cache's, O in bf16)."""
    if not runs_warpgroup_kernels(chip):
        return
    for d in HEAD_DIMS:
        for causal in (False, True):
            for element in ("f16", "bf16", "e4m3") if d in FP8_HEAD_DIMS else ("f16", "bf16"):
                seqs = {1} | {longest + 1 for longest in band_lengths(d, causal, element)}
                configs = {HopperAttentionConfig.picked(d, causal, element, seq) for seq in seqs}
                packed = {HopperAttentionConfig.packed(d, causal, element, seq) for seq in seqs}
                decode = HopperAttentionConfig.packed(d, causal, element, 1)
                packed |= {replace(decode.decoding() if pack else decode, pack_gqa=pack, split_kv=split)
                           for pack in (False, True) for split in (False, True)}
                configs |= packed | {replace(config, page_rows=rows) for config in packed
                                     for rows in {page_box_rows(size, config.keys) for size in (*PAGE_BOXES, 256)}}
                for config in sorted(configs, key=str):
                    yield str(config), partial(sm90.build_module, config)
        for element in ("f16", "bf16"):
            summing = combine.CombineConfig(d, element)
            yield str(summing), partial(combine.build_module, summing)


class HopperAttention:
    """(O, log-sum-exp) of torch tensors q, k, v [batch, heads, seq, d] (contiguous; f16 or bf16 with d 64, 128
    or 256; float8_e4m3fn with d 128 and descales, O in bf16) on Hopper's path, on torch's current
    stream; kernels from `library` (a `KernelLibrary`), the tensor maps kept (`common.TensorMaps`).
    ValueError for what the kernel does not take."""

    def __init__(self, library, shape: dict | None = None):
        """`shape`: HopperAttentionConfig's fields other than d, the mask and the element (keys, consumers,
        stages) where not the defaults."""
        self.library, self.maps, self.plans, self.shape = library, TensorMaps(library.runtime), Plans(), shape or {}
        self.sms = library.runtime.device.properties.multiprocessor_count
        self.packing = PackedAttention(library, self.maps, self.plans, self.sms)  # (packed sequences, paged caches)

    def __call__(self, q, k, v, *, causal: bool = False, descales=None, variant=None, operands=()):
        """`descales` (fp8 only, required there): (q's, k's, v's) fp32 tensors on q's device, each of one
        element or each [batch, kv_heads] (FlashAttention-3's descale_q, descale_k, descale_v: `descale_addresses`):
        the scores of a K/V head's queries are (q k^T) * descale_q * descale_k / sqrt(d), O is P v * descale_v.
        `variant` (`variants.Variant`) with its `operands` (in its order: numbers, and for a "head" operand a
        tensor [heads] or [batch, heads]): which keys each row sees, the score step and the sink."""
        import torch

        from mlir_tile.runtime import torch_stream

        element = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3"}.get(q.dtype)
        if element is None or k.dtype != q.dtype or v.dtype != q.dtype or not grouped_heads(q, k, v):
            raise ValueError(f"hopper attention: q [batch, heads, seq, d], k and v [batch, kv_heads, seq, d] with "
                             f"kv_heads dividing heads, all float16, bfloat16 or float8_e4m3fn; got {tuple(q.shape)} "
                             f"{q.dtype}, {tuple(k.shape)} {k.dtype}, {tuple(v.shape)} {v.dtype}")
        batch, heads, seq, d = q.shape
        if d not in (FP8_HEAD_DIMS if element == "e4m3" else HEAD_DIMS):
            raise ValueError(f"attention: head dim {', '.join(map(str, HEAD_DIMS))} (256 on Hopper's path only; "
                             f"float8_e4m3fn: {', '.join(map(str, FP8_HEAD_DIMS))}), got {d}")
        if not all(x.is_cuda and x.is_contiguous() and x.data_ptr() % 16 == 0 for x in (q, k, v)) or seq == 0:
            raise ValueError("hopper attention: contiguous CUDA tensors on 16 bytes (TMA) with seq >= 1")
        # (`kept`: a variant's per-head values as the kernel reads them, held until it is launched)
        arguments, kept = variant_arguments(variant, operands, bool(causal), seq, (batch, heads, q.device))
        scales = descale_addresses(descales, element, q.device, (batch, k.shape[1])) + arguments
        plan = self.plans.of(_plan_key(q, k, causal, element, variant),
                             lambda: self._plan(d, bool(causal), element, batch * heads, seq, variant,
                                                heads // k.shape[1]))
        o = torch.empty(q.shape, dtype=torch.bfloat16 if element == "e4m3" else q.dtype, device=q.device)
        lse = torch.empty(batch, heads, seq, dtype=torch.float32, device=q.device)
        plan(torch_stream(q), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), *scales)
        return o, lse

    def _plan(self, d: int, causal: bool, element: str, heads: int, seq: int, variant, group: int) -> "_HopperPlan":
        """The launch over `heads` query heads (batch x heads), `group` of them a K/V head."""
        config = HopperAttentionConfig.picked(d, causal, element, seq, **self.shape)
        module = self.library.module(str(config) + (variant.suffix if variant else ""),
                                     partial(sm90.build_module, config, variant=variant))
        box, size = sm90_layouts.boxes(config), 1 if element == "e4m3" else 2
        o_size = 2  # (O is 16-bit: bf16 from fp8)
        maps = [MapOperand(self.maps, ((heads if name == "q" else heads // group) * seq, d), d * size, box[name])
                for name in "qkv"]
        maps.append(MapOperand(self.maps, (heads, seq, d), d * o_size, box["o"], seq * d * o_size, store=True))
        scales = ([POINTER] * sm90.FP8_PARAMETERS if element == "e4m3" else  # (the descales' addresses, or a variant's operands)
                  operand_slots(variant.operands if variant else ()))
        launch = module.prepare(sm90.KERNEL, [TENSOR_MAP] * 4 + [POINTER, seq, heads, group] + scales,
                                grid=config.grid(heads, seq, self.sms), block=config.threads,
                                shared_bytes=config.shared_bytes)
        return _HopperPlan(launch, maps)

class _HopperPlan:
    """One Hopper attention shape's launch: q's, k's, v's and O's tensor maps (`MapOperand`s), the log-sum-exp's
    address and the descales' or a variant's operands."""

    def __init__(self, launch, maps: list):
        self.launch, self.maps = launch, maps

    def __call__(self, stream: int, q: int, k: int, v: int, o: int, lse: int, *scales) -> None:
        map_q, map_k, map_v, map_o = self.maps
        self.launch(stream, map_q(q), map_k(k), map_v(v), map_o(o), lse, *scales)


def _empty(q, k, v) -> bool:
    """Whether q, k and v are [batch, heads, seq, d] (k and v of one shape, q's batch and d) of one dtype, the
    kernels', with no rows (heads 0 too, which `grouped_heads` does not take)."""
    import torch

    return (q.dim() == k.dim() == 4 and k.shape == v.shape and k.shape[0] == q.shape[0] and k.shape[3] == q.shape[3]
            and 0 in q.shape[:3] and q.dtype == k.dtype == v.dtype
            and q.dtype in (torch.float16, torch.bfloat16, torch.float8_e4m3fn))
