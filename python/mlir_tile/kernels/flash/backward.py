"""Attention's backward on Hopper's path (`sm90_backward`'s kernel) on torch tensors: dQ, dK, dV of O =
attention(q, k, v) from O, its log-sum-exp and dO, and the kernels shipped per chip.

The kernel's two neighbours are `backward_rows`'s kernels, each one pass over the [rows, d] tensors: the
preprocessing (D = rowsum(dO O) and LSE log2(e) in fp32 at the kernel's padded rows, whose others hold D 0 and
LSE +inf so that a padded query's probabilities are 0) and the postprocessing (dQ = dQaccum's rows times the
softmax scale, rounded to q's dtype); dQaccum is zeroed by torch.
"""
from __future__ import annotations

import itertools
import math
from functools import partial

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.common import MapOperand, Plans, TensorMaps, on_16_bytes, operand_slots
from mlir_tile.kernels.flash import backward_rows, sm90_backward
from mlir_tile.kernels.flash.backward_rows import RowsConfig
from mlir_tile.kernels.flash.launch import grouped_heads, packing_of, token_major
from mlir_tile.kernels.flash.sm90_backward_tiles import BACKWARD_HEAD_DIMS, KERNEL, BackwardConfig, boxes
from mlir_tile.kernels.flash.variants import variant_arguments
from mlir_tile.runtime import POINTER, TENSOR_MAP

ELEMENTS = ("f16", "bf16")


def shipped_kernels(chip: str):
    """(name, build) of every backward kernel `HopperAttentionBackward` may pick where `chip` runs them."""
    if not runs_warpgroup_kernels(chip):
        return
    for d in BACKWARD_HEAD_DIMS:
        for causal in (False, True):
            for element in ELEMENTS:
                for varlen, deterministic in itertools.product((False, True), repeat=2):
                    config = BackwardConfig(d, causal, element, varlen=varlen, deterministic=deterministic)
                    yield str(config), partial(sm90_backward.build_module, config)
        for element in ELEMENTS:
            for packed in (False, True):
                for step in backward_rows.PASSES:
                    config = RowsConfig(step, d, element, packed)
                    yield str(config), partial(backward_rows.build_module, config)


