"""Attention's extension points on the GPU (Hopper), against torch's fp32 attention with the variant written
out as an explicit mask and score function: examples/sliding_window.py on the grids the launcher picks, and
`testing.attention_variants`' cases on the others (ping-pong, the launched grid, two consumers), a band of
keys read from an integer operand, a score step reading a scalar, and `kernels.flash.masks`' two-sided window,
prefix-LM, Gemma 2's local layer (a window of 1024 keys with soft-capping), ALiBi and gpt-oss's sinks (alone and
with its window of 128 keys), their values a head's; their gradients (masks, softcap, ALiBi, the sinks'); 200
random cases of the ready-made parts combined. The kernels come from `make gpu-inputs`'
cache (a GPU host has no compiler). Skipped without torch or an sm_90 GPU (the reason shown)."""
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the attention operator needs torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="attention variants run on Hopper's path (TMA, wgmma): sm_90 only")]


@pytest.fixture(autouse=True)
def kernel_cache(monkeypatch):
    from test_runtime_gpu import epilogue_cache

    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", epilogue_cache())


def _operands(case, batch: int, heads: int) -> tuple:
    """The case's operands, "heads" and "batch_heads" as random tensors of one value a head (fp32, bf16)."""
    made = {"heads": lambda: torch.rand(heads, device="cuda") * 0.3,
            "batch_heads": lambda: (torch.randn(batch, heads, device="cuda") * 2).bfloat16()}
    return tuple(made[x]() if x in made else x for x in case.operands)


def _expected(q, k, v, case, operands=None):
    """torch's fp32 attention with the case's variant written out (its operands `operands`, else the case's):
    (o, lse)."""
    batch, heads, seq, d = q.shape
    operands = case.operands if operands is None else operands
    query, key = _positions(seq)
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(d)
    if case.variant in ("softcap", "gemma2_local"):
        scores = case.operands[0] * torch.tanh(scores / case.operands[0])
    if case.variant == "alibi":
        scores = scores - _per_head(operands[0], batch, heads) * (key - query).abs()
    sink = {"sinks": lambda: _per_head(operands[0], batch, heads),
            "gpt_oss_local": lambda: _per_head(operands[0], batch, heads),
            "constant_sink": lambda: q.new_ones(batch, heads, 1, 1, dtype=torch.float32)}.get(case.variant)
    return _attend(scores, _hidden(case, seq), v.float(), sink and sink())


def _positions(seq: int) -> tuple:
    """(query [seq, 1], key [1, seq]): the rows' and the columns' positions."""
    return torch.arange(seq, device="cuda")[:, None], torch.arange(seq, device="cuda")[None, :]


def _per_head(values, batch: int, heads: int):
    """A head operand ([heads] or [batch, heads]) as fp32 [batch, heads, 1, 1]."""
    return values.float().expand(batch, heads)[:, :, None, None]


def _attend(scores, hidden, v, sink=None):
    """(o, lse): the softmax of `scores` over the keys not `hidden`, beside a sink's column where given (logits
    [batch, heads, 1, 1], no value: dropped after), times v."""
    seq = scores.shape[-1]
    scores = scores.masked_fill(hidden, float("-inf"))
    if sink is not None:
        scores = torch.cat([scores, sink.expand(*scores.shape[:-1], 1)], -1)
    return scores.softmax(-1)[..., :seq] @ v, scores.logsumexp(-1)


def _hidden(case, seq: int):
    """[seq, seq] bool: the keys (columns) the case's variant hides from each query (rows), written out."""
    query, key = _positions(seq)
    hidden = key > query if case.causal else torch.zeros_like(key > query)
    if case.variant == "band":
        hidden = hidden | ((key - query).abs() > case.operands[0])
    if case.variant in ("sliding_window", "gemma2_local"):
        hidden = hidden | (key > query) | (key <= query - 1024)
    if case.variant == "gpt_oss_local":
        hidden = hidden | (key > query) | (key < query - 127)
    if case.variant == "window_100_50":
        hidden = hidden | (key > query + 50) | (key < query - 100)
    if case.variant == "prefix_lm_300":
        hidden = hidden | ((key > query) & (key >= 300))
    if case.variant == "first_100":
        hidden = hidden | (key > query) | (key >= 100)
    return hidden


