"""Attention's backward on the GPU (Hopper's path, `flash.backward`), as a training user reaches it: gradients
through `mlir_tile.kernels.attention` by torch.autograd on random shapes (odd lengths, one row, each head dim,
both masks, both dtypes, grouped-query heads), against fp32 autograd of softmax attention written out here, within the error torch's
own 16-bit SDPA backward makes on the same inputs; the log-sum-exp's gradient too; under torch.compile. Skipped
without torch or an sm_90 GPU (the reason shown)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
import mlir_tile.kernels.ops  # noqa: E402,F401  (registers torch.ops.mlir_tile.*)
F = torch.nn.functional
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="attention's backward runs on Hopper's path (sm_90) only")]

CASES = 300  # 150 a dtype (issue 60: >= 150 random cases a dtype for the backward)


def _fp32_attention(q, k, v, causal: bool):
    """(O, log-sum-exp) in fp32 by torch's elementwise ops and products: the oracle's forward (k and v with fewer
    heads repeated for their groups of q's)."""
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))
    scores = q.float() @ k.float().transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        seq = q.shape[-2]
        scores = scores.masked_fill(torch.ones(seq, seq, device=q.device).triu(1).bool(), float("-inf"))
    return scores.softmax(-1) @ v.float(), scores.logsumexp(-1)


