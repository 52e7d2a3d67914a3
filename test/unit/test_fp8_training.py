"""fp8 training's linear layer (`kernels.fp8_training`) on the CPU: its blockwise quantization against each
value's e4m3 rounding, and its forward and gradients, each GEMM an exact product of the dequantized operands
written out here, against float64 autograd of F.linear within fp8's error. (The GPU's kernels run them in
test_fp8_training_gpu.py.) Skipped without torch."""
import pytest

torch = pytest.importorskip("torch", reason="fp8_linear's quantization and gradients are torch functions")


def _dequantized(q, scales, rows: int, columns: int):
    """q (e4m3) times its scales, each scale over its block: [R, C / 128] 1 x 128 blocks of a row, or [R / 128,
    C / 128] 128 x 128 blocks where it has fewer rows than q (written here, not the module's layout code)."""
    per_row = scales.shape[0] == q.shape[0] and q.shape[0] > 1
    spread = scales.repeat_interleave(128, 1) if per_row else scales.repeat_interleave(128, 0).repeat_interleave(128, 1)
    return q.double() * spread[:rows, :columns].double()


def _exact_scaled(a, b, scale_a, scale_b):
    """The exact product of e4m3 a [M, K] and b [N, K]^T under their blockwise scales (scaled_mm's contract)."""
    return _dequantized(a, scale_a, *a.shape) @ _dequantized(b, scale_b, *b.shape).T


@pytest.mark.parametrize("which", ["rows", "blocks"])
def test_blockwise_quantization_rounds_each_value_to_e4m3_under_its_blocks_scale(which):
    from mlir_tile.kernels import fp8_training

    generator = torch.Generator().manual_seed(3)
    x = torch.randn(200, 333, generator=generator) * torch.logspace(-3, 3, 333)  # (blocks of unlike magnitudes)
    x[5, 128:256] = 0  # (a block of zeros: scale 1)
    q, scales = (fp8_training.quantized_rows if which == "rows" else fp8_training.quantized_blocks)(x)
    blocks = (200, 3) if which == "rows" else (2, 3)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape and scales.shape == blocks
    values = _dequantized(q, scales, *x.shape)
    spread = scales.repeat_interleave(128, -1).repeat_interleave(1 if which == "rows" else 128, 0)[:200, :333]
    # (each block's largest at 448, up to the fp32 scale's rounding: e4m3's next value up would be 480)
    assert float((x.double().abs() / spread.double()).max()) <= 448 * (1 + 2 ** -20)
    error = (values - x.double()).abs()
    assert bool((error <= 2 ** -4 * x.double().abs() + 2 ** -10 * spread.double()).all())  # (subnormals: 2^-9 steps)
    assert not bool(values[5, 128:256].any())


@pytest.mark.parametrize("which", ["rows", "blocks"])
def test_a_transposed_view_quantizes_as_its_contiguous_copy_into_row_major_tensors(which):
    """A weight gradient's operands are transposed views (dy^T, x^T) of whole blocks: the quantized values and the
    scales come out row-major (as `scaled_mm` takes them) and equal to the contiguous copy's (the view's blocks
    once kept its strides, and `scaled_mm` refused them)."""
    from mlir_tile.kernels import fp8_training

    quantize = fp8_training.quantized_rows if which == "rows" else fp8_training.quantized_blocks
    x = torch.randn(256, 384, generator=torch.Generator().manual_seed(4)).t()
    (q, scales), (q_copy, scales_copy) = quantize(x), quantize(x.contiguous())
    assert q.is_contiguous() and scales.is_contiguous()
    assert torch.equal(q.view(torch.uint8), q_copy.view(torch.uint8)) and torch.equal(scales, scales_copy)


def test_columns_quantize_x_transposed_with_zero_tokens_up_to_16():
    """A weight gradient's operand: x [T, C] as x^T [C, T16] by its rows' 1 x 128 blocks along T, the tokens past T
    zeros (`scaled_mm`'s rows on 16 bytes), its values those of x^T's rows."""
    from mlir_tile.kernels import fp8_training

    x = torch.randn(37, 24, generator=torch.Generator().manual_seed(5)) * 100
    q, scales = fp8_training.quantized_columns(x)
    assert q.shape == (24, 48) and scales.shape == (24, 1) and not q.float()[:, 37:].any()
    assert torch.allclose(_dequantized(q, scales, 24, 48)[:, :37], x.t().double(), rtol=2 ** -3, atol=1e-6)


