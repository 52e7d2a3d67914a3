"""`matmul` and `attention` on torch tensors, registered as torch custom operators (`torch.ops.mlir_tile.*`)
with fake implementations: inside a `torch.compile`d model they are single graph nodes of known output
shapes. Each runs on the tensors' device and torch's current stream, its kernels from a `KernelLibrary` per
device (shipped, cached, or built on first use).

No `from __future__ import annotations` here: torch reads the operators' schemas from their annotations.
"""
import math
from typing import List, Optional, Tuple

import torch

from mlir_tile.kernels import common, epilogues, kvcache, registry, variant_ops
from mlir_tile.kernels.flash import launch as flash_launch
from mlir_tile.kernels.gemm.hopper_ops import kernel_scales, precise_of, scaling_of
from mlir_tile.kernels.library import KernelNotAvailable, compiler_installed
from mlir_tile.kernels.registry import kernels_on, no_backward, plain_call, register_operator
from mlir_tile.runtime import torch_stream


def matmul(a, b, *, b_layout="kn", bias=None, activation=None, residual=None, epilogue=None, operands=(), out=None):
    """epilogue(a @ b) in a's dtype (fp16 or bf16, fp32 accumulation): `a` [..., K]; `b` [K, N] (b_layout "kn")
    or [N, K] ("nk": an nn.Linear weight, so `matmul(x, w, b_layout="nk", bias=b)` is F.linear(x, w, b)).
    The ready-made epilogue: + `bias` [N], then `activation` ("relu", "gelu_tanh" as F.gelu(approximate=
    "tanh"), "silu"), then + `residual` [..., N]; or `epilogue`, an `epilogues.Epilogue` of your own, with its
    `operands` (tensors and numbers in its order). `out`: a contiguous [..., N] tensor to write into.
    Where autograd records the call, the activation runs after the kernel (`_unfused_activation`: its
    derivative needs the pre-activation, which is kept rather than recomputed)."""
    if epilogue is not None:
        if bias is not None or activation is not None or residual is not None:
            raise ValueError("matmul: give bias/activation/residual or an epilogue of your own, not both")
        if any(not isinstance(x, (torch.Tensor, int, float)) or isinstance(x, bool) for x in operands):
            raise ValueError(f"matmul: an epilogue's operands are tensors and numbers, got {operands!r}")
        tensors = [x for x in operands if isinstance(x, torch.Tensor)]
        numbers = [float(x) for x in operands if not isinstance(x, torch.Tensor)]
        result = _custom_operator(epilogue)(a, b, b_layout, tensors, numbers)
    else:
        if out is not None:
            torch.ops.mlir_tile.matmul_out(a, b, b_layout, bias, activation, residual, out)
            return out
        if plain_call(a, b, bias, residual):  # (the operator's own implementation, without the dispatcher)
            return _eager_matmul(a, b, b_layout, bias, activation, residual)
        if activation in _TORCH_ACTIVATIONS and _trains(a, b, bias, residual):
            return _unfused_activation(a, b, b_layout, bias, activation, residual)
        return torch.ops.mlir_tile.matmul(a, b, b_layout, bias, activation, residual)
    if out is not None:
        out.copy_(result)
        return out
    return result


def scaled_mm(a, b, scale_a, scale_b, *, b_layout="nk", accumulation="default"):
    """(a @ b) * scale_a * scale_b in bfloat16 from float8_e4m3fn `a` [M, K] and `b` [N, K] (b_layout "nk",
    torch._scaled_mm's b.t()) or [K, N] ("kn": transposed inside the kernel), fp32 scales of one element or
    per row (scale_a [M], scale_b [N]), or blockwise with b [N, K] (DeepGEMM's: scale_a [M, K / 128] a row's 1 x
    128 blocks of K, scale_b [N / 128, K / 128] 128 x 128 blocks, or [N, K / 128] a row's 1 x 128 blocks as a
    weight gradient's, rounded up; each k-block's products scaled as they are added into fp32); on Hopper
    (sm_90) only. N a multiple of 16 (of 8 with "nk"), K of 16.
    `accumulation`: "precise" or "default" (each 128-deep k-block's sums added into fp32, cuBLASLt's default
    and its error), "fast" (wgmma's fp8 sums kept in the accumulators, cuBLASLt's use_fast_accum: faster, an RMS
    error 1.2-2.1x at K 2624-16384; not with blockwise scales)."""
    if plain_call(a, b, scale_a, scale_b):
        return _eager_scaled_mm(a, b, scale_a, scale_b, b_layout, accumulation)
    return torch.ops.mlir_tile.scaled_mm(a, b, scale_a, scale_b, b_layout, accumulation)


