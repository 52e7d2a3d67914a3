"""fp8 training's linear layer (DeepSeek-V3's recipe, Hopper, sm_90): `fp8_linear(x, weight)` is F.linear(x,
weight) with each GEMM of its forward and backward an fp8 `scaled_mm` with blockwise scales, the operands
quantized to e4m3 on the fly (each block's largest |value| at e4m3's 448):
- forward, y = x w^T: x by a token's 1 x 128 blocks of K, w by 128 x 128 blocks;
- dx = dy w: dy by a token's 1 x 128 blocks of N, w^T the forward's blocks transposed (the same 128 x 128 blocks);
- dw = dy^T x: dy^T and x^T each by a row's 1 x 128 blocks along the tokens (`scaled_mm`'s 1 x 128 for both), the
  tokens padded with zeros to a multiple of 16 (TMA's rows).
Registered as torch.ops.mlir_tile.fp8_linear with a fake and its autograd formula, so torch.compile traces it.

`fp8_grouped_linear(x, weight, offsets)` is a mixture of experts' layer the same way, on `grouped_mm`'s contiguous
form (x's tokens sorted by expert, weight [E, N, K]): the forward and dx e4m3 grouped GEMMs with blockwise scales
(x and dy by a token's 1 x 128 blocks, each expert's weight by its own 128 x 128 blocks, dx's w^T those blocks
transposed); dw each expert's dy^T x by the 16-bit grouped weight gradient (an e4m3 reduction over an expert's
ragged tokens, DeepGEMM's k-grouped GEMM, is not built).

No `from __future__ import annotations` here: torch reads the operators' schemas from their annotations.
"""
from typing import Callable, Tuple

import torch
import torch.nn.functional as F

import mlir_tile.kernels.ops  # noqa: F401  (registers torch.ops.mlir_tile.scaled_mm, which every GEMM here runs)
# (the scales' blocks, 1 x 128 of a row and 128 x 128 of a matrix; e4m3's largest; a reduction's extent a multiple
# of ROWS, fp8 rows on TMA's 16 bytes)
from mlir_tile.kernels.gemm.quantize import BLOCK, E4M3_LARGEST, PIECE, ROWS
from mlir_tile.kernels.registry import kernels_on, register_operator


def fp8_linear(x, weight):
    """x [..., K] @ weight [N, K]^T, x and weight float16 or bfloat16 (one dtype; K and N multiples of 16), each
    GEMM (forward, dx, dw) an e4m3 product with blockwise scales (the module's text); the result and the
    gradients in x's and weight's dtype. ValueError in one line for what it does not take."""
    return torch.ops.mlir_tile.fp8_linear(x, weight)


def quantized_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [R, C], fp32 [R, ceil(C / 128)]) of x [R, C]: each row's 1 x 128 blocks under a scale of their own
    (the block's largest |x| / 448; 1 for a block of zeros), the last block's columns past C as zeros."""
    return _quantized(x, 1)


def quantized_blocks(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [N, K], fp32 [ceil(N / 128), ceil(K / 128)]) of w [N, K]: 128 x 128 blocks under a scale each."""
    return _quantized(w, BLOCK)


def quantized_columns(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [C, T16], fp32 [C, ceil(T16 / 128)]) of x [T, C] transposed, T16 = T rounded up to a multiple of ROWS
    with zeros: each column's 1 x 128 blocks along T (a weight gradient's operands), in one pass where the
    library's kernel takes x, else by torch's ops on a padded copy of x^T."""
    if _takes(x):
        return kernels_on(x.device).quantize(x, 1, transposed=True)
    return quantized_by_torch(F.pad(x.t(), (0, -x.shape[0] % ROWS)), 1)


def _takes(x: torch.Tensor) -> bool:
    """Whether the library's kernel quantizes x: a 2-D CUDA tensor of 16-bit floats, its columns a multiple of 8."""
    return x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.dim() == 2 and x.shape[1] % PIECE == 0


def _quantized(x: torch.Tensor, block_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [R, C] in blocks of `block_rows` x 128 by the library's kernel in one pass (`gemm.quantize`: a CUDA tensor
    of 16-bit floats, C a multiple of 8), else by torch's ops (`quantized_by_torch`)."""
    if _takes(x):
        return kernels_on(x.device).quantize(x, block_rows)
    return quantized_by_torch(x, block_rows)


