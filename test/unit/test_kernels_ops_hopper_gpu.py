"""mlir_tile.kernels' Hopper-only torch operators on the GPU (sm_90): fp8 attention against fp32 attention of its
values; `scaled_mm` (fp8: per tensor, per row and blockwise, fast and precise) bit for bit against the exact
scaled product; `grouped_mm` (a mixture of experts' masked grouped GEMM, in a CUDA graph too) and `swiglu_mm`
(fused SwiGLU) against torch's fp32 within twice its own 16-bit error; `matmul` with A [K, M] and its launch plans
reused; what each refuses.
Skipped without torch or an sm_90 GPU (the reason shown)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
from test_kernels_ops_gpu import (ATTENTION_CASES, HOPPER_CASES, _hopper_only, _hopper_sizes, _offset,  # noqa: E402
                                  _wrong)

F = torch.nn.functional
pytestmark = pytest.mark.gpu


FP8_DESCALES = ("tensor", "expanded", "heads")  # one a tensor; it as a [batch, kv_heads] view; [batch, kv_heads]


def quantized(parts, group: int, form: str, heads_at: int):
    """`parts` (fp32 tensors [batch, ...], `group` heads a K/V head along dim `heads_at`) as float8_e4m3fn under
    one set of descales in `form` (FP8_DESCALES: "tensor", one element, the largest |x| at e4m3's 448;
    "expanded", that as a [batch, kv_heads] view of strides 0, as vLLM passes it; "heads", [batch, kv_heads],
    each K/V head's largest of its heads), and the values the fp8 ones stand for."""
    batch, kv_heads = parts[0].shape[0], parts[0].shape[heads_at] // group
    peaks = torch.stack([x.abs().movedim(heads_at, 1).reshape(batch, kv_heads, -1).amax(-1) for x in parts]).amax(0)
    if form != "heads":
        peaks = peaks.max().expand(batch, kv_heads)
    descale = torch.where(peaks > 0, peaks / 448, torch.ones_like(peaks))

    def spread(x):  # (each head's descale, as x broadcasts it)
        shape = [batch] + [1] * (x.dim() - 1)
        shape[heads_at] = kv_heads * group
        return descale.repeat_interleave(group, 1).reshape(shape)

    fp8 = [(x / spread(x)).to(torch.float8_e4m3fn) for x in parts]
    given = descale.contiguous() if form == "heads" else descale[:1, 0].contiguous() if form == "tensor" else (
        descale[:1, :1].contiguous().expand(batch, kv_heads))
    return fp8, given, [x.float() * spread(x) for x in fp8]


def head_magnitudes(batch: int, heads: int, group: int, heads_at: int, rng, spread: float) -> torch.Tensor:
    """Factors 2^-spread to 2^spread, one a (batch, K/V head), laid out to broadcast over [batch, ...] with heads
    at dim `heads_at` of 4: so that a descale read at another K/V head's place shows."""
    factors = torch.tensor([[2.0 ** rng.uniform(-spread, spread) for _ in range(heads // group)] for _ in range(batch)],
                           device="cuda").repeat_interleave(group, 1)
    shape = [batch, 1, 1, 1]
    shape[heads_at] = heads
    return factors.reshape(shape)


@_hopper_only
def test_fp8_attention_matches_fp32_attention_of_its_values_within_e4m3s_rounding_of_p():
    """150 random (batch, heads, kv_heads, seq, causal) at d 128 in float8_e4m3fn, the descales in turn one a
    tensor, that expanded to [batch, kv_heads] (strides 0), and one a (batch, K/V head) over inputs whose heads'
    magnitudes differ up to 64-fold (FlashAttention-3's form): O (bf16) within (2^-4 + 2 e) max |v| of fp32 attention
    of the values the fp8 inputs stand for (P is rounded to e4m3: a relative error of at most 2^-4 on each
    weight; e bounds the scores' error, fp8 wgmma summing with about 13 bits:
    `flash.sm90_checks.fp8_score_error`'s), the log-sum-exp within 1e-3 + e; rows peaked (N(0, 2) inputs), so a
    key misplaced between P and V would show (an error of about max |v|)."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.sm90_checks import FP8_ACCUMULATION

    rng, failures = random.Random(7), []
    for trial in range(ATTENTION_CASES // 2):
        batch, kv_heads, group = rng.randint(1, 3), rng.randint(1, 3), rng.choice([1, 1, 2, 4])
        heads, form = kv_heads * group, FP8_DESCALES[trial % 3]
        seq, causal = rng.choice([1, 17, 64, 65, 128, 129, 200, rng.randint(1, 700)]), rng.random() < 0.5
        quantized_parts, descales, values = [], [], []
        for count, grouped, spread in ((heads, group, 1.5), (kv_heads, 1, 1.5), (kv_heads, 1, 3)):  # (q, k, v)
            x = 2 * torch.randn(batch, count, seq, 128, device="cuda")
            fp8, descale, value = quantized([x * head_magnitudes(batch, count, grouped, 1, rng, spread)], grouped,
                                            form, 1)
            quantized_parts += fp8
            descales.append(descale)
            values += value
        o, lse = attention(*quantized_parts, causal=causal, descale_q=descales[0], descale_k=descales[1],
                           descale_v=descales[2])
        q_values, k_values, v_values = values[0], *(x.repeat_interleave(group, 1) for x in values[1:])
        scores = q_values @ k_values.transpose(-1, -2) / 128 ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(seq, seq, device="cuda").triu(1).bool(), float("-inf"))
        expected = scores.softmax(-1) @ v_values
        o_error = (o.float() - expected).abs().amax((-1, -2))  # (each head's, against its own bound)
        lse_error = (lse - scores.logsumexp(-1)).abs().amax(-1)
        score_error = FP8_ACCUMULATION * (q_values.abs() @ k_values.abs().transpose(-1, -2)).amax((-1, -2)) / 128 ** 0.5
        bound = (2 ** -4 + 2 * score_error) * v_values.abs().amax((-1, -2)) + 2 ** -7 * expected.abs().amax((-1, -2))
        if o.dtype != torch.bfloat16 or bool((o_error > bound).any() or (lse_error > 1e-3 + score_error).any()):
            failures.append(((batch, heads, kv_heads, seq, causal, form), o.dtype, float((o_error / bound).max()),
                             float((lse_error - score_error).max())))
    assert not failures, failures[:10]


def test_fp8_attention_without_descales_or_with_them_on_16_bit_inputs_is_a_value_error():
    from mlir_tile.kernels import attention

    q = torch.randn(1, 1, 8, 128, device="cuda")
    with pytest.raises(ValueError, match="take descale_q, descale_k and descale_v"):
        attention(*(q.to(torch.float8_e4m3fn),) * 3)
    with pytest.raises(ValueError, match="descales are for float8_e4m3fn"):
        attention(*(q.half(),) * 3, descale_q=torch.ones(1, device="cuda"))


@_hopper_only
@pytest.mark.parametrize("scaling, accumulation", [("tensor", "default"), ("rows", "default"), ("tensor", "precise"),
                                                   ("rows", "precise"), ("blocks", "default"),
                                                   ("row_blocks", "default")])
def test_scaled_mm_is_the_exact_scaled_product_on_random_shapes(scaling, accumulation):
    """fp8 e4m3 small integers (exact products and sums), B [N, K] and [K, N] (transposed in the kernel) in
    turn (blockwise: [N, K]), power-of-two scales per tensor, per row or blockwise (scale_a [M, K / 128], scale_b
    [N / 128, K / 128], or [N, K / 128] as a weight gradient's, rounded up: DeepGEMM's), fast or precise
    accumulation: C is the bf16 of the exact scaled product, bit for bit."""
    from mlir_tile.kernels import scaled_mm

    rng, failures = random.Random(29), []
    for trial in range(HOPPER_CASES):
        blockwise = scaling in ("blocks", "row_blocks")
        (m, n, k), layout = _hopper_sizes(rng, 16), ("nk", "kn")[trial % 2] if not blockwise else "nk"
        a = torch.randint(-3, 4, (m, k), device="cuda").float()
        b = torch.randint(-3, 4, (n, k) if layout == "nk" else (k, n), device="cuda").float()
        b_kn = b.T if layout == "nk" else b
        if blockwise:
            rows_of_b = n if scaling == "row_blocks" else -(-n // 128)
            blocks = [(m, -(-k // 128)), (rows_of_b, -(-k // 128))]
            scale_a, scale_b = (2.0 ** -torch.randint(0, 3, shape, device="cuda").float() for shape in blocks)
            exact = sum((a[:, 128 * t:128 * (t + 1)] @ b_kn[128 * t:128 * (t + 1)]) * scale_a[:, t, None]
                        * scale_b[:, t].repeat_interleave(128 if scaling == "blocks" else 1)[None, :n]
                        for t in range(blocks[0][1]))
        else:
            if scaling == "rows":
                scale_a, scale_b = (2.0 ** -torch.randint(0, 3, (size,), device="cuda").float() for size in (m, n))
            else:
                scale_a, scale_b = (torch.tensor([value], device="cuda") for value in (0.5, 0.25))
            exact = (a @ b_kn) * scale_a.reshape(-1, 1) * scale_b.reshape(1, -1)
        got = scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), scale_a, scale_b, b_layout=layout,
                        accumulation=accumulation)
        if not torch.equal(got, exact.to(torch.bfloat16)):
            failures.append(((m, n, k, layout), float((got.float() - exact).abs().max())))
    assert not failures, failures[:10]


@_hopper_only
def test_grouped_mm_computes_each_experts_counted_rows_and_replays_in_a_graph():
    """`grouped_mm` (masked, a mixture of experts' decode step) on 300 random experts, tokens and counts (0, 1, odd
    and all among them), both dtypes: each expert's counted rows within twice the error of torch's 16-bit product
    against fp32 (plus the rounding of its scale); a CUDA graph of the call replayed with new counts and new
    tokens computes the new rows; T not a multiple of 128 and counts not int32 [E] are refused in one line."""
    from mlir_tile.kernels import grouped_mm

    rng, failures = random.Random(63), []

    def errors(got, x, w, counts):
        counted = counts.tolist()
        return _expert_errors(lambda e: got[e, :counted[e]], lambda e: x[e, :counted[e]], w)

    for trial in range(300):
        experts, rows = rng.choice([1, 2, 5, 16, rng.randint(1, 64)]), 128 * rng.randint(1, 4)
        n, depth, dtype = 8 * rng.randint(1, 64), 8 * rng.randint(1, 64), (torch.bfloat16, torch.float16)[trial % 2]
        x = torch.randn(experts, rows, depth, device="cuda", dtype=dtype)
        w = torch.randn(experts, n, depth, device="cuda", dtype=dtype) / depth ** 0.5
        counts = torch.tensor([rng.choice([0, 1, 7, rows, rng.randint(0, rows)]) for _ in range(experts)],
                              device="cuda", dtype=torch.int32)
        failures += [(trial, found) for found in errors(grouped_mm(x, w, counts), x, w, counts)]
    assert not failures, failures[:5]
    graph = torch.cuda.CUDAGraph()
    grouped_mm(x, w, counts)  # (its plan made before the capture)
    with torch.cuda.graph(graph):
        out = grouped_mm(x, w, counts)
    counts.copy_(torch.tensor([rows - e % rows for e in range(x.shape[0])], device="cuda", dtype=torch.int32))
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert not errors(out, x, w, counts)
    with pytest.raises(ValueError, match="T a multiple of 128"):
        grouped_mm(x[:, :100], w, counts)
    with pytest.raises(ValueError, match="counts int32"):
        grouped_mm(x, w, counts.long())


def _expert_errors(got_rows, x_rows, w) -> list:
    """The experts whose rows of `got_rows` (a function of the expert: its rows of ours, and of x) miss fp32's
    product beyond twice torch's 16-bit error (plus 4 eps of the product's scale)."""
    found = []
    for e in range(w.shape[0]):
        got, x = got_rows(e), x_rows(e)
        if not len(x):
            continue
        exact = x.float() @ w[e].float().T
        theirs = (x @ w[e].T).float()
        bound = 2 * float((theirs - exact).abs().max()) + 4 * torch.finfo(x.dtype).eps * float(exact.abs().max())
        if not float((got.float() - exact).abs().max()) <= bound:
            found.append((e, len(x), float((got.float() - exact).abs().max()), bound))
    return found


@_hopper_only
def test_contiguous_grouped_mm_computes_each_experts_rows_and_replays_in_a_graph():
    """`grouped_mm(x, w, offsets=...)` (contiguous, torch._grouped_mm's layout) on 300 random cases, both dtypes:
    1 to 400 experts (a second pass of the kernel's scan past 384), rows per expert 0, 1, odd, a tile and one more,
    random, some tokens past the last expert's (zeros), each expert's rows within twice the error of
    torch's 16-bit product against fp32; a CUDA graph of the call replayed with new offsets computes the new rows; x [E, T, K] with offsets and offsets not int32 [E] are refused in one line."""
    from mlir_tile.kernels import grouped_mm

    rng, failures = random.Random(64), []

    def case(experts, sizes, n, depth, dtype):
        offsets = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        tokens = int(sum(sizes)) + rng.choice([0, 0, 5])  # (rows past the last expert's: not computed)
        x = torch.randn(tokens, depth, device="cuda", dtype=dtype)
        w = torch.randn(experts, n, depth, device="cuda", dtype=dtype) / depth ** 0.5
        return x, w, offsets

    def rows_of(offsets, e):
        ends = [0] + offsets.tolist()
        return slice(ends[e], ends[e + 1])

    for trial in range(300):
        experts = rng.choice([1, 2, 3, 8, 16, 33, rng.randint(1, 64), 400 if trial % 50 == 0 else 5])
        sizes = [rng.choice([0, 1, 7, 127, 128, 129, rng.randint(0, 300)]) for _ in range(experts)]
        n, depth, dtype = 8 * rng.randint(1, 40), 8 * rng.randint(1, 40), (torch.bfloat16, torch.float16)[trial % 2]
        x, w, offsets = case(experts, sizes, n, depth, dtype)
        out = grouped_mm(x, w, offsets=offsets)
        found = _expert_errors(lambda e: out[rows_of(offsets, e)], lambda e: x[rows_of(offsets, e)], w)
        if out[sum(sizes):].any():
            found.append("the rows past the last expert's are not zeros")
        failures += [(trial, experts, n, depth, item) for item in found]
    assert not failures, failures[:5]
    x, w, offsets = case(8, [300, 0, 1, 129, 128, 64, 7, 500], 256, 512, torch.bfloat16)
    grouped_mm(x, w, offsets=offsets)  # (its plan made before the capture)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_mm(x, w, offsets=offsets)
    offsets.copy_(torch.tensor([1, 2, 260, 300, 700, 800, 1000, 1129], device="cuda", dtype=torch.int32))
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert not _expert_errors(lambda e: out[rows_of(offsets, e)], lambda e: x[rows_of(offsets, e)], w)
    with pytest.raises(ValueError, match="x \\[E, T, K\\] \\(masked\\) or \\[tokens, K\\]"):
        grouped_mm(x.view(1, *x.shape), w, offsets=offsets)
    with pytest.raises(ValueError, match="offsets int32"):
        grouped_mm(x, w, offsets=offsets.long())


@_hopper_only
def test_contiguous_grouped_mm_applies_an_epilogue_per_row_or_expert():
    """`grouped_mm(x, w, offsets=..., epilogue=..., operands=...)` on 100 random cases each, both dtypes: the
    router's weights (`row_scale`, a token's weight on its expert output) and an expert's own bias (`expert_bias`,
    [E, N], a "group_column" operand), before rounding: each expert's rows within twice the error of torch's
    16-bit product and epilogue against fp32; rows past the last expert zeros; an epilogue on the masked form and
    operands of other shapes refused in one line."""
    from mlir_tile.kernels import grouped_mm
    from mlir_tile.kernels.epilogues import expert_bias, row_scale

    rng, failures = random.Random(67), []
    for trial in range(200):
        experts = rng.choice([1, 3, 8, rng.randint(1, 40)])
        sizes = [rng.choice([0, 1, 7, 129, rng.randint(0, 300)]) for _ in range(experts)]
        n, depth, dtype = 8 * rng.randint(1, 40), 8 * rng.randint(1, 40), (torch.bfloat16, torch.float16)[trial % 2]
        ends = torch.tensor(sizes).cumsum(0).tolist()
        tokens = ends[-1] + rng.choice([0, 5])
        x = torch.randn(tokens, depth, device="cuda", dtype=dtype)
        w = torch.randn(experts, n, depth, device="cuda", dtype=dtype) / depth ** 0.5
        epilogue, operand = ((row_scale, torch.rand(tokens, device="cuda", dtype=dtype)) if trial % 4 < 2 else
                             (expert_bias, torch.randn(experts, n, device="cuda", dtype=dtype)))
        out = grouped_mm(x, w, offsets=torch.tensor(ends, device="cuda", dtype=torch.int32), epilogue=epilogue,
                         operands=(operand,))
        for e, (size, end) in enumerate(zip(sizes, ends)):
            if not size:
                continue
            rows = slice(end - size, end)
            product, theirs = x[rows].float() @ w[e].float().T, x[rows] @ w[e].T
            if epilogue is row_scale:
                exact, theirs = product * operand[rows, None].float(), theirs * operand[rows, None]
            else:
                exact, theirs = product + operand[e].float(), theirs + operand[e]
            bound = 2 * float((theirs.float() - exact).abs().max()) + 4 * torch.finfo(dtype).eps * float(
                exact.abs().max())
            if not float((out[rows].float() - exact).abs().max()) <= bound:
                failures.append((trial, epilogue.name, e, size, n, depth))
        if out[ends[-1]:].any():
            failures.append((trial, "rows past the last expert"))
    assert not failures, failures[:10]
    offsets = torch.tensor(ends, device="cuda", dtype=torch.int32)
    with pytest.raises(ValueError, match="an epilogue is the contiguous form's"):
        grouped_mm(x.view(1, *x.shape), w[:1], torch.zeros(1, dtype=torch.int32, device="cuda"), epilogue=row_scale,
                   operands=(x[:, 0],))
    with pytest.raises(ValueError, match="operand 'weights' is a contiguous"):
        grouped_mm(x, w, offsets=offsets, epilogue=row_scale, operands=(x[:-1, 0].contiguous(),))
    with pytest.raises(ValueError, match="operand 'bias' is a contiguous"):
        grouped_mm(x, w, offsets=offsets, epilogue=expert_bias, operands=(w.new_zeros(w.shape[0] + 1, w.shape[1]),))


@_hopper_only
def test_contiguous_grouped_mm_differentiates_by_grouped_gemms():
    """The contiguous form's gradients (`grouped_mm_input_gradient`: dx = each expert's grad rows times its w;
    `grouped_mm_weight_gradient`: dw_e = its grad rows^T times its x rows, the reduction over its tokens) on 300
    random cases, both dtypes, experts with 0, 1, odd and a tile's rows and one more, tokens past the last expert's:
    dx and dw within twice the error of torch's 16-bit products against fp32 (dx zeros past the last expert's
    rows, dw zeros for an expert without tokens)."""
    from mlir_tile.kernels import grouped_mm

    rng, failures = random.Random(66), []
    for trial in range(300):
        experts = rng.choice([1, 2, 5, 16, rng.randint(1, 40)])
        sizes = [rng.choice([0, 1, 7, 63, 64, 65, 129, rng.randint(0, 300)]) for _ in range(experts)]
        n, depth, dtype = 8 * rng.randint(1, 40), 8 * rng.randint(1, 40), (torch.bfloat16, torch.float16)[trial % 2]
        ends = torch.tensor(sizes).cumsum(0).tolist()
        tokens = ends[-1] + rng.choice([0, 3])
        x = torch.randn(tokens, depth, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(experts, n, depth, device="cuda", dtype=dtype) / depth ** 0.5).requires_grad_()
        grad = torch.randn(tokens, n, device="cuda", dtype=dtype)
        grouped_mm(x, w, offsets=torch.tensor(ends, device="cuda", dtype=torch.int32)).backward(grad)
        for e, (size, end) in enumerate(zip(sizes, ends)):
            rows = slice(end - size, end)
            if not size:  # (an expert without tokens: its dw zeros)
                failures += [(trial, "dw", e, 0)] if w.grad[e].any() else []
                continue
            checks = [("dx", x.grad[rows], grad[rows], w[e].detach()), ("dw", w.grad[e], grad[rows].T, x[rows].detach())]
            for name, got, left, right in checks:
                exact = left.float() @ right.float()
                bound = 2 * float(((left @ right).float() - exact).abs().max()) + 4 * torch.finfo(dtype).eps * float(
                    exact.abs().max())
                if not float((got.float() - exact).abs().max()) <= bound:
                    failures.append((trial, name, e, size, n, depth, float((got.float() - exact).abs().max()), bound))
        if x.grad[ends[-1]:].any():
            failures.append((trial, "dx past the last expert's rows is not zeros"))
    assert not failures, failures[:10]


@_hopper_only
@pytest.mark.parametrize("layout", ["masked", "contiguous"])
def test_fp8_grouped_mm_is_the_exact_blockwise_product(layout):
    """`grouped_mm` on float8_e4m3fn with DeepGEMM's blockwise scales (scale_x [..., K / 128], scale_w [E, N / 128,
    K / 128], powers of two of every magnitude, 2^-33 to 2^33, differing by block), masked and contiguous, 300
    random cases each (experts with 0, 1 and odd rows among them): small integers (exact products and sums), so each expert's rows are the bf16 of the
    exact blockwise product, bit for bit; 16-bit scales or none are refused in one line."""
    from mlir_tile.kernels import grouped_mm

    rng, failures = random.Random(65), []
    for trial in range(300):
        experts, n, depth = rng.randint(1, 12), 16 * rng.randint(1, 24), 16 * rng.randint(1, 24)
        rows = 128 * rng.randint(1, 2) if layout == "masked" else None
        sizes = [rng.choice([0, 1, 7, 129, rng.randint(0, rows or 300)]) for _ in range(experts)]
        k_blocks, n_blocks = -(-depth // 128), -(-n // 128)
        x_shape = (experts, rows, depth) if rows else (sum(sizes), depth)
        x = torch.randint(-3, 4, x_shape, device="cuda").float()
        w = torch.randint(-3, 4, (experts, n, depth), device="cuda").float()
        # (powers of two of every magnitude, a case's spread within 2^6 a factor: exact sums of fp32)
        scale_x, scale_w = (2.0 ** (torch.randint(-3, 4, shape, device="cuda") + rng.randint(-30, 30)).float()
                            for shape in ((*x_shape[:-1], k_blocks), (experts, n_blocks, k_blocks)))
        if rows:
            sizes = [min(size, rows) for size in sizes]
            got = grouped_mm(x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), torch.tensor(
                sizes, device="cuda", dtype=torch.int32), scale_x=scale_x, scale_w=scale_w)
            row_sets = [(got[e, :size], x[e, :size], scale_x[e, :size]) for e, size in enumerate(sizes)]
        else:
            ends = torch.tensor(sizes).cumsum(0).tolist()
            got = grouped_mm(x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), offsets=torch.tensor(
                ends, device="cuda", dtype=torch.int32), scale_x=scale_x, scale_w=scale_w)
            row_sets = [(got[end - size:end], x[end - size:end], scale_x[end - size:end]) for size, end in zip(sizes, ends)]
        for e, (ours, xe, sx) in enumerate(row_sets):
            exact = sum((xe[:, 128 * t:128 * (t + 1)] @ w[e, :, 128 * t:128 * (t + 1)].T) * sx[:, t, None]
                        * scale_w[e, :, t].repeat_interleave(128)[None, :n] for t in range(k_blocks))
            if not torch.equal(ours, exact.to(torch.bfloat16)):
                failures.append((trial, e, len(xe), n, depth, float((ours.float() - exact).abs().max())))
    assert not failures, failures[:10]
    with pytest.raises(ValueError, match="blockwise float32 scales"):
        grouped_mm(x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), torch.zeros(experts, dtype=torch.int32,
                   device="cuda") if rows else None, offsets=None if rows else torch.zeros(
                       experts, dtype=torch.int32, device="cuda"), scale_x=scale_x.half(), scale_w=scale_w)


@_hopper_only
def test_swiglu_mm_is_silu_of_the_gate_times_the_up_projection():
    """Fused SwiGLU (`swiglu_mm` on `swiglu_weights`) on random shapes, both dtypes, leading dimensions: within
    twice the error of torch's 16-bit silu(F.linear) * F.linear against fp32 (plus the element's rounding of the
    result's scale); weights not interleaved in 16 rows are refused in one line."""
    import torch.nn.functional as F

    from mlir_tile.kernels import swiglu_mm, swiglu_weights

    rng, failures = random.Random(62), []
    for trial in range(24):
        m, features, depth = rng.choice([1, 7, 128, 1000, rng.randint(1, 3000)]), 8 * rng.randint(1, 600), 8 * rng.randint(1, 512)
        dtype = (torch.bfloat16, torch.float16)[trial % 2]
        x = torch.randn(2, m, depth, device="cuda", dtype=dtype)
        gate, up = (torch.randn(features, depth, device="cuda", dtype=dtype) / depth ** 0.5 for _ in range(2))
        got = swiglu_mm(x, swiglu_weights(gate, up))
        exact = F.silu(x.float() @ gate.float().T) * (x.float() @ up.float().T)
        theirs = (F.silu(F.linear(x, gate)) * F.linear(x, up)).float()
        bound = 2 * float((theirs - exact).abs().max()) + 4 * torch.finfo(dtype).eps * float(exact.abs().max())
        if got.shape != exact.shape or got.dtype != dtype or not float((got.float() - exact).abs().max()) <= bound:
            failures.append(((m, features, depth, dtype), float((got.float() - exact).abs().max()), bound))
    assert not failures, failures[:5]
    weights = swiglu_weights(*(torch.randn(16, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2)))
    with pytest.raises(ValueError, match="a multiple of 16"):
        swiglu_mm(torch.randn(4, 64, device="cuda", dtype=torch.bfloat16), weights[:24])


@_hopper_only
def test_swiglu_mm_trains():
    """`swiglu_mm`'s backward (the gate and up products recomputed, dg and du in fp32, dx and dw by `matmul`) on
    24 random shapes, both dtypes: dx, and dw_gate and dw_up taken apart from the interleaved weights' gradient,
    within twice the error of torch's 16-bit autograd of silu(F.linear) * F.linear against fp32's (plus 4 eps of
    the scale)."""
    import torch.nn.functional as F

    from mlir_tile.kernels import swiglu_mm, swiglu_weights

    rng, failures = random.Random(68), []
    for trial in range(24):
        m, features, depth = rng.choice([1, 7, 128, rng.randint(1, 1500)]), 8 * rng.randint(1, 200), 8 * rng.randint(1, 200)
        dtype = (torch.bfloat16, torch.float16)[trial % 2]
        x = torch.randn(m, depth, device="cuda", dtype=dtype)
        gate, up = (torch.randn(features, depth, device="cuda", dtype=dtype) / depth ** 0.5 for _ in range(2))
        grad = torch.randn(m, features, device="cuda", dtype=dtype)
        results = []
        for kind in (None, torch.float32, dtype):  # ours, fp32's, torch's 16-bit
            inputs = [t.clone().to(kind or dtype).requires_grad_() for t in (x, gate, up)]
            if kind is None:
                weights = swiglu_weights(inputs[1], inputs[2])
                swiglu_mm(inputs[0], weights).backward(grad)
            else:
                (F.silu(F.linear(inputs[0], inputs[1])) * F.linear(inputs[0], inputs[2])).backward(grad.to(kind))
            results.append([t.grad.float() for t in inputs])
        for name, ours, exact, theirs in zip(("dx", "dw_gate", "dw_up"), *results):
            bound = 2 * float((theirs - exact).abs().max()) + 4 * torch.finfo(dtype).eps * float(exact.abs().max())
            if not float((ours - exact).abs().max()) <= bound:
                failures.append((trial, name, m, features, depth, float((ours - exact).abs().max()), bound))
    assert not failures, failures[:5]


@_hopper_only
def test_what_scaled_mm_does_not_take_is_a_value_error_at_the_call():
    from mlir_tile.kernels import scaled_mm

    a = torch.ones(32, 64, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    for call, message in ((lambda: scaled_mm(a.float(), a, one, one), "float8_e4m3fn"),
                          (lambda: scaled_mm(a, a[:, :48].contiguous(), one, one), "K extents differ"),
                          (lambda: scaled_mm(a, torch.ones(64, 24, device="cuda").to(torch.float8_e4m3fn), one, one,
                                             b_layout="kn"), "N a multiple of 16"),
                          (lambda: scaled_mm(a, a, torch.ones(3, device="cuda"), one), "of one element each"),
                          (lambda: scaled_mm(a, a, torch.ones(32, 2, device="cuda"), torch.ones(1, 1, device="cuda")),
                           r"blockwise \[M, K / 128\] = \[32, 1\]"),
                          (lambda: scaled_mm(a, a.T.contiguous(), torch.ones(32, 1, device="cuda"),
                                             torch.ones(1, 1, device="cuda"), b_layout="kn"), "blockwise scales take B"),
                          (lambda: scaled_mm(a, a, torch.ones(32, 1, device="cuda"), torch.ones(1, 1, device="cuda"),
                                             accumulation="fast"), "accumulation 'precise'"),
                          (lambda: scaled_mm(a, a, one, one, accumulation="exact"), "accumulation 'fast', 'precise'"),
                          (lambda: scaled_mm(a, a, one, one, b_layout="mn"), "b_major 'nk'")):
        with pytest.raises(ValueError, match=message):
            call()


@_hopper_only
def test_a_given_k_by_m_multiplies_as_its_transpose():
    """`Matmul(a_major="km")`: A [K, M] read as it lies on Hopper's path (its kernels "_akm", split-K where the
    tiles leave SMs idle), or transposed into a copy where TMA cannot take it (M off a multiple of 8, a view off
    16 bytes); against fp32 on random shapes, each dtype and B layout."""
    from mlir_tile.kernels import ops

    launcher, rng, failures = ops.kernels_on(torch.device("cuda")).matmul, random.Random(31), []
    for trial in range(64):
        m, n = 8 * rng.randint(1, 64), 8 * rng.randint(1, 64)
        k = rng.choice([8 * rng.randint(1, 128), 4096, 8192])
        m += 3 if trial % 8 == 7 else 0  # (rows of A [K, M] off 16 bytes: the copy)
        dtype, layout = (torch.float16, torch.bfloat16)[trial % 2], ("kn", "nk")[trial // 2 % 2]
        a = torch.rand(k, m, device="cuda", dtype=dtype) * 2 - 1
        b = torch.rand(*((k, n) if layout == "kn" else (n, k)), device="cuda", dtype=dtype) * 2 - 1
        if trial % 8 == 3:
            a = _offset(a, 1)  # (a view off 16 bytes: the copy)
        got = launcher(a, b, b_major=layout, a_major="km")
        transposed = m % 8 == 0 and trial % 8 != 3
        if (worst := _wrong(got, a.T, b, layout, None, None, None)) is not None or (
                transposed != ("_akm" in str(launcher.last_config))):
            failures.append((m, n, k, layout, dtype, str(launcher.last_config), launcher.last_splits, worst))
    assert not failures, failures[:10]


@_hopper_only
def test_repeated_calls_reuse_their_launch_plan():
    """bias + silu (a shipped chain on the measured tile, so the chain's own kernel runs), repeated: each call
    finds the plan the first made (the plans are keyed by the epilogue, which had been a new object each
    call: a plan more each call, kept)."""
    from mlir_tile.kernels import matmul, ops

    x, w = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16), torch.randn(4096, 512, device="cuda",
                                                                                       dtype=torch.bfloat16)
    bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    launcher = ops.kernels_on(x.device).matmul
    matmul(x, w, b_layout="nk", bias=bias, activation="silu")
    before = len(launcher.plans)
    for _ in range(5):
        matmul(x, w, b_layout="nk", bias=bias, activation="silu")
    assert len(launcher.plans) == before and "silu" in str(launcher.last_config) + str(list(launcher.plans)[-1])


@_hopper_only
def test_the_moe_operators_registrations_pass_torchs_opcheck():
    """torch.library.opcheck on the MoE operators (`moe_ops`): grouped_mm's two layouts, the contiguous one's
    gradients' operators and swiglu_mm: schema, fake implementation against the real outputs, autograd
    registration (the contiguous form's backward exercised by test_contiguous_grouped_mm_differentiates_by_grouped_gemms)."""
    from mlir_tile.kernels import moe_ops, swiglu_weights

    x, w = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16), torch.randn(4, 48, 64, device="cuda",
                                                                              dtype=torch.bfloat16)
    offsets = torch.tensor([100, 100, 250, 300], device="cuda", dtype=torch.int32)
    grad = torch.randn(300, 48, device="cuda", dtype=torch.bfloat16)
    masked = torch.randn(4, 128, 64, device="cuda", dtype=torch.bfloat16)
    counts = torch.tensor([0, 1, 77, 128], device="cuda", dtype=torch.int32)
    gate, up = (torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    assert moe_ops.grouped_mm is not None  # (the operators registered)
    for operator, arguments in (
            (torch.ops.mlir_tile.grouped_mm.default, (masked, w, counts, None, None)),
            (torch.ops.mlir_tile.grouped_mm_contiguous.default, (x, w, offsets, None, None)),
            (torch.ops.mlir_tile.grouped_mm_input_gradient.default, (grad, w, offsets)),
            (torch.ops.mlir_tile.grouped_mm_weight_gradient.default, (grad, x, offsets)),
            (torch.ops.mlir_tile.swiglu_mm.default, (x, swiglu_weights(gate, up)))):
        torch.library.opcheck(operator, arguments, test_utils=("test_schema", "test_faketensor"))


@_hopper_only
def test_the_moe_operators_take_views_at_any_offset():
    """swiglu_mm, grouped_mm (masked, contiguous, with an epilogue operand, fp8 with blockwise scales) and the
    contiguous form's gradients on 60 random cases whose every tensor (x, w, grad, counts or offsets, scales,
    operands) is a view 0-15 elements into a larger buffer (x[1:], narrow and split give these): no fault, and each
    result bit for bit the same call's on aligned copies (what every other test here checks against torch; the
    masked form's counted rows)."""
    from mlir_tile.kernels import grouped_mm, swiglu_mm
    from mlir_tile.kernels.epilogues import expert_bias

    rng, failures = random.Random(69), []

    def views(*tensors):
        return [_offset(t, rng.randint(0, 15)) for t in tensors]

    for trial in range(60):
        experts, n, depth, kind = rng.randint(1, 9), 16 * rng.randint(1, 16), 16 * rng.randint(1, 16), trial % 6
        sizes = [rng.choice([0, 1, 7, 129, rng.randint(0, 200)]) for _ in range(experts)]
        offsets = torch.tensor(sizes).cumsum(0).to(device="cuda", dtype=torch.int32)
        x = torch.randn(int(offsets[-1]), depth, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(experts, n, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5
        if kind == 0:
            call, inputs = swiglu_mm, (x, w[0])
        elif kind == 1:
            counts = torch.tensor([min(size, 128) for size in sizes], device="cuda", dtype=torch.int32)
            call, inputs = grouped_mm, (torch.randn(experts, 128, depth, device="cuda", dtype=torch.bfloat16), w, counts)
        elif kind == 2:
            call, inputs = (lambda x, w, offsets, bias: grouped_mm(x, w, offsets=offsets, epilogue=expert_bias,
                                                                      operands=(bias,))), (x, w, offsets, w[:, :, 0].clone())
        elif kind == 3:
            scale_x, scale_w = (2.0 ** torch.randint(-3, 4, shape, device="cuda").float() for shape in (
                (len(x), -(-depth // 128)), (experts, -(-n // 128), -(-depth // 128))))
            call, inputs = (lambda x, w, offsets, sx, sw: grouped_mm(x, w, offsets=offsets, scale_x=sx, scale_w=sw)), (
                x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), offsets, scale_x, scale_w)
        else:
            grad = torch.randn(len(x), n, device="cuda", dtype=torch.bfloat16)
            call, inputs = ((torch.ops.mlir_tile.grouped_mm_input_gradient, (grad, w, offsets)) if kind == 4 else
                            (torch.ops.mlir_tile.grouped_mm_weight_gradient, (grad, x, offsets)))
        aligned, moved = call(*inputs), call(*views(*inputs))
        if kind == 1:  # (masked: each group's rows past its count unspecified)
            aligned, moved = ([x[e, :count] for e, count in enumerate(counts.tolist())] for x in (aligned, moved))
            aligned, moved = torch.cat(aligned), torch.cat(moved)
        if not torch.equal(aligned, moved):
            failures.append((trial, kind, experts, n, depth, float((aligned.float() - moved.float()).abs().max())))
    torch.cuda.synchronize()
    assert not failures, failures[:10]