def attention(q, k, v, *, causal=False, descale_q=None, descale_k=None, descale_v=None, variant=None, operands=()):
    """(o, lse): softmax(q k^T / sqrt(d) (+ the causal mask)) v and each row's natural log-sum-exp (fp32), from
    q [batch, heads, seq, d] and k, v [batch, kv_heads, seq, d] (kv_heads dividing heads: grouped-query attention,
    as SDPA's enable_gqa) of one dtype (fp16 or bf16), d 64 or 128 (and 256 on Hopper, sm_90) (torch's SDPA with
    scale=None). Differentiable on Hopper (d 64, 128 and 256: `flash.backward`). On Hopper, k and v may be longer
    than q (causal aligned to the bottom right), and views of [batch, seq, heads, d] are read in place: both run
    as packed sequences (`flash.launch.token_major`), o and the gradients then views of [batch, seq, heads, d].
    float8_e4m3fn q, k, v (Hopper, d 128) with descales (fp32, each of one element or each [batch, kv_heads]:
    FlashAttention-3's): softmax(q k^T descale_q descale_k / sqrt(d)) v descale_v at each K/V head, o in bfloat16.
    `variant` (`kernels.flash.variants.Variant`, Hopper): which keys each row sees, a score step and a sink,
    reading `operands` (in the variant's order: numbers, and a tensor [heads] or [batch, heads] for each of its
    "head" operands); 16-bit q, k, v."""
    if variant is not None:
        if q.dtype == torch.float8_e4m3fn or any(x is not None for x in (descale_q, descale_k, descale_v)):
            raise ValueError("attention: a variant takes float16 or bfloat16 q, k, v (no descales)")
        return variant_ops.attention(q, k, v, causal, variant, operands)
    if operands:
        raise ValueError("attention: operands are a variant's")
    if q.dtype == torch.float8_e4m3fn:
        if any(x is None for x in (descale_q, descale_k, descale_v)):
            raise ValueError("attention: float8_e4m3fn q, k, v take descale_q, descale_k and descale_v")
        return torch.ops.mlir_tile.attention_fp8(q, k, v, descale_q, descale_k, descale_v, causal)
    if descale_q is not None or descale_k is not None or descale_v is not None:
        raise ValueError(f"attention: descales are for float8_e4m3fn q, k, v, got {q.dtype}")
    if plain_call(q, k, v):
        return _eager_attention(q, k, v, causal)
    return torch.ops.mlir_tile.attention(q, k, v, causal)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, variant=None,
                     operands=(), seqused_k=None, block_table=None):
    """(o, lse) of packed sequences (FlashAttention's `flash_attn_varlen_func` convention; Hopper, sm_90): q
    [total_q, heads, d], k and v [total_k, kv_heads, d] (kv_heads dividing heads), sequence b's queries rows
    cu_seqlens_q[b] to cu_seqlens_q[b + 1] and its keys rows cu_seqlens_k[b] to cu_seqlens_k[b + 1] (int32
    [batch + 1] on the device); `max_seqlen_q` at least the longest sequence's queries (rows past it are not
    computed), `max_seqlen_k` its keys. o [total_q, heads, d], lse [heads, total_q] fp32. Causal per sequence,
    aligned to the bottom right where its lengths differ (query i sees keys up to i + len_k - len_q); a row
    that sees no key has o 0 and lse -inf. fp16 or bf16, d 64, 128 or 256; differentiable (o's
    gradient and lse's: `flash.backward`'s packed kernels). `variant` with its `operands` as `attention`'s (a
    head's [heads] or [batch, heads]), `query` in its functions query i's position i + len_k - len_q among its
    sequence's keys and `seq` its keys, the keys' rules checked at max_seqlen_k and below; differentiable where the
    variant trains (masks, score steps with their score_gradient, sinks given as an operand), with keys not causal.
    Over a KV cache (FlashAttention-3's and vLLM's varlen calls, a batch of prefill chunks
    and decode steps in one; no backward): `seqused_k` (int32 [batch]) each sequence's keys the first seqused_k[b]
    of its own, and with `block_table` (int32 [batch, pages_per_sequence], cu_seqlens_k None) k and v pools
    [pages, page_size, kv_heads, d], sequence b's key i on page block_table[b, i / page_size]
    (`kvcache.varlen_over_cache`); causal then aligned to each sequence's last used key."""
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(f"attention_varlen: {name} a non-negative int, got {x!r}")
    if operands and variant is None:
        raise ValueError("attention_varlen: operands are a variant's")
    if seqused_k is not None or block_table is not None:
        return kvcache.varlen_over_cache(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                         block_table, causal, variant, operands)
    if variant is not None:
        return variant_ops.packed(q, k, v, cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, max_seqlen_k, causal,
                                  variant, operands)
    varlen = _attention_varlen if plain_call(q, k, v) else torch.ops.mlir_tile.attention_varlen
    return varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal)


