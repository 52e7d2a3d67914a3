"""A mixture of experts' and a gated MLP's GEMMs on torch tensors (Hopper, sm_90), registered as torch custom
operators with fake implementations: `grouped_mm` (masked and contiguous; the contiguous 16-bit form with its
gradients, grouped GEMMs of their own) and `swiglu_mm` (fused SwiGLU, with a backward of `matmul`'s GEMMs) with
its weights' interleave (`swiglu_weights`).

No `from __future__ import annotations` here: torch reads the operators' schemas from their annotations.
"""
from typing import List, Optional

import torch

import mlir_tile.kernels.ops  # noqa: F401  (registers torch.ops.mlir_tile.matmul*, which swiglu_mm's backward runs)
from mlir_tile.kernels.registry import kernels_on, no_backward, plain_call, register_operator


def grouped_mm(x, w, counts=None, *, offsets=None, scale_x=None, scale_w=None, epilogue=None, operands=()):
    """A mixture of experts' grouped GEMM (Hopper, sm_90): w [E, N, K] (each expert's weights, as F.linear lays
    them), float16 or bfloat16 (out of x's dtype; N and K multiples of 8), or float8_e4m3fn with DeepGEMM's
    blockwise float32 scales (`scale_x` x's rows' 1 x 128 blocks of K, [..., K / 128]; `scale_w` [E, N / 128,
    K / 128]; out bfloat16; N and K multiples of 16); the counts or offsets read on the device, so a CUDA graph
    holds the call. The contiguous 16-bit form differentiates (dx and dw grouped GEMMs of its own); the masked
    one and fp8 are forward only.
    - masked (decode, DeepGEMM's masked layout): x [E, T, K] (each expert's tokens in its first counts[e] rows)
      and `counts` int32 [E]: [E, T, N] whose expert e's first counts[e] rows are x[e] @ w[e]^T (rows past a
      count unspecified); T a multiple of 128;
    - contiguous (training, prefill; torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)'s): x [tokens, K]
      sorted by expert and `offsets` int32 [E], the cumulative ends of the experts' rows (nondecreasing):
      [tokens, N] whose rows [offsets[e - 1], offsets[e]) are x's times w[e]^T (rows past offsets[E - 1]
      zeros); `epilogue` (an `epilogues.Epilogue`, with its `operands`: rows [tokens], columns [N] shared by the
      experts, matrices [tokens, N], numbers) applied to each product before it is rounded, e.g.
      `epilogues.row_scale` with the router's weights (forward only)."""
    if epilogue is not None and offsets is None:
        raise ValueError("grouped_mm: an epilogue is the contiguous form's (offsets=...)")
    if plain_call(x, w, counts, offsets, scale_x, scale_w, *(t for t in operands if isinstance(t, torch.Tensor))):
        # (eager, no gradient asked: the launcher straight, without the dispatcher's two Python hops)
        return kernels_on(x.device).grouped(x, w, counts, offsets=offsets, scale_x=scale_x, scale_w=scale_w,
                                            epilogue=epilogue, operands=operands)
    if epilogue is not None:
        tensors = [t for t in operands if isinstance(t, torch.Tensor)]
        numbers = [float(t) for t in operands if not isinstance(t, torch.Tensor)]
        return _epilogue_operator(epilogue)(x, w, offsets, scale_x, scale_w, tensors, numbers)
    if offsets is not None:
        return torch.ops.mlir_tile.grouped_mm_contiguous(x, w, offsets, scale_x, scale_w)
    return torch.ops.mlir_tile.grouped_mm(x, w, counts, scale_x, scale_w)


def _grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor, scale_x: Optional[torch.Tensor],
                scale_w: Optional[torch.Tensor]) -> torch.Tensor:
    return kernels_on(x.device).grouped(x, w, counts, scale_x=scale_x, scale_w=scale_w)


def _grouped_mm_contiguous(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, scale_x: Optional[torch.Tensor],
                           scale_w: Optional[torch.Tensor]) -> torch.Tensor:
    return kernels_on(x.device).grouped(x, w, offsets=offsets, scale_x=scale_x, scale_w=scale_w)


def _epilogue_operator(epilogue):
    """`mlir_tile::grouped_mm_contiguous_<name>_<fingerprint>` for a user's epilogue, registered once (forward
    only: the epilogue's derivative is not known): its tensor operands and its numbers in two lists."""
    from mlir_tile.kernels import common, epilogues, registry

    suffix = "grouped_mm_contiguous" + common.epilogue_suffix(epilogue).replace("-", "_")
    with registry.lock:
        if suffix not in registry.custom_operators:
            def run(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, scale_x: Optional[torch.Tensor],
                    scale_w: Optional[torch.Tensor], tensors: List[torch.Tensor], numbers: List[float]) -> torch.Tensor:
                return kernels_on(x.device).grouped(x, w, offsets=offsets, scale_x=scale_x, scale_w=scale_w,
                                                    epilogue=epilogue,
                                                    operands=epilogues.arranged(epilogue, tensors, numbers))

            registry.custom_operators[suffix] = register_operator(
                suffix, run, fake=lambda x, w, offsets, scale_x, scale_w, tensors, numbers: _grouped_fake(
                    x, w, offsets, scale_x, scale_w),
                backward=no_backward(f"grouped_mm: epilogue {epilogue.name!r} has no derivative here; apply it "
                                     f"after the product to train"))
        return registry.custom_operators[suffix]


def _grouped_fake(x, w, counts_or_offsets, scale_x, scale_w):
    """Both layouts' output: x's rows by N ([E, T, N] or [tokens, N]), bfloat16 from fp8."""
    return x.new_empty(*x.shape[:-1], w.shape[1], dtype=torch.bfloat16 if x.dtype == torch.float8_e4m3fn else x.dtype)


