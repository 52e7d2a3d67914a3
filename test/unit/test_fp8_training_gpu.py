"""fp8 training on the GPU (sm_90): the quantization kernel (`gemm.quantize`) bit for bit against torch's ops
(`fp8_training.quantized_by_torch`, the CPU's path, which test_fp8_training.py checks against each value's e4m3
rounding), and `fp8_linear` within fp8's error of fp32 F.linear. Skipped without torch or an sm_90 GPU (the
reason shown)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
from test_kernels_ops_gpu import _hopper_only  # noqa: E402

F = torch.nn.functional


@_hopper_only
def test_the_quantization_kernel_is_torchs_blockwise_quantization_bit_for_bit():
    """240 random matrices (rows 1-700, columns multiples of 8 up to 1,100: blocks cut by both edges; f16 and bf16;
    1 x 128 and 128 x 128 blocks, and x^T's 1 x 128 blocks padded to 16 tokens, a weight gradient's), values of
    magnitudes 2^-30 to 2^15 (f16: 2^-14 to 2^12) by column, a block of zeros, a view of a larger buffer (a
    transposed view, one off 16 bytes): the kernel's e4m3 bytes and scales equal torch's ops' on the same values,
    and a tensor it does not take is a one-line ValueError."""
    from mlir_tile.kernels.fp8_training import _quantized, quantized_by_torch, quantized_columns

    rng, failures = random.Random(49), []
    for trial in range(240):
        dtype, form = (torch.bfloat16, torch.float16)[trial % 2], ("rows", "blocks", "columns")[trial // 2 % 3]
        rows, columns = rng.randint(1, 700), 8 * rng.randint(1, 137)
        magnitudes = torch.logspace(*((-30, 15) if dtype == torch.bfloat16 else (-14, 12)), columns, base=2,
                                    device="cuda")
        x = (torch.randn(rows, columns, device="cuda") * magnitudes[torch.randperm(columns, device="cuda")]).to(dtype)
        x[: min(rows, 128), :128] = 0
        view = trial % 5
        if view == 1:  # (a transposed view: copied into rows first)
            x = x.t().contiguous().t()
        elif view == 2:  # (off 16 bytes)
            x = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(rows, columns)
        if form == "columns":  # (torch's: x^T padded with zero tokens, then its rows' blocks)
            (q, scales), want = quantized_columns(x), quantized_by_torch(F.pad(x.t(), (0, -rows % 16)), 1)
        else:
            block_rows = 1 if form == "rows" else 128
            (q, scales), want = _quantized(x, block_rows), quantized_by_torch(x, block_rows)
        if not (q.shape == want[0].shape and torch.equal(q.view(torch.uint8), want[0].view(torch.uint8))
                and torch.equal(scales, want[1])):
            failures.append((trial, dtype, form, rows, columns, view, tuple(q.shape), tuple(want[0].shape)))
    assert not failures, failures[:8]
    from mlir_tile.kernels.ops import kernels_on

    with pytest.raises(ValueError, match="columns a multiple of 8") as raised:
        kernels_on(torch.device("cuda")).quantize(torch.randn(4, 12, device="cuda", dtype=torch.bfloat16), 1)
    assert "\n" not in str(raised.value)


@_hopper_only
def test_fp8_linear_trains_within_fp8s_error_of_f_linear():
    """`fp8_linear` (DeepSeek-V3's recipe: each GEMM of forward, dx and dw an e4m3 `scaled_mm` with blockwise
    scales, the operands quantized on the fly) on 40 random shapes (tokens 1-600 with leading dimensions, K and N
    multiples of 16 up to 1,024, bf16 and f16; four under torch.compile): the output and both gradients within
    0.08 relative RMS of fp32 F.linear's (e4m3's 3-bit mantissas leave about 0.04 on random products), in x's
    and weight's dtypes; a shape it does not take is a one-line ValueError."""
    from mlir_tile.kernels.fp8_training import fp8_linear

    rng, failures = random.Random(48), []
    compiled = torch.compile(fp8_linear, fullgraph=True)  # (its backward traced to its gradients' operator)
    for trial in range(40):
        dtype = (torch.bfloat16, torch.float16)[trial % 2]
        lead = rng.choice([(rng.randint(1, 600),), (rng.randint(1, 4), rng.randint(1, 150))])
        k, n = (16 * rng.randint(1, 64) for _ in range(2))
        x = torch.randn(*lead, k, device="cuda", dtype=dtype, requires_grad=True)
        weight = (torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5).requires_grad_()
        grad = torch.randn(*lead, n, device="cuda", dtype=dtype)
        y = (compiled if trial % 10 == 9 else fp8_linear)(x, weight)
        y.backward(grad)
        exact = [t.detach().float().requires_grad_() for t in (x, weight)]
        want = F.linear(*exact)
        want.backward(grad.float())
        for name, got, expected in (("y", y, want), ("dx", x.grad, exact[0].grad), ("dw", weight.grad, exact[1].grad)):
            error = float((got.float() - expected).pow(2).mean().sqrt() / expected.pow(2).mean().sqrt())
            if got.dtype != dtype or got.shape != expected.shape or not error < 0.08:
                failures.append((trial, lead, k, n, name, got.dtype, error))
    assert not failures, failures[:8]
    with pytest.raises(ValueError, match="multiples of 16") as raised:
        fp8_linear(*(torch.randn(rows, 24, device="cuda", dtype=torch.bfloat16) for rows in (4, 16)))
    assert "\n" not in str(raised.value)