def _output_shape(a, b, b_layout: str) -> List[int]:
    if b.dim() != 2 or a.dim() < 1:
        raise ValueError(f"matmul: a is [..., K] and b 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    return [*a.shape[:-1], b.shape[1] if b_layout == "kn" else b.shape[0]]


def _run(a, b, b_layout, out, epilogue, operands) -> None:
    """epilogue(a @ b) into `out`, a contiguous [..., N] tensor; `operands` in the epilogue's order."""
    rows = a.reshape(math.prod(a.shape[:-1]), a.shape[-1]).contiguous()
    m, n = rows.shape[0], out.shape[-1]
    if m == 0 or n == 0:
        return
    if rows.shape[1] == 0 and b.dim() == 2 and b.shape[0 if b_layout == "kn" else 1] == 0:
        # K 0: the epilogue of a zero product (torch's), through the kernel with K of zeros
        rows = rows.new_zeros(m, 8)
        b = b.new_zeros((8, n) if b_layout == "kn" else (n, 8))
    flat = [x.reshape(m, n).contiguous() if isinstance(x, torch.Tensor) and x.dim() > 1 else
            x.contiguous() if isinstance(x, torch.Tensor) else x for x in operands]  # numbers and None as given
    kernels_on(a.device).matmul(rows, b.contiguous(), b_major=b_layout, out=out.view(m, n), epilogue=epilogue,
                                operands=tuple(flat))


def _check_residual(residual, shape) -> None:
    """ValueError unless `residual` (None: none) has the product's `shape`."""
    if residual is not None and list(residual.shape) != list(shape):
        raise ValueError(f"matmul: residual is {tuple(shape)} like the product, got {tuple(residual.shape)}")


def _standard(a, b, b_layout, bias, activation, residual, out):
    """The ready-made epilogues: their `chain` in a kernel of its own where the install ships it
    (`gemm.sm90_tiles.SHIPPED_ACTIVATIONS` on Hopper's measured tiles) or the compiler builds it (on first use);
    else `epilogues.selectable`, which every install ships (on the H200 3-4% slower than the chain at 4096^3
    and beyond, up to 12% at 2048^3; on Hopper's path it takes the 128 x 128 tile). Where a chain is not
    shipped, the fallback is remembered per shape and layout. Returns the epilogue it ran (None: none)."""
    _check_residual(residual, out.shape)
    chained = epilogues.chain(bias is not None, activation, residual is not None)
    unshipped = kernels_on(a.device).unshipped
    key = (a.dtype, tuple(a.shape), tuple(b.shape), b_layout, chained and chained.name)
    if chained is None or compiler_installed() or key not in unshipped:
        try:
            _run(a, b, b_layout, out, chained, [x for x in (bias, residual) if x is not None])
            return chained
        except KernelNotAvailable:
            unshipped.add(key)
    _run(a, b, b_layout, out, epilogues.selectable, epilogues.selection(bias, activation, residual))
    return epilogues.selectable


def _matmul(a: torch.Tensor, b: torch.Tensor, b_layout: str, bias: Optional[torch.Tensor],
            activation: Optional[str], residual: Optional[torch.Tensor]) -> torch.Tensor:
    out = a.new_empty(_output_shape(a, b, b_layout))
    _standard(a, b, b_layout, bias, activation, residual, out)
    return out


def _matmul_fake(a, b, b_layout, bias, activation, residual):
    return a.new_empty(_output_shape(a, b, b_layout))


_eager = common.Plans(kept=4096)  # the eager calls' launches (`_EagerMatmul`, `_EagerScaledMatmul`,
# `flash.launch.PlannedAttention`) by `_eager_key`


def _eager_key(*tensors, extra) -> tuple:
    """What an eager call's launch depends on: each tensor's shape, dtype, device, contiguity and the bytes past
    16 its data starts at (None for one not given), and `extra` (the call's other arguments)."""
    return extra, *[None if x is None else (x.shape, x.dtype, x.get_device(), x.is_contiguous(), x.data_ptr() & 15)
                    for x in tensors]


def _takes_eagerly(*tensors) -> bool:
    """Whether a call on these tensors (None: not given) runs as its first did: each contiguous, non-empty and
    on 16 bytes (no copy, no empty result)."""
    return all(x is None or (x.is_contiguous() and x.numel() and x.data_ptr() % 16 == 0) for x in tensors)


class _EagerMatmul:
    """An eager `matmul` call whose key (`_eager_key`) an earlier call checked and ran: C allocated, the launch
    plan (`gemm.launch.Matmul.plan`) given the operands' addresses: the epilogue's operands as `template` says
    (names of the call's tensors, A's standing in for one the epilogue does not read; numbers as they are)."""

    def __init__(self, plan, out, template: list):
        self.plan, self.new_out, self.template = plan, common.allocator(out.shape, out.dtype, out.device), template

    def __call__(self, a, b, bias, residual):
        out, values = self.new_out(), []
        if self.template:
            named = {"a": a, "bias": bias, "residual": residual}
            values = [x if isinstance(x, int) else named[x].data_ptr() for x in self.template]
        self.plan(a.data_ptr(), b.data_ptr(), out.data_ptr(), values, torch_stream(a))
        return out


def _eager_matmul(a, b, b_layout, bias, activation, residual):
    """`_matmul` for a call `plain_call` lets through: the first of a key checked and run in full, the next
    ones its plan's launch (`_EagerMatmul`)."""
    key = _eager_key(a, b, bias, residual, extra=(b_layout, activation))
    known = _eager.get(key)
    if known is not None:
        return known(a, b, bias, residual)
    out = a.new_empty(_output_shape(a, b, b_layout))
    epilogue = _standard(a, b, b_layout, bias, activation, residual, out)
    if _takes_eagerly(a, b, bias, residual, out) and b.dim() == 2:
        names = ["bias" if bias is not None else None, "residual" if residual is not None else None]
        template = ([x for x in names if x is not None] if epilogue is not epilogues.selectable else
                    ["a" if x is None else x for x in epilogues.selection(names[0], activation, names[1])])
        rows = a.view(-1, a.shape[-1])
        _eager.keep(key, _EagerMatmul(kernels_on(a.device).matmul.plan(rows, b, b_layout, epilogue), out, template))
    return out


_TORCH_ACTIVATIONS = {"relu": torch.nn.functional.relu, "silu": torch.nn.functional.silu,
                      "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def _trains(*tensors) -> bool:
    """Whether autograd records a call on these tensors (None: not given)."""
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors)


def _unfused_activation(a, b, b_layout, bias, activation, residual):
    """activation(a @ b + bias) + residual where autograd records it: the product and the bias by our GEMM, the
    activation and the residual by torch, so that the pre-activation z the activation's derivative needs is
    kept (as torch's own F.linear then activation keeps it) instead of recomputed by a GEMM in the backward."""
    z = torch.ops.mlir_tile.matmul(a, b, b_layout, bias, None, None)
    _check_residual(residual, z.shape)
    y = _TORCH_ACTIVATIONS[activation](z)
    return y if residual is None else y + residual


def _matmul_setup(ctx, inputs, output) -> None:
    a, b, b_layout, bias, activation, residual = inputs
    ctx.b_layout, ctx.activation, ctx.has_residual = b_layout, activation, residual is not None
    ctx.save_for_backward(a, b, bias)


def _matmul_backward(ctx, grad):
    """y = activation(a @ b + bias) + residual: the residual's gradient is y's, the activation's is taken by
    torch's autograd on the pre-activation (recomputed by our GEMM: `matmul` itself runs the activation unfused
    where autograd records it, `_unfused_activation`, so this is for a direct call of the operator), and A's and
    B's are our GEMMs of it in the layouts they need (dZ B^T; A^T dZ, or dZ^T A for B [N, K]); the bias's is dZ
    summed over the rows in fp32. (B's gradient reads A or dZ as it lies, [K, M] for the product's A:
    `_matmul_transposed_a`.)"""
    a, b, bias = ctx.saved_tensors
    dz = grad.contiguous()
    if ctx.activation is not None:
        z = torch.ops.mlir_tile.matmul(a, b, ctx.b_layout, bias, None, None).float()
        with torch.enable_grad():
            z.requires_grad_()
            dz = torch.autograd.grad(_TORCH_ACTIVATIONS[ctx.activation](z), z, dz.float())[0].to(grad.dtype)
    rows, a_rows = dz.reshape(-1, dz.shape[-1]), a.reshape(-1, a.shape[-1])
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.mlir_tile.matmul(dz, b, "nk" if ctx.b_layout == "kn" else "kn", None, None, None)
    if ctx.needs_input_grad[1]:  # (A^T dZ, or dZ^T A: the transposed operand read as it lies)
        grad_b = (torch.ops.mlir_tile.matmul_transposed_a(a_rows, rows) if ctx.b_layout == "kn" else
                  torch.ops.mlir_tile.matmul_transposed_a(rows, a_rows))
    if bias is not None and ctx.needs_input_grad[3]:
        grad_bias = rows.float().sum(0).to(bias.dtype)
    return grad_a, grad_b, None, grad_bias, None, grad if ctx.has_residual else None


def _matmul_transposed_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a^T @ b from a [K, M] and b [K, N]: Hopper's path reads a MN-major where TMA takes it (`gemm.launch.Matmul`,
    `a_major` "km"), else a^T is copied and multiplied as `matmul` does; what B's gradient multiplies (A^T dZ,
    dZ^T A)."""
    a, b = a.contiguous(), b.contiguous()
    launcher = kernels_on(a.device).matmul
    if launcher.reads_a_transposed(a, b, "kn", "km"):
        return launcher(a, b, b_major="kn", a_major="km")
    return _matmul(a.t().contiguous(), b, "kn", None, None, None)


def _matmul_transposed_a_fake(a, b):
    return a.new_empty(a.shape[1], b.shape[1])


register_operator("matmul", _matmul, fake=_matmul_fake, backward=_matmul_backward, setup_context=_matmul_setup)
register_operator("matmul_transposed_a", _matmul_transposed_a, fake=_matmul_transposed_a_fake,
                  backward=no_backward("matmul_transposed_a has no backward: it is matmul's backward's product"))


def _matmul_out(a: torch.Tensor, b: torch.Tensor, b_layout: str, bias: Optional[torch.Tensor],
                activation: Optional[str], residual: Optional[torch.Tensor], out: torch.Tensor) -> None:
    if list(out.shape) != _output_shape(a, b, b_layout) or not out.is_contiguous():
        raise ValueError(f"matmul: out is a contiguous {_output_shape(a, b, b_layout)} tensor, got "
                         f"{tuple(out.shape)}")
    _standard(a, b, b_layout, bias, activation, residual, out)


register_operator("matmul_out", _matmul_out, fake=lambda a, b, b_layout, bias, activation, residual, out: None,
                  mutates_args=("out",))


def _custom_operator(epilogue: epilogues.Epilogue):
    """A torch operator `mlir_tile::matmul_<name>_<fingerprint>` for a user's epilogue, registered once: its
    tensor operands and its numbers (scalars and integers) in two lists, each in the epilogue's order."""
    suffix = common.epilogue_suffix(epilogue).replace("-", "_")
    with registry.lock:
        if suffix in registry.custom_operators:
            return registry.custom_operators[suffix]

        def run(a: torch.Tensor, b: torch.Tensor, b_layout: str, tensors: List[torch.Tensor],
                numbers: List[float]) -> torch.Tensor:
            out = a.new_empty(_output_shape(a, b, b_layout))
            _run(a, b, b_layout, out, epilogue, epilogues.arranged(epilogue, tensors, numbers))
            return out

        operator = register_operator(f"matmul{suffix}", run, fake=lambda a, b, b_layout, tensors, numbers: a.new_empty(
            _output_shape(a, b, b_layout)), backward=no_backward(
            f"matmul: epilogue {epilogue.name!r} has no derivative here; train with the ready-made bias, "
            f"activation and residual, whose backward is built"))
        registry.custom_operators[suffix] = operator
        return operator