class HopperAttentionBackward:
    """(dq, dk, dv) of attention(q, k, v, causal) given dO (`grad`), O and the forward's log-sum-exp, torch
    tensors q, O, dO [batch, heads, seq, d], k and v [batch, kv_heads, seq, d] (kv_heads dividing heads:
    grouped-query attention) and lse [batch, heads, seq] fp32, on Hopper's path, on torch's current stream.
    ValueError for what the kernel does not take."""

    def __init__(self, library):
        self.library, self.maps, self.plans = library, TensorMaps(library.runtime), Plans()

    def __call__(self, grad, q, k, v, o, lse, *, causal: bool = False, grad_lse=None, deterministic=None,
                 variant=None, operands=()):
        """`grad_lse`: the log-sum-exp's gradient where it has one (d lse / d s is P, so it enters as
        dS = P (dP - (D - grad_lse)): D less it). `deterministic`: dQ the same bitwise from run to run (the key
        blocks' additions in their order: `BackwardConfig.deterministic`); None: as torch says
        (`torch.use_deterministic_algorithms`). Where the forward ran q, k, v as packed sequences (`token_major`:
        lengths that differ, or q as [batch, seq, heads, d] rows), so does this (`packed`), the gradients views of
        its [tokens, heads, d]. `variant` (`variants.Variant`: keys, a score step with its score_gradient, no
        sink) with its `operands`: the gradients of attention with it (with keys: not causal)."""
        import torch

        if variant is not None and variant.keys is not None and causal:
            raise ValueError(f"attention backward: variant {variant.name!r} says which keys each row sees: not "
                             f"causal (its keys say it)")
        if variant is None and token_major(q, k) and k.dim() == 4 and all(x.shape == q.shape for x in (o, grad)):
            return self._as_packed(grad, q, k, v, o, lse, causal, grad_lse, deterministic)
        element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(q.dtype)
        if element is None or any(x.dtype != q.dtype for x in (k, v, o, grad)):
            raise ValueError(f"attention backward: q, k, v, O and dO all float16 or all bfloat16, got "
                             f"{', '.join(str(x.dtype) for x in (q, k, v, o, grad))}")
        if not grouped_heads(q, k, v) or any(x.shape != q.shape for x in (o, grad)) or lse.shape != q.shape[:3]:
            raise ValueError(f"attention backward: q, O and dO [batch, heads, seq, d], k and v [batch, kv_heads, seq, "
                             f"d] with kv_heads dividing heads, the log-sum-exp [batch, heads, seq]; got q "
                             f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, O {tuple(o.shape)}, dO "
                             f"{tuple(grad.shape)}, lse {tuple(lse.shape)}")
        batch, heads, seq, d = q.shape
        kv_heads = k.shape[1]
        if d not in BACKWARD_HEAD_DIMS:
            raise ValueError(f"attention backward: head dim {' or '.join(map(str, BACKWARD_HEAD_DIMS))}, got {d}")
        if q.numel() == 0 or k.numel() == 0:  # (no rows: nothing to launch)
            return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)  # (contiguous, as the fake's)
        q, k, v, o, grad = (on_16_bytes(x.contiguous()) for x in (q, k, v, o, grad))
        lse = lse.float().contiguous()
        config = BackwardConfig(d, bool(causal), element, deterministic=_deterministic(deterministic))
        # (`kept`: a variant's per-head values as the kernel reads them, held until it is launched)
        arguments, kept = variant_arguments(variant, operands, False, seq, (batch, heads, q.device))
        plan = self.plans.of((config, batch * heads, batch * kv_heads, seq, variant),
                             lambda: self._plan(config, batch * heads, batch * kv_heads, seq, variant))
        return self._run(plan, config, (q, k, v, o, grad), lse, grad_lse, seq, batch * heads, config.padded(seq),
                         operands=arguments)

    def _as_packed(self, grad, q, k, v, o, lse, causal, grad_lse, deterministic):
        """`packed` on [batch, heads, seq, d] tensors laid out as the forward laid them (`launch.packing_of`), the
        statistics [batch, heads, seq] as [heads, tokens]."""
        if lse.shape != q.shape[:3]:
            raise ValueError(f"attention backward: the log-sum-exp [batch, heads, seq] {tuple(q.shape[:3])}, got "
                             f"{tuple(lse.shape)}")
        packing = packing_of(q, k, v).backward
        if q.shape[0] == 0:  # (no sequence: empty gradients, as torch's)
            return packing.empty_gradients(q, k, v)
        cu_seqlens_q, cu_seqlens_k = packing.offsets(q.device)
        gradients = self.packed(*(packing.rows(x) for x in (grad, q, k, v, o)), packing.statistic(lse), cu_seqlens_q,
                                cu_seqlens_k, packing.keys, causal=packing.causal(causal),
                                grad_lse=packing.statistic(grad_lse), deterministic=deterministic)
        return packing.gradients(*gradients)

    def _run(self, plan, config: BackwardConfig, tensors: tuple, lse, grad_lse, tokens: int, heads: int, padded: int,
             places=None, offsets: tuple = (), operands: list = ()):
        """The three launches of both forms, on q, k, v, O and dO (`tensors`, as the kernel reads them) and the
        log-sum-exp of `heads` heads' `tokens` rows: the preprocessing into fresh statistics ([heads, padded]
        each: LSE log2(e) +inf and D 0 where no row lands), `plan`'s kernel into a zeroed dQaccum, the
        postprocessing; (dq, dk, dv), contiguous. Packed sequences: `places` each token's row of the statistics
        and dQaccum (`packed_rows`), `offsets` cu_seqlens_q and cu_seqlens_k; `operands` a variant's launch
        arguments."""
        import torch

        from mlir_tile.runtime import torch_stream

        q, k, v, o, grad = tensors
        stream, placed = torch_stream(q), [] if places is None else [places.data_ptr()]
        statistics = torch.empty(2, heads, padded, dtype=torch.float32, device=q.device)
        statistics[0], statistics[1] = math.inf, 0.0
        passes = self._rows(config.head_dim, config.element, places is not None, tokens, heads, padded)
        passes["prepare"](stream, o.data_ptr(), grad.data_ptr(), lse.data_ptr(), statistics[0].data_ptr(),
                          statistics[1].data_ptr(), *placed)
        if grad_lse is not None and places is None:  # (D less it)
            statistics[1, :, :tokens] -= grad_lse.float().reshape(heads, tokens)
        elif grad_lse is not None:
            statistics[1].index_add_(1, places, grad_lse.float(), alpha=-1)
        dq_sums = torch.zeros(heads, padded, config.head_dim, dtype=torch.float32, device=q.device)
        dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))
        flags = _flags(config, heads, padded, q.device)
        plan(stream, q.data_ptr(), k.data_ptr(), v.data_ptr(), grad.data_ptr(), dq_sums.data_ptr(), dk.data_ptr(),
             dv.data_ptr(), statistics[0].data_ptr(), statistics[1].data_ptr(), *(x.data_ptr() for x in offsets),
             *operands, *(f.data_ptr() for f in flags))
        passes["finish"](stream, dq_sums.data_ptr(), dq.data_ptr(), *placed)
        return dq, dk, dv

    def _rows(self, d: int, element: str, packed: bool, tokens: int, heads: int, padded: int) -> dict:
        """The launches of `backward_rows`'s two passes over `heads` heads' `tokens` rows, by pass."""
        def plan():
            launches = {}
            for step in backward_rows.PASSES:
                config = RowsConfig(step, d, element, packed)
                module = self.library.module(str(config), partial(backward_rows.build_module, config))
                pointers = (5 if step == "prepare" else 2) + packed
                launches[step] = module.prepare(config.kernel, [POINTER] * pointers + [tokens, heads, padded],
                                                grid=config.grid(tokens * heads), block=backward_rows.THREADS)
            return launches
        return self.plans.of(("rows", d, element, packed, tokens, heads, padded), plan)

    def _plan(self, config: BackwardConfig, heads: int, kv_heads: int, seq: int, variant=None):
        """The launch over `heads` query heads (batch x heads) and `kv_heads` K/V heads (batch x kv_heads), with
        `variant`'s keys."""
        module = self.library.module(str(config) + (variant.suffix if variant else ""),
                                     partial(sm90_backward.build_module, config, variant=variant))
        box, d = boxes(config), config.head_dim
        maps = [MapOperand(self.maps, ((heads if name in ("q", "do") else kv_heads) * seq, d), 2 * d, box[name])
                for name in ("q", "k", "v", "do")]
        maps.append(MapOperand(self.maps, (heads * config.padded(seq), d), 4 * d, box["dq"], store=True, floats=True))
        maps += [MapOperand(self.maps, (kv_heads, seq, d), 2 * d, box[name], 2 * seq * d, store=True)
                 for name in ("dk", "dv")]
        maps += [MapOperand(self.maps, (heads, config.padded(seq)), 4 * config.padded(seq), box[name], floats=True)
                 for name in ("lse", "delta")]
        flags = [POINTER] if config.deterministic else []
        operands = operand_slots(variant.operands if variant else ())
        launch = module.prepare(KERNEL, [TENSOR_MAP] * 9 + [seq, heads, heads // kv_heads] + operands + flags,
                                grid=config.grid(kv_heads, seq), block=config.threads, shared_bytes=config.shared_bytes)
        return _BackwardPlan(config, launch, maps + [_given] * (len(operands) + len(flags)))

    def packed(self, grad, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_k: int, *, causal: bool = False,
               grad_lse=None, deterministic=None, variant=None, operands=()):
        """(dq, dk, dv) of `attention_varlen` (packed sequences, `sm90_varlen`: q, O, dO [total_q, heads, d], k, v
        [total_k, kv_heads, d], lse [heads, total_q]); dQaccum and the statistics at FlashAttention-3's padded
        rows: token t of sequence b at t - start_b + (start_b / rows + b) x rows (`packed_rows`). `variant` with
        its `operands` as `__call__`'s, its keys checked as the forward's are (at max_seqlen_k and the lengths up
        to `variants.SHORTER_CHECKED`)."""
        from mlir_tile.kernels.flash.packed import checked_packed, row_pitch, token_rows

        element = checked_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, "max_seqlen_k")
        q, k, v = (token_rows(x) for x in (q, k, v))
        (total_q, heads, d), (total_k, kv_heads, _) = q.shape, k.shape
        if any(x.shape != q.shape or x.dtype != q.dtype for x in (o, grad)) or lse.shape != (heads, total_q):
            raise ValueError(f"attention_varlen backward: O and dO as q {tuple(q.shape)} {q.dtype}, lse "
                             f"[heads, total_q]; got {tuple(o.shape)} {o.dtype}, {tuple(grad.shape)} {grad.dtype}, "
                             f"{tuple(lse.shape)}")
        if d not in BACKWARD_HEAD_DIMS:
            raise ValueError(f"attention_varlen backward: head dim {' or '.join(map(str, BACKWARD_HEAD_DIMS))}, "
                             f"got {d}")
        batch = cu_seqlens_q.shape[0] - 1
        if not (total_q and total_k and max_seqlen_k):
            return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)  # (contiguous, as the fake's)
        config = BackwardConfig(d, bool(causal), element, varlen=True, deterministic=_deterministic(deterministic))
        # (`kept`: a variant's per-head values as the kernel reads them, held until it is launched)
        arguments, kept = variant_arguments(variant, operands, bool(causal), max_seqlen_k, (batch, heads, q.device),
                                            shorter=True)
        rows, padded = packed_rows(cu_seqlens_q, total_q, config.rows)
        # (the kernel's `seq`: the longest's keys, whole key blocks; a variant's keys' exactly, where it tells
        # the lengths the host checked)
        seq = -(-max_seqlen_k // config.keys) * config.keys
        if variant is not None and variant.keys is not None:
            seq = max_seqlen_k
        pitches = tuple(row_pitch(x) for x in (q, k, v))
        shape = (total_q, total_k, heads, kv_heads, batch, seq, pitches)
        plan = self.plans.of(("packed", config, *shape, variant), lambda: self._packed_plan(config, *shape, variant))
        o, grad = (on_16_bytes(x.contiguous()) for x in (o, grad))
        return self._run(plan, config, (q, k, v, o, grad), lse.float().contiguous(), grad_lse, total_q, heads, padded,
                         places=rows, offsets=(cu_seqlens_q, cu_seqlens_k), operands=arguments)

    def _packed_plan(self, config: BackwardConfig, total_q: int, total_k: int, heads: int, kv_heads: int,
                     batch: int, seq: int, pitches: tuple, variant=None):
        """The launch over `batch` sequences' blocks of keys (of the longest, `seq` keys) of `kv_heads` K/V heads;
        q's, k's and v's rows `pitches` bytes apart (dO's contiguous); with `variant`'s operands."""
        module = self.library.module(str(config) + (variant.suffix if variant else ""),
                                     partial(sm90_backward.build_module, config, variant=variant))
        box, d, padded = boxes(config), config.head_dim, padded_rows(total_q, batch, config.rows)
        maps = [MapOperand(self.maps, (total, count * d), pitch, box[name]) for name, total, count, pitch in (
            ("q", total_q, heads, pitches[0]), ("k", total_k, kv_heads, pitches[1]),
            ("v", total_k, kv_heads, pitches[2]), ("do", total_q, heads, 2 * heads * d))]
        maps.append(MapOperand(self.maps, (heads * padded, d), 4 * d, box["dq"], store=True, floats=True))
        maps += [int, int]  # (pointers, given as they are)
        maps += [MapOperand(self.maps, (heads, padded), 4 * padded, box[name], floats=True)
                 for name in ("lse", "delta")]
        flags = [POINTER] if config.deterministic else []
        operands = operand_slots(variant.operands if variant else ())
        maps += [int] * 2 + [_given] * (len(operands) + len(flags))  # (pointers and numbers, given as they are)
        launch = module.prepare(KERNEL, [TENSOR_MAP] * 5 + [POINTER] * 2 + [TENSOR_MAP] * 2 + [
            seq, batch * kv_heads, heads // kv_heads] + [POINTER] * 2 + [kv_heads, total_q, total_k, padded]
            + operands + flags, grid=config.grid(batch * kv_heads, seq), block=config.threads,
            shared_bytes=config.shared_bytes)
        return _BackwardPlan(config, launch, maps)


def _deterministic(asked) -> bool:
    """Whether the backward orders dQ's additions: as asked, or (None) as torch's deterministic switch is."""
    import torch

    return torch.are_deterministic_algorithms_enabled() if asked is None else bool(asked)


def _flags(config: BackwardConfig, heads: int, padded: int, device) -> list:
    """The deterministic mode's zeroed flags, the launch's last argument (none otherwise)."""
    import torch

    if not config.deterministic:
        return []
    return [torch.zeros(config.flags(heads, padded), dtype=torch.int32, device=device)]


def padded_rows(total_q: int, batch: int, rows: int) -> int:
    """dQaccum's and the statistics' rows a head for packed sequences (`packed_rows`), and a block past them
    whose last row tokens outside every sequence go to (whole blocks: a row of the statistics is 16-byte
    aligned, as TMA takes its stride)."""
    return (total_q // rows + batch + 1) * rows


def packed_rows(cu_seqlens_q, total_q: int, rows: int):
    """(each token's row of dQaccum and the statistics, their rows a head): token t of sequence b (its bounds
    clamped into total_q as the kernel's `Sequence` clamps them) at t - start_b + (start_b / rows + b) x rows,
    a token outside every sequence at the last row, which no block reaches (int32). On the device, no
    synchronization."""
    import torch

    batch = cu_seqlens_q.shape[0] - 1
    tokens, sequence, inside, starts = token_sequences(cu_seqlens_q, total_q)
    padded = padded_rows(total_q, batch, rows)
    first = (starts // rows + torch.arange(batch, device=tokens.device)) * rows
    return torch.where(inside, tokens - starts[sequence] + first[sequence], padded - 1).int(), padded


def token_sequences(cu_seqlens_q, total_q: int) -> tuple:
    """(the tokens 0 to total_q, each one's sequence, whether it lies inside it, the sequences' first tokens) of
    packed rows, the bounds clamped into total_q as the kernel's `Sequence` clamps them (int64, on the device)."""
    import torch

    offsets = cu_seqlens_q.long()
    offsets = torch.where(offsets < 0, total_q, offsets).clamp(max=total_q)  # (the kernel reads them unsigned)
    ends = offsets[1:]
    starts = torch.minimum(offsets[:-1], ends)
    tokens = torch.arange(total_q, device=cu_seqlens_q.device)
    sequence = torch.searchsorted(ends, tokens, right=True).clamp(max=cu_seqlens_q.shape[0] - 2)
    return tokens, sequence, (tokens >= starts[sequence]) & (tokens < ends[sequence]), starts


def _given(argument):
    """A launch argument as it is (a pointer, a number)."""
    return argument


class _BackwardPlan:
    """One shape's launch: its configuration, the tensor maps of q, k, v, dO, dQaccum, dK, dV and the statistics."""

    def __init__(self, config: BackwardConfig, launch, maps: list):
        self.config, self.launch, self.maps = config, launch, maps

    def __call__(self, stream: int, *addresses: int) -> None:
        self.launch(stream, *(to_map(address) for to_map, address in zip(self.maps, addresses)))