@pytest.mark.parametrize("tokens", [1, 37, 256])
def test_fp8_linears_forward_and_gradients_are_f_linears_within_fp8s_error(tokens):
    """Relative RMS errors against float64 autograd of F.linear: the forward and dx (two quantized operands)
    and dw (two quantized operands along the tokens, padded to 16) within 0.08, what e4m3's 3-bit mantissas
    leave of random products (each operand 2^-5 RMS relative)."""
    from mlir_tile.kernels import fp8_training

    generator = torch.Generator().manual_seed(tokens)
    x, weight, grad = (torch.randn(*shape, generator=generator, dtype=torch.float64)
                       for shape in ((tokens, 256), (384, 256), (tokens, 384)))
    inputs = [t.clone().requires_grad_() for t in (x, weight)]
    expected = torch.nn.functional.linear(*inputs)
    expected.backward(grad)
    y = fp8_training.forward_product(x, weight, _exact_scaled)
    dx, dw = fp8_training.gradients(x, weight, grad, _exact_scaled)
    for got, want in ((y, expected.detach()), (dx, inputs[0].grad), (dw, inputs[1].grad)):
        assert got.shape == want.shape
        assert float((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()) < 0.08


def _exact_grouped(a, b, offsets, scale_a, scale_b):
    """The exact contiguous grouped product: expert e's rows [offsets[e - 1], offsets[e]) of e4m3 a [tokens, K]
    times its b[e] [N, K]^T under their blockwise scales (scale_b [E, N / 128, K / 128]), rows past the last
    offset zeros."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    start = 0
    for expert, end in enumerate(offsets.tolist()):
        out[start:end] = _exact_scaled(a[start:end], b[expert], scale_a[start:end], scale_b[expert])
        start = end
    return out


def _exact_weight_gradient(grad, x, offsets):
    bounds = [0] + offsets.tolist()
    return torch.stack([grad[s:e].double().T @ x[s:e].double() for s, e in zip(bounds, bounds[1:])])


@pytest.mark.parametrize("counts, n", [((0, 37, 1, 90), 144), ((128, 0, 200), 256), ((5,), 48)])
def test_fp8_grouped_linears_forward_and_gradients_are_each_experts_linear_within_fp8s_error(counts, n):
    """The experts' layer (`fp8_grouped_linear`'s functions, each grouped GEMM an exact product of the dequantized
    operands written out here): y and dx within 0.08 relative RMS of float64 autograd of each expert's F.linear
    (experts of 0, 1 and odd counts of tokens, N past whole 128-row blocks, rows past the last expert's: zeros
    and no gradient), dw the exact product it is given."""
    from mlir_tile.kernels import fp8_training

    generator = torch.Generator().manual_seed(sum(counts) + n)
    tokens, depth = sum(counts) + 3, 160  # (3 rows past the last expert's)
    x, grad = (torch.randn(tokens, size, generator=generator, dtype=torch.float64) for size in (depth, n))
    weight = torch.randn(len(counts), n, depth, generator=generator, dtype=torch.float64)
    offsets = torch.tensor(counts, dtype=torch.int32).cumsum(0).int()
    inputs = [t.clone().requires_grad_() for t in (x, weight)]
    bounds = [0] + offsets.tolist()
    expected = torch.cat([torch.nn.functional.linear(inputs[0][s:e], inputs[1][expert])
                          for expert, (s, e) in enumerate(zip(bounds, bounds[1:]))] + [x.new_zeros(3, n)])
    expected.backward(grad)
    y = fp8_training.grouped_forward_product(x, weight, offsets, _exact_grouped)
    dx, dw = fp8_training.grouped_gradients(x, weight, offsets, grad, _exact_grouped, _exact_weight_gradient)
    assert not y[-3:].any() and not dx[-3:].any()
    for got, want in ((y, expected.detach()), (dx, inputs[0].grad)):
        assert got.shape == want.shape
        assert float((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt()) < 0.08
    assert dw.shape == weight.shape and torch.allclose(dw, inputs[1].grad)


def test_each_experts_weight_blocks_are_its_own():
    """`quantized_experts`: an expert's 128 x 128 blocks hold its rows alone (N 144: each expert's last block 16
    rows, not the next expert's first 112), so that a large expert beside a small one keeps the small one's
    precision: its values equal the expert quantized alone."""
    from mlir_tile.kernels import fp8_training

    weight = torch.randn(2, 144, 160, generator=torch.Generator().manual_seed(9))
    weight[1] *= 1e-3
    q, scales = fp8_training.quantized_experts(weight)
    assert q.shape == weight.shape and scales.shape == (2, 2, 2)
    alone, alone_scales = fp8_training.quantized_blocks(weight[1])
    assert torch.equal(q[1].view(torch.uint8), alone.view(torch.uint8)) and torch.equal(scales[1], alone_scales)


def test_fp8_grouped_linear_refuses_what_it_does_not_take_in_one_line():
    from mlir_tile.kernels import fp8_grouped_linear

    x, weight = torch.randn(4, 32, dtype=torch.bfloat16), torch.randn(2, 16, 32, dtype=torch.bfloat16)
    offsets = torch.tensor([2, 4], dtype=torch.int32)
    for arguments in ((x.float(), weight, offsets), (x, weight, offsets.long()), (x, weight[:, :, :16], offsets)):
        with pytest.raises(ValueError, match="fp8_grouped_linear: x \\[tokens, K\\]") as raised:
            fp8_grouped_linear(*arguments)
        assert "\n" not in str(raised.value)


def test_the_layers_backwards_reach_their_gradients_operators_fakes_under_fake_tensors(monkeypatch):
    """As torch.compile traces a training step (fake tensors): fp8_linear's and fp8_grouped_linear's backwards
    are operators of their own (`fp8_linear_gradients`, `fp8_grouped_linear_gradients`), whose fakes give the
    gradients' shapes; the quantizing launchers, which take real tensors, are never called."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mlir_tile.kernels import fp8_training

    def refused(*arguments):
        raise AssertionError("the gradients' functions ran under fake tensors")

    for name in ("gradients", "grouped_gradients", "quantized_rows", "quantized_experts"):
        monkeypatch.setattr(fp8_training, name, refused)
    with FakeTensorMode():
        x, weight = torch.empty(2, 5, 64, dtype=torch.bfloat16), torch.empty(48, 64, dtype=torch.bfloat16)
        experts, offsets = torch.empty(3, 32, 64, dtype=torch.bfloat16), torch.empty(3, dtype=torch.int32)
        leaves = [t.requires_grad_() for t in (x, weight, experts)]
        y = fp8_training.fp8_linear(leaves[0], leaves[1])
        z = fp8_training.fp8_grouped_linear(leaves[0][0], leaves[2], offsets)
        gradients = torch.autograd.grad([y.sum(), z.sum()], leaves)
    assert (y.shape, z.shape) == ((2, 5, 48), (5, 32))
    assert [tuple(g.shape) for g in gradients] == [(2, 5, 64), (48, 64), (3, 32, 64)]