def _scaled_shape(a, b, b_layout: str) -> List[int]:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"scaled_mm: 2-D a and b, got {tuple(a.shape)} and {tuple(b.shape)}")
    return [a.shape[0], b.shape[0] if b_layout == "nk" else b.shape[1]]


def _scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, b_layout: str,
               accumulation: str) -> torch.Tensor:
    return kernels_on(a.device).scaled(a, b, scale_a, scale_b, b_major=b_layout, accumulation=accumulation)


def _scaled_mm_fake(a, b, scale_a, scale_b, b_layout, accumulation):
    return a.new_empty(_scaled_shape(a, b, b_layout), dtype=torch.bfloat16)


register_operator("scaled_mm", _scaled_mm, fake=_scaled_mm_fake)


class _EagerScaledMatmul:
    """An eager `scaled_mm` call whose key an earlier call checked and ran: C allocated, the plan's launch."""

    def __init__(self, plan, out):
        self.plan, self.new_out = plan, common.allocator(out.shape, out.dtype, out.device)

    def __call__(self, a, b, scale_a, scale_b):
        out = self.new_out()
        addresses, _held = kernel_scales(self.plan.config, scale_a, scale_b)  # (held until launched)
        self.plan(a.data_ptr(), b.data_ptr(), out.data_ptr(), addresses, torch_stream(a))
        return out