@_hopper_only
def test_fp8_grouped_linear_trains_within_fp8s_error_of_each_experts_linear():
    """`fp8_grouped_linear` on 30 random mixtures (1-8 experts of 0 to 300 tokens each, rows past the last
    expert's, K and N multiples of 16 up to 768, bf16 and f16; plain and under torch.compile): the output and dx
    within 0.08 relative RMS of fp32 autograd of each expert's F.linear, dw (16-bit) within 0.01, rows past the
    last expert zeros with zero gradients; a shape it does not take is a one-line ValueError."""
    from mlir_tile.kernels.fp8_training import fp8_grouped_linear

    rng, failures = random.Random(62), []
    compiled = torch.compile(fp8_grouped_linear, fullgraph=True)
    for trial in range(30):
        dtype = (torch.bfloat16, torch.float16)[trial % 2]
        counts = [rng.choice([0, 1, rng.randint(2, 300)]) for _ in range(rng.randint(1, 8))]
        tail, (k, n) = rng.randint(0, 5), (16 * rng.randint(1, 48) for _ in range(2))
        x = torch.randn(sum(counts) + tail, k, device="cuda", dtype=dtype, requires_grad=True)
        weight = (torch.randn(len(counts), n, k, device="cuda", dtype=dtype) / k ** 0.5).requires_grad_()
        offsets = torch.tensor(counts, device="cuda").cumsum(0).int()
        grad = torch.randn(x.shape[0], n, device="cuda", dtype=dtype)
        y = (compiled if trial % 10 == 9 else fp8_grouped_linear)(x, weight, offsets)
        y.backward(grad)
        exact = [t.detach().float().requires_grad_() for t in (x, weight)]
        bounds = [0] + offsets.tolist()
        want = torch.cat([F.linear(exact[0][s:e], exact[1][expert]) for expert, (s, e) in
                          enumerate(zip(bounds, bounds[1:]))] + [exact[0].new_zeros(tail, n)])
        want.backward(grad.float())
        for name, got, expected, bound in (("y", y, want, 0.08), ("dx", x.grad, exact[0].grad, 0.08),
                                           ("dw", weight.grad, exact[1].grad, 0.01)):
            scale = float(expected.pow(2).mean().sqrt()) or 1.0
            error = float((got.float() - expected).pow(2).mean().sqrt()) / scale
            if got.dtype != dtype or got.shape != expected.shape or not error < bound:
                failures.append((trial, counts, tail, k, n, name, got.dtype, error))
        if tail and (y[-tail:].any() or x.grad[-tail:].any()):
            failures.append((trial, "rows past the last expert"))
    assert not failures, failures[:8]
    with pytest.raises(ValueError, match="multiples of 16") as raised:
        fp8_grouped_linear(torch.randn(4, 24, device="cuda", dtype=torch.bfloat16),
                           torch.randn(2, 16, 24, device="cuda", dtype=torch.bfloat16),
                           torch.tensor([2, 4], device="cuda", dtype=torch.int32))
    assert "\n" not in str(raised.value)