register_operator("grouped_mm", _grouped_mm, fake=_grouped_fake,
                  backward=no_backward("grouped_mm: the masked layout (decode's) has no backward"))


def _grouped_input_gradient(grad: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return kernels_on(grad.device).grouped.input_gradient(grad, w, offsets)


def _grouped_weight_gradient(grad: torch.Tensor, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return kernels_on(grad.device).grouped.weight_gradient(grad, x, offsets)


register_operator("grouped_mm_input_gradient", _grouped_input_gradient,
                  fake=lambda grad, w, offsets: grad.new_empty(grad.shape[0], w.shape[2]))
register_operator("grouped_mm_weight_gradient", _grouped_weight_gradient,
                  fake=lambda grad, x, offsets: grad.new_empty(offsets.shape[0], grad.shape[1], x.shape[1]))


def _grouped_setup(ctx, inputs, output):
    x, w, offsets, scale_x, _ = inputs
    if scale_x is not None:
        ctx.mark_non_differentiable(output)
    ctx.save_for_backward(x, w, offsets)


def _grouped_backward(ctx, grad):
    """The contiguous form's gradients, grouped GEMMs of its family: dx = each expert's grad rows times its w
    (`grouped_mm_input_gradient`), dw = each expert's grad rows^T times its x rows (`grouped_mm_weight_gradient`:
    the reduction over its tokens). 16-bit only (fp8's gradients: not yet)."""
    x, w, offsets = ctx.saved_tensors
    grad = grad.contiguous()
    grad_x = torch.ops.mlir_tile.grouped_mm_input_gradient(grad, w, offsets) if ctx.needs_input_grad[0] else None
    grad_w = torch.ops.mlir_tile.grouped_mm_weight_gradient(grad, x, offsets) if ctx.needs_input_grad[1] else None
    return grad_x, grad_w, None, None, None


register_operator("grouped_mm_contiguous", _grouped_mm_contiguous, fake=_grouped_fake, backward=_grouped_backward,
                  setup_context=_grouped_setup)


def swiglu_weights(w_gate, w_up):
    """The weights `swiglu_mm` takes: w_gate and w_up [F, K] (one dtype, F a multiple of 8) interleaved a block of
    8 rows at a time, [2F, K] (a copy: made once, where the weights are loaded)."""
    if not (isinstance(w_gate, torch.Tensor) and isinstance(w_up, torch.Tensor) and w_gate.dim() == 2
            and w_gate.shape == w_up.shape and w_gate.dtype == w_up.dtype and w_gate.shape[0] % 8 == 0):
        raise ValueError(f"swiglu_weights: w_gate and w_up [F, K] alike, F a multiple of 8; got "
                         f"{getattr(w_gate, 'shape', w_gate)} and {getattr(w_up, 'shape', w_up)}")
    features, depth = w_gate.shape
    return torch.stack([w_gate.reshape(features // 8, 8, depth), w_up.reshape(features // 8, 8, depth)], 1).reshape(
        2 * features, depth)


def swiglu_mm(x, w):
    """silu(x W_gate^T) * (x W_up^T), Llama's MLP up-projection, in one GEMM (Hopper, sm_90): x [..., K] float16
    or bfloat16 and w = `swiglu_weights(W_gate, W_up)` [2F, K]; [..., F] of x's dtype, the gate and up
    products never written. It trains: the backward recomputes the gate and up products (one GEMM) and takes dx
    and dw by `matmul`'s kernels."""
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)) or x.dim() < 1:
        raise ValueError("swiglu_mm: x [..., K] and w [2F, K] tensors")
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    run = _swiglu_mm if plain_call(rows, w) else torch.ops.mlir_tile.swiglu_mm  # (eager without a gradient: straight)
    out = run(rows, w.contiguous())
    return out.view(*x.shape[:-1], out.shape[-1])


def _swiglu_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return kernels_on(x.device).swiglu(x, w)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, grad):
    x, w = ctx.saved_tensors
    return swiglu_gradients(x, w, grad, lambda a, b, layout: torch.ops.mlir_tile.matmul(a, b, layout, None, None, None),
                            torch.ops.mlir_tile.matmul_transposed_a, ctx.needs_input_grad)


def swiglu_gradients(x, w, grad, matmul, matmul_transposed_a, needed=(True, True)):
    """swiglu_mm's (dx, dw): h = silu(g) u from the interleaved weights' product [M, 2F] (a block of 8 gates, then
    their 8 ups); g and u recomputed by one GEMM (`matmul(x, w, "nk")`), dg = dh u silu'(g) and du = dh silu(g) in
    fp32, interleaved as the weights are, then dx = d w (`matmul(d, w, "kn")`) and dw = d^T x
    (`matmul_transposed_a(d, x)`: A^T read as it lies). The GEMMs given: the operator's are `matmul`'s kernels."""
    rows, features = x.shape[0], w.shape[0] // 2
    both = matmul(x, w, "nk").float().view(rows, features // 8, 2, 8)
    gate, up = both[:, :, 0], both[:, :, 1]
    sigmoid, dh = torch.sigmoid(gate), grad.float().view(rows, features // 8, 8)
    d_gate = dh * up * sigmoid * (1 + gate * (1 - sigmoid))
    d_both = torch.stack([d_gate, dh * gate * sigmoid], 2).reshape(rows, 2 * features).to(x.dtype)
    return (matmul(d_both, w, "kn") if needed[0] else None,
            matmul_transposed_a(d_both, x) if needed[1] else None)


register_operator("swiglu_mm", _swiglu_mm, fake=lambda x, w: x.new_empty(x.shape[0], w.shape[0] // 2),
                  backward=_swiglu_backward, setup_context=_swiglu_setup)