def _eager_scaled_mm(a, b, scale_a, scale_b, b_layout, accumulation):
    """`_scaled_mm` for a call `plain_call` lets through, as `_eager_matmul` runs matmul's."""
    key = _eager_key(a, b, scale_a, scale_b, extra=("scaled", b_layout, accumulation))
    known = _eager.get(key)
    if known is not None:
        return known(a, b, scale_a, scale_b)
    out = _scaled_mm(a, b, scale_a, scale_b, b_layout, accumulation)
    if _takes_eagerly(a, b, scale_a, scale_b, out) and a.shape[1]:
        scaling = scaling_of(scale_a, scale_b, out.shape[1])
        plan = kernels_on(a.device).scaled.plan(b_layout, scaling, precise_of(accumulation, scaling), *out.shape,
                                                a.shape[1])
        _eager.keep(key, _EagerScaledMatmul(plan, out))
    return out


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return kernels_on(q.device).attention(q, k, v, causal=causal)


def _eager_attention(q, k, v, causal: bool):
    """`_attention` for a call `plain_call` lets through: the first of a key checked and run in full, the next
    ones the launch plan it made (`flash.launch.AttentionPaths.planned`; as packed sequences, `token_major`,
    `flash.launch.TokenRowsStep`, the key then holding the strides)."""
    paths = kernels_on(q.device).attention
    token_rows = paths.takes_token_rows(q, k)
    key = _eager_key(q, k, v, extra=(causal, *((q.stride(), k.stride(), v.stride()) if token_rows else ())))
    known = _eager.get(key)
    if known is not None:
        return known(q, k, v)
    if token_rows:
        o, lse, step = paths.packed_call(q, k, v, causal, with_plan=True)
        if step is not None:
            _eager.keep(key, step)
        return o, lse
    result = _attention(q, k, v, causal)
    planned = paths.hopper is not None or k.shape == q.shape  # (else k, v repeated first)
    if _takes_eagerly(q, k, v) and planned and not flash_launch.token_major(q, k):
        _eager.keep(key, paths.planned(q, k, v, causal))
    return result