def quantized_by_torch(x: torch.Tensor, block_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """`_quantized` by torch's ops: three passes over x (each block's largest |x| in one reduction, the division
    in fp32, the cast), a pad and a slice only where R or C is not a whole number of blocks."""
    x = x.contiguous()  # (a transposed view's blocks would come out with its strides, not [R, C] row-major)
    rows, columns = x.shape
    whole = rows % block_rows == 0 and columns % BLOCK == 0
    padded = x if whole else F.pad(x, (0, -columns % BLOCK, 0, -rows % block_rows))
    blocks = padded.reshape(padded.shape[0] // block_rows, block_rows, padded.shape[1] // BLOCK, BLOCK)
    scales = _scales(torch.linalg.vector_norm(blocks, float("inf"), dim=(1, 3)).float())  # (a max: exact in x's dtype)
    quantized = torch.div(blocks, scales[:, None, :, None]).to(torch.float8_e4m3fn).view(padded.shape)
    return (quantized if whole else quantized[:rows, :columns].contiguous()), scales


def _scales(largest: torch.Tensor) -> torch.Tensor:
    # (divided by a tensor of 448s: torch's CUDA division by a number multiplies by its fp32 reciprocal, one ulp
    # off the IEEE quotient for about half the blocks, which the CPU's and the kernel's division give)
    return torch.where(largest > 0, largest / torch.full_like(largest, E4M3_LARGEST), torch.ones_like(largest))


def forward_product(x2: torch.Tensor, weight: torch.Tensor, scaled: Callable) -> torch.Tensor:
    """x2 [M, K] @ weight^T by `scaled(a, b, scale_a, scale_b)` (an fp8 product of b [N, K] with blockwise
    scales, bf16 out)."""
    (a, scale_a), (b, scale_b) = quantized_rows(x2), quantized_blocks(weight)
    return scaled(a, b, scale_a, scale_b)


def gradients(x2: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor,
              scaled: Callable) -> Tuple[torch.Tensor, torch.Tensor]:
    """(dx [M, K], dw [N, K]) of x2 [M, K] @ weight^T given grad [M, N], each by `scaled` (`forward_product`'s):
    dx = dy w with dy by its rows' 1 x 128 blocks and w^T by the forward's 128 x 128 blocks transposed; dw = dy^T
    x with both read along the tokens by rows' 1 x 128 blocks, the tokens padded with zeros to a multiple of
    ROWS."""
    (dy, scale_dy), (w, scale_w) = quantized_rows(grad), quantized_blocks(weight)
    dx = scaled(dy, w.t().contiguous(), scale_dy, scale_w.t().contiguous())
    (dy_t, scale_dy_t), (x_t, scale_x_t) = (quantized_columns(t) for t in (grad, x2))
    return dx, scaled(dy_t, x_t, scale_dy_t, scale_x_t)


def _device_scaled(a, b, scale_a, scale_b):
    return torch.ops.mlir_tile.scaled_mm(a, b, scale_a, scale_b, "nk", "default")


def _checked(x: torch.Tensor, weight: torch.Tensor) -> None:
    if not (x.dtype == weight.dtype and x.dtype in (torch.float16, torch.bfloat16) and weight.dim() == 2
            and x.dim() >= 1 and x.shape[-1] == weight.shape[1] and weight.shape[0] % ROWS == 0
            and weight.shape[1] % ROWS == 0):
        raise ValueError(f"fp8_linear: x [..., K] and weight [N, K] of one dtype, float16 or bfloat16, K and N "
                         f"multiples of {ROWS}; got {tuple(x.shape)} {x.dtype} and {tuple(weight.shape)} "
                         f"{weight.dtype}")


def fp8_grouped_linear(x, weight, offsets):
    """x [tokens, K] sorted by expert, weight [E, N, K], offsets int32 [E] (the cumulative ends of the experts'
    rows, `grouped_mm`'s contiguous form): [tokens, N] whose rows of expert e are x's times weight[e]^T (rows
    past offsets[E - 1] zeros), in x's dtype (float16 or bfloat16, weight's too; N and K multiples of 16); the
    forward and dx e4m3 grouped GEMMs with blockwise scales, dw 16-bit (the module's text). ValueError in one line
    for what it does not take."""
    return torch.ops.mlir_tile.fp8_grouped_linear(x, weight, offsets)


def quantized_experts(weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [E, N, K], fp32 [E, ceil(N / 128), ceil(K / 128)]) of weight [E, N, K]: each expert's 128 x 128 blocks
    (its N padded with zero rows to whole blocks where it is not, so that no block holds two experts' rows)."""
    experts, n, depth = weight.shape
    whole = n % BLOCK == 0
    padded = weight if whole else F.pad(weight, (0, 0, 0, -n % BLOCK))
    q, scales = quantized_blocks(padded.reshape(-1, depth))
    q = q.view(experts, -1, depth)
    return (q if whole else q[:, :n].contiguous()), scales.view(experts, -1, scales.shape[1])


def grouped_forward_product(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor,
                            grouped: Callable) -> torch.Tensor:
    """x [tokens, K] @ each expert's weight^T by `grouped(a, b, offsets, scale_a, scale_b)` (an e4m3 grouped
    product of b [E, N, K] with blockwise scales, contiguous form, bf16 out)."""
    (a, scale_a), (b, scale_b) = quantized_rows(x), quantized_experts(weight)
    return grouped(a, b, offsets, scale_a, scale_b)


def grouped_gradients(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, grad: torch.Tensor,
                      grouped: Callable, weight_gradient: Callable) -> Tuple[torch.Tensor, torch.Tensor]:
    """(dx [tokens, K], dw [E, N, K]) given grad [tokens, N]: dx = each expert's dy rows times its w by `grouped`
    (`grouped_forward_product`'s), dy by its rows' 1 x 128 blocks, w^T its experts' 128 x 128 blocks transposed;
    dw by `weight_gradient(grad, x, offsets)`."""
    (dy, scale_dy), (w, scale_w) = quantized_rows(grad), quantized_experts(weight)
    dx = grouped(dy, w.transpose(1, 2).contiguous(), offsets, scale_dy, scale_w.transpose(1, 2).contiguous())
    return dx, weight_gradient(grad, x, offsets)


def _device_grouped(a, b, offsets, scale_a, scale_b):
    return kernels_on(a.device).grouped(a, b, offsets=offsets, scale_x=scale_a, scale_w=scale_b)


def _device_weight_gradient(grad, x, offsets):
    return kernels_on(grad.device).grouped.weight_gradient(grad, x, offsets)


def _checked_grouped(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> None:
    if not (x.dtype == weight.dtype and x.dtype in (torch.float16, torch.bfloat16) and x.dim() == 2
            and weight.dim() == 3 and x.shape[1] == weight.shape[2] and weight.shape[1] % ROWS == 0
            and weight.shape[2] % ROWS == 0 and offsets.dtype == torch.int32
            and tuple(offsets.shape) == weight.shape[:1]):
        raise ValueError(f"fp8_grouped_linear: x [tokens, K] and weight [E, N, K] of one dtype, float16 or "
                         f"bfloat16, K and N multiples of {ROWS}, offsets int32 [E]; got {tuple(x.shape)} {x.dtype}, "
                         f"{tuple(weight.shape)} {weight.dtype}, offsets {offsets.dtype} {tuple(offsets.shape)}")


def _fp8_grouped_linear(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    _checked_grouped(x, weight, offsets)
    if 0 in (*x.shape, *weight.shape):
        return x.new_zeros((x.shape[0], weight.shape[1]))
    x, weight = x.contiguous(), weight.contiguous()
    return grouped_forward_product(x, weight, offsets.contiguous(), _device_grouped).to(x.dtype)


def _fp8_grouped_linear_fake(x, weight, offsets):
    _checked_grouped(x, weight, offsets)
    return x.new_empty((x.shape[0], weight.shape[1]))


def _fp8_grouped_linear_gradients(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor,
                                  grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    if 0 in (*x.shape, *weight.shape):
        return x.new_zeros(x.shape), weight.new_zeros(weight.shape)
    dx, dw = grouped_gradients(x.contiguous(), weight.contiguous(), offsets.contiguous(), grad.contiguous(),
                               _device_grouped, _device_weight_gradient)
    return dx.to(x.dtype), dw.to(weight.dtype)


def _fp8_grouped_linear_backward(ctx, grad):
    x, weight, offsets = ctx.saved_tensors  # (an operator of its own, as fp8_linear's: `_fp8_linear_backward`)
    return (*torch.ops.mlir_tile.fp8_grouped_linear_gradients(x, weight, offsets, grad), None)


def _fp8_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    _checked(x, weight)
    x2 = x.reshape(-1, x.shape[-1])
    if not x2.shape[0]:
        return x.new_empty((*x.shape[:-1], weight.shape[0]))
    return forward_product(x2, weight, _device_scaled).to(x.dtype).view(*x.shape[:-1], weight.shape[0])


def _fp8_linear_fake(x, weight):
    _checked(x, weight)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _fp8_linear_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _fp8_linear_gradients(x: torch.Tensor, weight: torch.Tensor,
                          grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    x2, grad2 = x.reshape(-1, x.shape[-1]), grad.reshape(-1, weight.shape[0])
    if not x2.shape[0]:
        return x.new_zeros(x.shape), weight.new_zeros(weight.shape)
    dx, dw = gradients(x2, weight, grad2, _device_scaled)
    return dx.to(x.dtype).view(x.shape), dw.to(weight.dtype)


def _fp8_linear_backward(ctx, grad):
    # (the gradients an operator of their own, so that torch.compile traces the backward to its fake: the
    # quantizing launchers take real tensors)
    x, weight = ctx.saved_tensors
    return torch.ops.mlir_tile.fp8_linear_gradients(x, weight, grad)


def _gradients_fake(x, weight, *rest):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


register_operator("fp8_linear", _fp8_linear, fake=_fp8_linear_fake, backward=_fp8_linear_backward,
                  setup_context=_fp8_linear_setup)
register_operator("fp8_grouped_linear", _fp8_grouped_linear, fake=_fp8_grouped_linear_fake,
                  backward=_fp8_grouped_linear_backward, setup_context=_fp8_linear_setup)
register_operator("fp8_linear_gradients", _fp8_linear_gradients, fake=_gradients_fake)
register_operator("fp8_grouped_linear_gradients", _fp8_grouped_linear_gradients, fake=_gradients_fake)