def _gradients(forward, q, k, v, grad, grad_lse=None):
    """(dq, dk, dv) of forward(q, k, v) -> (O, lse) for upstream `grad` (and `grad_lse`), by autograd."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    o, lse = forward(q, k, v)
    outputs, upstream = [o], [grad.to(o.dtype)]
    if grad_lse is not None:
        outputs.append(lse)
        upstream.append(grad_lse)
    return torch.autograd.grad(outputs, (q, k, v), upstream)


def _case(rng: random.Random, trial: int):
    """(batch, heads, kv_heads, seq, d, causal, dtype): one case in three grouped (kv_heads a divisor of heads)."""
    batch, heads, d = rng.randint(1, 2), rng.choice([1, 2, 3, 4, 6, 8]), rng.choice([64, 128, 256])
    kv_heads = rng.choice([x for x in range(1, heads + 1) if heads % x == 0]) if trial % 3 == 2 else heads
    seq = rng.choice([1, 17, 64, 65, 127, 128, 129, 200, 255, 513, rng.randint(1, 700), rng.randint(700, 2100)])
    return batch, heads, kv_heads, seq, d, rng.random() < 0.5, (torch.float16, torch.bfloat16)[trial % 2]


def test_attention_gradients_match_fp32_autograd_within_torchs_own_error():
    """Per case: our dq, dk, dv's largest error from fp32 autograd at most twice torch's 16-bit SDPA backward's
    error on the same inputs, plus a floor of the element's rounding of the gradients' scale."""
    from mlir_tile.kernels import attention

    rng, failures = random.Random(21), []
    for trial in range(CASES):
        batch, heads, kv_heads, seq, d, causal, dtype = _case(rng, trial)
        q, grad = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dtype) for _ in range(2))
        k, v = (torch.randn(batch, kv_heads, seq, d, device="cuda", dtype=dtype) for _ in range(2))
        expected = _gradients(lambda *x: _fp32_attention(*x, causal), q.float(), k.float(), v.float(), grad.float())
        ours = _gradients(lambda *x: attention(*x, causal=causal), q, k, v, grad)
        torchs = _gradients(lambda *x: (F.scaled_dot_product_attention(*x, is_causal=causal,
                                                                      enable_gqa=kv_heads != heads), None), q, k, v, grad)
        for name, got, theirs, exact in zip("qkv", ours, torchs, expected):
            error = float((got.float() - exact).abs().max())
            # (the floor at least 1e-2's: at one position dq and dk are 0 in truth, ours rounding's)
            bound = 2 * float((theirs.float() - exact).abs().max()) + 4 * torch.finfo(dtype).eps * max(float(
                exact.abs().max()), 1e-2)
            if not error <= bound:
                failures.append(((batch, heads, kv_heads, seq, d, causal, dtype), f"d{name}", error, bound))
    assert not failures, failures[:10]


def test_the_log_sum_exps_gradient_enters_the_backward():
    """A loss on O and on the log-sum-exp: the gradients against fp32 autograd of both outputs."""
    from mlir_tile.kernels import attention

    for causal in (False, True):
        q, k, v, grad = (torch.randn(2, 2, 300, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        grad_lse = torch.randn(2, 2, 300, device="cuda")
        expected = _gradients(lambda *x: _fp32_attention(*x, causal), q.float(), k.float(), v.float(), grad.float(),
                              grad_lse)
        ours = _gradients(lambda *x: attention(*x, causal=causal), q, k, v, grad, grad_lse)
        for got, exact in zip(ours, expected):
            assert float((got.float() - exact).abs().max()) <= 0.05 * float(exact.abs().max()) + 0.01


def test_a_compiled_training_step_takes_our_backward():
    """torch.compile(fullgraph=True) of a loss through attention, on contiguous q, k, v and on transposed views of
    grouped projections: its gradients are the eager ones (the operator's registered formula, not a graph break),
    up to the order in which the key blocks' dQ sums were added."""
    from mlir_tile.kernels import attention

    q, k, v = (torch.randn(1, 4, 257, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    # (and as a model gives them: [batch, heads, seq, d] views of [batch, seq, heads, d] projections, whose
    # gradients the fake must give with the kernel's strides, not the views')
    projections = [torch.randn(2, 129, heads, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for heads in (4, 2, 2)]

    def loss(q, k, v):
        o, _ = attention(q, k, v, causal=True)
        return (o.float() ** 2).sum()

    def of_projections(q, k, v):
        return loss(*(x.transpose(1, 2) for x in (q, k, v)))
    for function, inputs in ((loss, (q, k, v)), (of_projections, projections)):
        eager = torch.autograd.grad(function(*inputs), inputs)
        compiled = torch.autograd.grad(torch.compile(function, fullgraph=True)(*inputs), inputs)
        for a, b in zip(eager, compiled):
            assert float((a - b).abs().max()) <= 1e-2 * float(a.abs().max())


def test_grouped_query_attention_reads_each_kv_head_for_its_group():
    """Forward with k and v of fewer heads (each dividing q's): O and the log-sum-exp against fp32 attention on
    the heads repeated, within the forward's bounds (test_kernels_ops_gpu)."""
    from mlir_tile.kernels import attention

    rng, failures = random.Random(8), []
    for trial in range(40):
        batch, heads, d, causal = rng.randint(1, 2), rng.choice([2, 4, 8]), rng.choice([64, 128]), trial % 2 == 1
        kv_heads, seq = rng.choice([x for x in (1, 2, 4) if heads % x == 0]), rng.choice([1, 65, 200, 1100])
        q = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o, lse = attention(q, k, v, causal=causal)
        expected, expected_lse = _fp32_attention(q, k, v, causal)
        o_error, lse_error = float((o.float() - expected).abs().max()), float((lse - expected_lse).abs().max())
        if o_error > 2 ** -6 + 2 ** -7 or lse_error > 1e-3:
            failures.append(((batch, heads, kv_heads, seq, d, causal), o_error, lse_error))
    assert not failures, failures[:10]


def test_empty_batches_and_unsupported_head_dims_are_said_at_the_call():
    """Batch 0 gives empty gradients (as torch's); a head dim the backward does not take (d 96, which the forward
    refuses too) says so in one line at the backward's launcher."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.ops import kernels_on

    q, k, v = (torch.randn(0, 2, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o, _ = attention(q, k, v)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape
    q, k, v, o, grad = (torch.randn(1, 1, 64, 96, device="cuda", dtype=torch.bfloat16) for _ in range(5))
    with pytest.raises(ValueError, match="head dim 64 or 128 or 256, got 96"):
        kernels_on(torch.device("cuda")).attention_backward(grad, q, k, v, o, torch.zeros(1, 1, 64, device="cuda"))


@pytest.mark.parametrize("packed", [False, True])
def test_the_row_passes_give_torchs_statistics_and_dq_at_each_rows_place(packed):
    """`backward_rows` on random rows (d 64, 128 and 256, both dtypes; packed: [tokens, heads, d] with each token's place
    a random permutation of the padded rows): D equal to torch's rowsum of dO O in fp32 (to its sum's order), LSE
    log2(e) and the rounded dQ bitwise, every other place of the statistics left as it was."""
    from mlir_tile.kernels.common import LOG2E
    from mlir_tile.kernels.ops import kernels_on
    from mlir_tile.runtime import torch_stream

    backward = kernels_on(torch.device("cuda")).attention_backward
    for d, dtype, tokens, heads in ((64, torch.bfloat16, 1000, 3), (128, torch.float16, 77, 5),
                                    (256, torch.bfloat16, 130, 2)):
        padded = -(-tokens // 64) * 64 + 64
        shape = (tokens, heads, d) if packed else (heads, tokens, d)
        o, grad = (torch.randn(*shape, device="cuda", dtype=dtype) for _ in range(2))
        lse = torch.randn(heads, tokens, device="cuda")
        places = torch.randperm(padded, device="cuda")[:tokens].int() if packed else torch.arange(tokens, device="cuda")
        statistics = torch.full((2, heads, padded), 7.0, device="cuda")
        dq_sums = torch.randn(heads, padded, d, device="cuda")
        dq = torch.empty(*shape, device="cuda", dtype=dtype)
        passes = backward._rows(d, {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype], packed, tokens, heads,
                                padded)
        extra = [places.data_ptr()] if packed else []
        passes["prepare"](torch_stream(o), o.data_ptr(), grad.data_ptr(), lse.data_ptr(), statistics[0].data_ptr(),
                          statistics[1].data_ptr(), *extra)
        passes["finish"](torch_stream(o), dq_sums.data_ptr(), dq.data_ptr(), *extra)
        by_head = (lambda x: x.transpose(0, 1)) if packed else (lambda x: x)  # (to [heads, tokens, ...])
        delta, rows = by_head((grad.float() * o.float()).sum(-1)), places.long()
        assert torch.allclose(statistics[1][:, rows], delta, rtol=1e-5, atol=1e-5)
        assert torch.equal(statistics[0][:, rows], lse * LOG2E)
        others = torch.ones(padded, dtype=torch.bool, device="cuda")
        others[rows] = False
        assert bool((statistics[:, :, others] == 7.0).all())
        expected = (dq_sums[:, rows] * (1 / d ** 0.5)).to(dtype)
        assert torch.equal(by_head(dq), expected)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_the_deterministic_mode_gives_the_same_gradients_bitwise_each_run(d):
    """Under `torch.use_deterministic_algorithms(True)` the backward adds dQ's sums in the key blocks' order (their
    flags): three runs through autograd on 2 x 8 heads on 2 K/V heads x 1,000 positions (8 key blocks), causal
    and not, give dQ, dK and dV bitwise equal, and within bf16's rounding of the unordered mode's."""
    from mlir_tile.kernels import attention

    torch.manual_seed(d)
    q, grad = (torch.randn(2, 8, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 2, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def gradients(causal):
        return _gradients(lambda *inputs: attention(*inputs, causal=causal), q, k, v, grad)
    for causal in (False, True):
        unordered, before = gradients(causal), torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            runs = [gradients(causal) for _ in range(3)]
        finally:
            torch.use_deterministic_algorithms(before)
        assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0])), causal
        for a, b in zip(runs[0], unordered):
            assert float((a.float() - b.float()).abs().max()) <= 1e-2 * float(b.float().abs().max()), causal