def _attention_fake(q, k, v, causal):
    return kernels_on(q.device).attention.empty_outputs(q, k, v)  # (laid out as the path that runs writes them)


def _attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, descale_q: torch.Tensor,
                   descale_k: torch.Tensor, descale_v: torch.Tensor, causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    descales = tuple(x.float().reshape(1).contiguous() if x.numel() == 1 else x for x in (descale_q, descale_k, descale_v))
    return kernels_on(q.device).attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal,
                                          descales=descales)


def _attention_fp8_fake(q, k, v, descale_q, descale_k, descale_v, causal):
    return q.new_empty(q.shape, dtype=torch.bfloat16), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _attention_gradients(grad: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                         v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                         causal: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `attention` given dO (`grad`), the log-sum-exp's gradient (or None), O and the
    log-sum-exp (`flash.backward`)."""
    return kernels_on(q.device).attention_backward(grad, q, k, v, o, lse, causal=causal, grad_lse=grad_lse)


def _attention_gradients_fake(grad, grad_lse, q, k, v, o, lse, causal):
    return flash_launch.empty_gradients(q, k, v)


def _attention_setup(ctx, inputs, output) -> None:
    q, k, v, causal = inputs
    ctx.causal = causal
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, *output)


def _attention_backward(ctx, grad_o, grad_lse):
    """dq, dk, dv by our backward kernel, from O's gradient and the log-sum-exp's (either may be None)."""
    q, k, v, o, lse = ctx.saved_tensors
    if grad_o is None and grad_lse is None:
        return None, None, None, None
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    dq, dk, dv = torch.ops.mlir_tile.attention_gradients(grad_o, grad_lse, q, k, v, o, lse, ctx.causal)
    return dq, dk, dv, None


def _attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                      causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    paths = kernels_on(q.device).attention
    if paths.hopper is None:
        raise ValueError(f"attention_varlen: packed sequences run on Hopper's path (sm_90), which this GPU "
                         f"({paths.library.chip}) has not")
    return paths.hopper.packing.packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=causal,
                                       max_seqlen_k=max_seqlen_k)


def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def _attention_varlen_gradients(grad: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor,
                                k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                                cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_k: int,
                                causal: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `attention_varlen` (`flash.backward.HopperAttentionBackward.packed`)."""
    return kernels_on(q.device).attention_backward.packed(grad.contiguous(), q, k, v, o, lse, cu_seqlens_q,
                                                          cu_seqlens_k, max_seqlen_k, causal=causal, grad_lse=grad_lse)


def _attention_varlen_gradients_fake(grad, grad_lse, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_k,
                                     causal):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_varlen_setup(ctx, inputs, output) -> None:
    q, k, v, cu_seqlens_q, cu_seqlens_k, _, ctx.max_seqlen_k, ctx.causal = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, *output)  # (read in place: `packed.token_rows`)


def _attention_varlen_backward(ctx, grad_o, grad_lse):
    q, k, v, cu_seqlens_q, cu_seqlens_k, o, lse = ctx.saved_tensors
    if grad_o is None and grad_lse is None:
        return (None,) * 8
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    dq, dk, dv = torch.ops.mlir_tile.attention_varlen_gradients(grad_o, grad_lse, q, k, v, o, lse, cu_seqlens_q,
                                                                cu_seqlens_k, ctx.max_seqlen_k, ctx.causal)
    return dq, dk, dv, None, None, None, None, None


register_operator("attention_gradients", _attention_gradients, fake=_attention_gradients_fake)
register_operator("attention", _attention, fake=_attention_fake, backward=_attention_backward,
                  setup_context=_attention_setup)
register_operator("attention_varlen_gradients", _attention_varlen_gradients, fake=_attention_varlen_gradients_fake)
register_operator("attention_varlen", _attention_varlen, fake=_attention_varlen_fake,
                  backward=_attention_varlen_backward, setup_context=_attention_varlen_setup)
register_operator("attention_fp8", _attention_fp8, fake=_attention_fp8_fake,
                  backward=no_backward("attention: fp8 inputs have no backward pass yet"))