def test_the_sliding_window_example_matches_torch_on_the_launchers_grids():
    from mlir_tile.testing.attention_variants import EXAMPLE

    ran = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True)
    print(ran.stdout)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_each_variant_matches_torch_with_it_written_out_on_each_grid():
    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.kernels.ops import kernels_on
    from mlir_tile.testing.attention_variants import CASES, variants

    named, failures = variants(), []
    torch.manual_seed(3)
    for case in CASES:
        q, k, v = (torch.randn(2, 3, case.seq, case.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        run = HopperAttention(kernels_on(q.device).library, dict(case.shape))
        operands = _operands(case, *q.shape[:2])
        o, lse = run(q, k, v, causal=case.causal, variant=named[case.variant], operands=operands)
        expected, expected_lse = _expected(q, k, v, case, operands)
        errors = (o.float() - expected).abs().max().item(), (lse - expected_lse).abs().max().item()
        print(case, errors)
        if errors[0] > 2 ** -6 or errors[1] > 1e-3:
            failures.append((case, errors))
    assert not failures, failures


def test_a_variant_through_the_operator_and_what_it_does_not_take():
    """The public operator (a torch op of its own per variant) runs it; keys that break the variant's rules,
    operands of the wrong kind, causal with keys of its own and fp8 are ValueErrors before any launch."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.variants import Variant
    from mlir_tile.testing.attention_variants import Case, band, softcap

    q, k, v = (torch.randn(1, 2, 700, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = attention(q, k, v, variant=band, operands=(100,))
    expected, expected_lse = _expected(q, k, v, Case("band", (100,), 64, 700))
    assert (o.float() - expected).abs().max().item() <= 2 ** -6 and (lse - expected_lse).abs().max() <= 1e-3
    backwards = Variant("backwards", keys=lambda query, seq, at: (seq - 1 - query, seq))
    for call, message in ((lambda: attention(q, k, v, variant=band, operands=(1.5,)), "takes operands width"),
                          (lambda: attention(q, k, v, variant=band), "takes operands width"),
                          (lambda: attention(q, k, v, variant=band, operands=(100,), causal=True), "causal=False"),
                          (lambda: attention(q, k, v, variant=backwards), "first non-decreasing; at row 1"),
                          (lambda: attention(q, k, v, variant=softcap, operands=(1.0,), descale_q=q), "float16 or")):
        with pytest.raises(ValueError, match=message):
            call()


def test_per_head_operands_through_the_operator_in_a_cuda_graph_and_what_they_do_not_take():
    """ALiBi's slopes and gpt-oss's sinks as the operator takes them ([heads] or [batch, heads] tensors), the sinks
    read live by a captured graph (changed in place between replays); a head's operand of the wrong shape, dtype,
    device or kind, or one asking for a gradient it does not get, is a ValueError before any launch."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.masks import alibi, alibi_slopes, sinks
    from mlir_tile.testing.attention_variants import Case

    torch.manual_seed(5)  # (the lengths of cases of `attention_variants`, whose kernels `make gpu-inputs` built)
    q, k, v = (torch.randn(2, 4, 1500, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = torch.tensor(alibi_slopes(4), device="cuda")
    o, lse = attention(q, k, v, causal=True, variant=alibi, operands=(slopes,))
    expected, expected_lse = _expected(q, k, v, Case("alibi", (), 128, 1500, causal=True), (slopes,))
    assert (o.float() - expected).abs().max().item() <= 2 ** -6 and (lse - expected_lse).abs().max() <= 1e-3
    q, k, v = (x[:, :, :1000] for x in (q, k, v))
    logits = torch.zeros(4, device="cuda")
    attention(q, k, v, variant=sinks, operands=(logits,))  # (built and planned outside the capture)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured, captured_lse = attention(q, k, v, variant=sinks, operands=(logits,))
    for values in (torch.randn(4) * 3, torch.tensor([30.0, -30.0, 0.0, 2.0])):
        logits.copy_(values)
        graph.replay()
        expected, expected_lse = _expected(q, k, v, Case("sinks", (), 128, 1000), (logits,))
        assert (captured.float() - expected).abs().max().item() <= 2 ** -6
        assert (captured_lse - expected_lse).abs().max().item() <= 1e-3
    for operand, message in ((slopes[:3], r"\[heads\] or \[batch, heads\] on cuda:0, \(4,\) or \(2, 4\); got \(3,\)"),
                             (slopes.int(), "a floating tensor"), (slopes.cpu(), "got .* on cpu"),
                             (0.5, r"takes operands slopes \(head\) \(a head's: a tensor\)"),
                             (slopes.clone().requires_grad_(), "operand 'slopes' gets no gradient")):
        with pytest.raises(ValueError, match=message):
            attention(q, k, v, variant=alibi, operands=(operand,))


def _gradients(forward, q, k, v, grad):
    """(dq, dk, dv) of forward(q, k, v) -> (O, lse) for O's upstream `grad`, by autograd."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    o, _ = forward(q, k, v)
    return torch.autograd.grad(o, (q, k, v), grad.to(o.dtype))


def test_a_variants_gradients_match_fp32_autograd_within_torchs_own_error():
    """Masks and the score steps with their derivatives (softcap, ALiBi, Gemma 2's local layer) train: dq, dk, dv
    through the operator against fp32 autograd of the variant written out, within twice the error of torch's
    16-bit SDPA backward with the same mask and bias (plus the element's rounding of the gradients' scale);
    first_100's keys past the 100th, seen by no row (the key blocks from the second on visiting no query block),
    get dK = dV = 0; the sinks' own gradient (given as an operand) against fp32 autograd's. A sink function's
    backward is not built: one line says so."""
    from mlir_tile.kernels import attention
    from mlir_tile.testing.attention_variants import BACKWARD_CASES, variants

    named, failures = variants(), []
    torch.manual_seed(11)
    for case in BACKWARD_CASES:
        q, k, v, grad = (torch.randn(2, 3, case.seq, case.d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        operands = _operands(case, 2, 3)
        ours = _gradients(lambda *x: attention(*x, causal=case.causal, variant=named[case.variant],
                                               operands=operands), q, k, v, grad)
        failures += _gradient_failures(case, operands, (q, k, v, grad), ours)
        if case.variant == "first_100":
            assert not ours[1][:, :, 100:].any() and not ours[2][:, :, 100:].any()
        if case.variant in ("sinks", "gpt_oss_local"):
            failures += _sink_gradient_errors(case, q, k, v, grad, operands[0], named[case.variant])
    assert not failures, failures
    q = torch.randn(1, 2, 1000, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # (a case's kernel)
    o, _ = attention(q, q, q, variant=named["constant_sink"])
    with pytest.raises(NotImplementedError, match="variant 'constant_sink' has a sink function"):
        o.sum().backward()


def test_a_masks_deterministic_backward_gives_the_same_bits_each_run_within_the_same_bound():
    """torch.use_deterministic_algorithms with a mask (`DETERMINISTIC_MASKS`: windows whose key blocks start
    their walks at different query blocks, first_100's blocks that walk none, gpt-oss's local window with its
    sinks): each query block's dQ additions in the key blocks' order from the first that reaches it
    (`_Backward.first_adder`; a wrong count hangs, which the run's timeout reports): two runs give dq, dk, dv
    bitwise equal, within the bound of the test above against fp32 autograd."""
    from mlir_tile.kernels import attention
    from mlir_tile.testing.attention_variants import BACKWARD_CASES, DETERMINISTIC_MASKS, variants

    named, failures = variants(), []
    torch.manual_seed(12)
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # (warn only: the fp32 reference's cuBLAS products)
    try:
        for case in (case for case in BACKWARD_CASES if case.variant in DETERMINISTIC_MASKS):
            q, k, v, grad = (torch.randn(2, 3, case.seq, case.d, device="cuda", dtype=torch.bfloat16)
                             for _ in range(4))
            operands = _operands(case, 2, 3)
            runs = [_gradients(lambda *x: attention(*x, variant=named[case.variant], operands=operands), q, k, v,
                               grad) for _ in range(2)]
            assert all(torch.equal(a, b) for a, b in zip(*runs)), case
            failures += _gradient_failures(case, operands, (q, k, v, grad), runs[0])
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    assert not failures, failures


def _gradient_failures(case, operands, inputs, ours) -> list:
    """(case, gradient, error, bound) where `ours` (dq, dk, dv) is past twice torch's 16-bit error of fp32
    autograd (plus the element's rounding of the gradients' scale)."""
    q, k, v, grad = inputs
    exact = _gradients(lambda *x: _expected(*x, case, operands), q.float(), k.float(), v.float(), grad.float())
    torchs = _gradients(lambda *x: (_bf16_reference(*x, case, operands), None), q, k, v, grad)
    failures = []
    for name, got, theirs, truth in zip("qkv", ours, torchs, exact):
        error = float((got.float() - truth).abs().max())
        bound = 2 * float((theirs.float() - truth).abs().max()) + 4 * torch.finfo(torch.bfloat16).eps * max(
            float(truth.abs().max()), 1e-2)
        if not error <= bound:
            failures.append((case, f"d{name}", error, bound))
    return failures


def _sink_gradient_errors(case, q, k, v, grad, sinks, variant) -> list:
    """The sinks' gradient through the operator (a loss on O and on the log-sum-exp) against fp32 autograd of the
    variant written out: within 2% of its largest element (its sum over the rows, each a bf16 product)."""
    from mlir_tile.kernels import attention

    grad_lse = torch.randn(q.shape[:3], device="cuda")
    found = []
    for run in (lambda s: attention(q, k, v, causal=case.causal, variant=variant, operands=(s,)),
                lambda s: _expected(q.float(), k.float(), v.float(), case, (s,))):
        logits = sinks.detach().float().clone().to(sinks.dtype).requires_grad_()
        o, lse = run(logits)
        (upstream,) = torch.autograd.grad([o.float(), lse], [logits], [grad.float(), grad_lse])
        found.append(upstream.float())
    error, scale = float((found[0] - found[1]).abs().max()), float(found[1].abs().max())
    return [] if error <= 0.02 * scale + 1e-3 else [(case, "dsinks", error, scale)]


def _bf16_reference(q, k, v, case, operands):
    """torch's 16-bit attention with the case's variant: SDPA with the mask, or with the steps as a bf16 bias
    (softcap's scores through torch's bf16 ops: the error a 16-bit implementation makes)."""
    if case.variant in ("softcap", "gemma2_local"):
        seq, cap = q.shape[-2], case.operands[0]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = (cap * torch.tanh(scores / cap)).masked_fill(_hidden(case, seq), float("-inf"))
        return scores.float().softmax(-1).to(q.dtype) @ v
    mask = (~_hidden(case, q.shape[-2])).to(q.dtype).log() if case.variant != "alibi" else None  # (0 or -inf)
    if case.variant == "alibi":
        seq = q.shape[-2]
        query, key = _positions(seq)
        slopes = _per_head(operands[0], *q.shape[:2])
        mask = (-slopes * (key - query).abs()).masked_fill(_hidden(case, seq), float("-inf")).to(q.dtype)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _family_expected(q, k, v, case, operands):
    """torch's fp32 attention with a random case's parts applied in their order (k and v repeated for q's heads'
    groups): (o, lse)."""
    from mlir_tile.testing.attention_variants import FAMILIES

    batch, heads, seq, d = q.shape
    k, v = (x.repeat_interleave(heads // x.shape[1], 1).float() for x in (k, v))
    query, key = _positions(seq)
    scores = q.float() @ k.transpose(-1, -2) / math.sqrt(d)
    hidden, sink = (key > query) if case.causal else torch.zeros_like(key > query), None
    for part, value in zip(FAMILIES[case.family], operands):
        if part == "band":
            hidden = hidden | ((key - query).abs() > value)
        elif part == "softcap":
            scores = value * torch.tanh(scores / value)
        elif part == "alibi":
            scores = scores - _per_head(value, batch, heads) * (key - query).abs()
        else:
            sink = _per_head(value, batch, heads)
    return _attend(scores, hidden, v, sink)


def test_random_cases_of_the_ready_made_parts_match_torch():
    """`attention_variants.random_cases`' 200 cases through the operator (bands, softcap, ALiBi and sinks alone and
    combined; grouped-query heads; head values [heads] and [batch, heads]) against torch's fp32 math: O within
    2^-6, the log-sum-exp within 1e-4 of its size (ALiBi's negative slopes make it thousands; tanh.approx's
    relative error, up to 2^-11, moves it at small caps)."""
    from mlir_tile.kernels import attention
    from mlir_tile.testing.attention_variants import random_cases, variants

    named, failures = variants(), []
    torch.manual_seed(61)
    for case in random_cases():
        q = torch.randn(case.batch, case.heads, case.seq, case.d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(case.batch, case.kv_heads, case.seq, case.d, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        operands = _operands(case, case.batch, case.heads)
        o, lse = attention(q, k, v, causal=case.causal, variant=named[case.family], operands=operands)
        expected, expected_lse = _family_expected(q, k, v, case, operands)
        o_error = float((o.float() - expected).abs().max())
        lse_error = float(((lse - expected_lse).abs() / expected_lse.abs().clamp(min=1)).max())
        if not (o_error <= 2 ** -6 and lse_error <= 1e-4):
            failures.append((case, o_error, lse_error))
    assert not failures, failures[:10]
