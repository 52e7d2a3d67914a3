"""Attention's extension points on packed sequences and KV caches (Hopper): `attention_with_kvcache` (contiguous
and paged caches, decode steps with GQA packing and split-KV, a prefill of 64 queries against a cache) and
`attention_varlen` with a variant, each against torch's fp32 attention of each sequence with the variant
written out as an explicit mask at the queries' positions (query i of len_q at i + len_k - len_q), ragged
lengths 0 and 1 included; a windowed decode step replayed in a CUDA graph over other lengths; keys that the
host can check only at the longest length giving NaN rows, never wrong ones; what the calls refuse. The
kernels come from `make gpu-inputs`' cache (`testing.attention_variants.PACKED_CASES`, built for 132 SMs).
Skipped without torch or an sm_90 GPU (the reason shown)."""
import math

import pytest

# (the dense variants' GPU test's torch, marks and autouse kernel cache: the same GPU and kernels)
from test_attention_variants_gpu import kernel_cache, pytestmark, torch  # noqa: F401


def _operand_values(case, batch: int) -> tuple:
    """The case's operands, "heads" and "batch_heads" as random fp32 tensors [heads] and [batch, heads]."""
    made = {"heads": lambda: torch.rand(case.heads, device="cuda") * 0.3,
            "batch_heads": lambda: torch.randn(batch, case.heads, device="cuda") * 2}
    return tuple(made[x]() if x in made else x for x in case.operands)


WINDOWS = {"window_255": (255, 0), "gemma2_local": (1023, 0), "gpt_oss_local": (127, 0), "window_100_50": (100, 50)}


def _parts(case) -> tuple:
    """The parts that read the case's operands, in their order."""
    from mlir_tile.testing.attention_variants import FAMILIES

    return {"gemma2_local": ("softcap",), "gpt_oss_local": ("sinks",), **FAMILIES}.get(case.variant, ())


def _expected_sequence(case, q, k, v, operands, b: int, element=torch.float32):
    """torch's fp32 (o [len_q, heads, d], lse [heads, len_q]) of sequence `b`'s q [len_q, heads, d] against its
    k and v [len_k, kv_heads, d], the variant written out at the queries' positions; a row that sees nothing: o
    0, lse -inf (or the sink's). `element` 16-bit: its products q k^T and P V in it (the softmax in fp32), the
    error a 16-bit implementation makes."""
    group = case.heads // case.kv_heads
    qf = q.to(element).transpose(0, 1)
    kf, vf = (x.to(element).repeat_interleave(group, 1).transpose(0, 1) for x in (k, v))
    len_q, len_k = q.shape[0], k.shape[0]
    position = torch.arange(len_q, device="cuda")[:, None] + (len_k - len_q)
    key = torch.arange(len_k, device="cuda")[None, :]
    scores = (qf @ kf.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    hidden, sink = key > position if case.causal else torch.zeros_like(key > position), None
    if case.variant in WINDOWS:
        left, right = WINDOWS[case.variant]
        hidden = hidden | (key > position + right) | (key < position - left)
    if case.variant == "odd_end":  # (rows 0-49 see 10 keys more a row less at 4,097-5,999 keys)
        hidden = hidden | (key >= position + 1 + (50 - position).clamp(min=0) * 10 * int(4096 < len_k < 6000))
    for part, value in zip(_parts(case), operands):
        per_head = isinstance(value, torch.Tensor) and (value if value.dim() == 1 else value[b])[:, None, None]
        if part == "band":
            hidden = hidden | ((key - position).abs() > value)
        elif part == "softcap":
            scores = value * torch.tanh(scores / value)
        elif part == "alibi":
            scores = scores - per_head * (key - position).abs()
        else:
            sink = per_head
    scores = scores.masked_fill(hidden, float("-inf"))
    if sink is not None:
        scores = torch.cat([scores, sink.expand(-1, len_q, 1)], -1)
    lse = scores.logsumexp(-1)
    weights = torch.nan_to_num(torch.exp(scores - lse[..., None]))[..., :len_k]
    return (weights.to(element) @ vf).float().transpose(0, 1), lse


def _close(got, expected, relative: bool = False) -> float:
    """The largest error (`relative`: to the expected value's size, 1 at least), -inf against -inf none."""
    if not got.numel():
        return 0.0
    error = (got.float() - expected).abs()
    if relative:
        error = error / torch.where(torch.isinf(expected), 1.0, expected.abs().clamp(min=1))
    return torch.where(torch.isinf(expected) & (got == expected), 0.0, error).max().item()


def _run_cache(case, operands, lengths, caches=None):
    """(o, lse, expected o, expected lse) of a KV cache case's call (`caches`: q and the caches to reuse)."""
    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.testing.attention_variants import variants

    batch, d = len(case.lengths), case.d
    if caches is None:
        q = torch.randn(batch, case.seq_q, case.heads, d, device="cuda", dtype=torch.bfloat16)
        k_cache, v_cache = (torch.randn(batch, case.seq_cache, case.kv_heads, d, device="cuda",
                                        dtype=torch.bfloat16) for _ in range(2))
        caches = q, k_cache, v_cache
    q, k_cache, v_cache = caches
    table = None
    if case.form == "paged":  # (each sequence's pages a random choice of the pool's)
        per = case.seq_cache // case.page_size
        table = torch.randperm(batch * per, device="cuda", dtype=torch.int32).view(batch, per)
        pool = [torch.empty(batch * per, case.page_size, case.kv_heads, d, device="cuda", dtype=torch.bfloat16)
                for _ in range(2)]
        for x, cache in zip(pool, (k_cache, v_cache)):
            x[table.long().flatten()] = cache.reshape(batch * per, case.page_size, case.kv_heads, d)
        k_arg, v_arg = pool
    else:
        k_arg, v_arg = k_cache, v_cache
    o, lse = attention_with_kvcache(q, k_arg, v_arg, lengths, causal=case.causal, block_table=table,
                                    variant=variants()[case.variant], operands=operands)
    expected = [_expected_sequence(case, q[b], k_cache[b, :n], v_cache[b, :n], operands, b)
                for b, n in enumerate(lengths.tolist())]
    return o, lse, torch.stack([e[0] for e in expected]), torch.stack([e[1] for e in expected])


def _packed_inputs(case) -> tuple:
    """Random bf16 q, k, v of a varlen case's sequences, and its cu_seqlens_q, cu_seqlens_k."""
    len_q, len_k = zip(*case.lengths)
    q, k, v = (torch.randn(sum(n), heads, case.d, device="cuda", dtype=torch.bfloat16)
               for n, heads in ((len_q, case.heads), (len_k, case.kv_heads), (len_k, case.kv_heads)))
    offsets = [torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
               for n in (len_q, len_k)]
    return (q, k, v), offsets


def _packed_expected(case, q, k, v, offsets, operands, element=torch.float32) -> tuple:
    """`_expected_sequence` of each of a varlen case's sequences: (o [total_q, heads, d], lse [heads, total_q])."""
    (cu_q, cu_k), expected = (x.tolist() for x in offsets), []
    for b in range(len(cu_q) - 1):
        keys = slice(cu_k[b], cu_k[b + 1])
        expected.append(_expected_sequence(case, q[cu_q[b]:cu_q[b + 1]], k[keys], v[keys], operands, b, element))
    return torch.cat([e[0] for e in expected]), torch.cat([e[1] for e in expected], 1)


def _run_varlen(case, operands):
    from mlir_tile.kernels import attention_varlen
    from mlir_tile.testing.attention_variants import variants

    (q, k, v), offsets = _packed_inputs(case)
    len_q, len_k = zip(*case.lengths)
    o, lse = attention_varlen(q, k, v, *offsets, max(len_q), max(len_k), causal=case.causal,
                              variant=variants()[case.variant], operands=operands)
    return (o, lse, *_packed_expected(case, q, k, v, offsets, operands))


def _run_case(case):
    """(o, lse, expected o, expected lse) of `case` with random inputs and operands."""
    operands = _operand_values(case, len(case.lengths))
    if case.form == "varlen":
        return _run_varlen(case, operands)
    return _run_cache(case, operands, torch.tensor(case.lengths, device="cuda", dtype=torch.int32))


def test_each_packed_case_matches_torch_with_its_variant_written_out():
    from mlir_tile.testing.attention_variants import PACKED_CASES

    torch.manual_seed(61)
    failures = []
    with torch.no_grad():
        for case in PACKED_CASES:
            o, lse, expected, expected_lse = _run_case(case)
            errors = _close(o, expected), _close(lse, expected_lse)
            print(case.variant, case.form, errors)
            if not errors[0] <= 2 ** -6 or not errors[1] <= 1e-3:
                failures.append((case, errors))
    assert not failures, failures


def test_random_packed_cases_of_the_ready_made_parts_match_torch():
    """`attention_variants.random_packed_cases`' 200 cases (bands, softcap, ALiBi and sinks alone and combined;
    contiguous and paged caches, pages of 16-256, lengths 0 and 1 to full, decode steps and prefills against a
    cache, packed sequences; GQA; split-KV) against torch's fp32 math: O within 2^-6, the log-sum-exp within
    1e-4 of its size (ALiBi's negative slopes make it thousands)."""
    from mlir_tile.testing.attention_variants import random_packed_cases

    torch.manual_seed(62)
    failures = []
    with torch.no_grad():
        for case in random_packed_cases():
            o, lse, expected, expected_lse = _run_case(case)
            lse_error = _close(lse, expected_lse, relative=True)
            if not (_close(o, expected) <= 2 ** -6 and lse_error <= 1e-4):
                failures.append((case, _close(o, expected), lse_error))
    assert not failures, (len(failures), failures[:8])


def test_a_windowed_decode_step_replays_in_a_cuda_graph_over_other_lengths():
    from mlir_tile.testing.attention_variants import PACKED_CASES

    case = PACKED_CASES[0]  # (the paged window, 255 keys back)
    torch.manual_seed(7)
    lengths = torch.tensor(case.lengths, device="cuda", dtype=torch.int32)
    with torch.no_grad():
        _run_cache(case, (), lengths)  # (its plans made before the capture)
        batch = len(case.lengths)
        caches = (torch.randn(batch, 1, case.heads, case.d, device="cuda", dtype=torch.bfloat16),
                  *(torch.randn(batch, case.seq_cache, case.kv_heads, case.d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2)))
        from mlir_tile.kernels import attention_with_kvcache
        from mlir_tile.testing.attention_variants import variants

        q, k_cache, v_cache = caches
        per = case.seq_cache // case.page_size
        table = torch.arange(batch * per, device="cuda", dtype=torch.int32).view(batch, per)
        pools = [x.reshape(batch * per, case.page_size, case.kv_heads, case.d) for x in (k_cache, v_cache)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            o, lse = attention_with_kvcache(q, *pools, lengths, block_table=table, causal=False,
                                            variant=variants()["window_255"])
        errors = []
        for new in ((2048, 7, 256, 255, 1), (0, 0, 0, 0, 0), (1000, 1001, 1002, 3, 2000)):
            lengths.copy_(torch.tensor(new, device="cuda", dtype=torch.int32))
            graph.replay()
            torch.cuda.synchronize()
            expected = torch.stack([_expected_sequence(case, q[b], k_cache[b, :n], v_cache[b, :n], (), b)[0]
                                    for b, n in enumerate(new)])
            errors.append(_close(o, expected))
    assert max(errors) <= 2 ** -6, errors


def test_an_fp8_cache_takes_a_variant_within_e4m3s_rounding_of_p():
    """`FP8_PACKED_CASES` (gpt-oss's local layer with sinks on a paged decode step, a window with split-KV over a
    contiguous cache, ALiBi on 64 queries a step against pages of 16): q and the caches float8_e4m3fn with
    descales a (batch, K/V head), O (bf16) within (2^-4 + 2 e) max |v| + 2^-7 max |O| of fp32 attention of the values the
    fp8 inputs stand for with the variant written out (the fp8 cache test's bound), the log-sum-exp within
    1e-3 + e of its size."""
    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.kernels.flash.sm90_checks import FP8_ACCUMULATION
    from mlir_tile.testing.attention_variants import FP8_PACKED_CASES, variants
    from test_kernels_ops_hopper_gpu import quantized

    torch.manual_seed(45)
    failures = []
    for case in FP8_PACKED_CASES:
        batch = len(case.lengths)
        operands = _operand_values(case, batch)
        group = case.heads // case.kv_heads
        (q,), q_descale, (q_values,) = quantized([2 * torch.randn(batch, case.seq_q, case.heads, case.d,
                                                              device="cuda")], group, "heads", 2)
        caches, descales, values = [], [], []
        for _ in range(2):
            (cache,), descale, (dequantized,) = quantized(
                [2 * torch.randn(batch, case.seq_cache, case.kv_heads, case.d, device="cuda")], 1, "heads", 2)
            caches.append(cache)
            descales.append(descale)
            values.append(dequantized)
        table = None
        if case.form == "paged":  # (each sequence's pages a random choice of the pool's; written as bytes)
            per = case.seq_cache // case.page_size
            table = torch.randperm(batch * per, device="cuda", dtype=torch.int32).view(batch, per)
            pools = [torch.empty(batch * per, case.page_size, case.kv_heads, case.d, device="cuda",
                                 dtype=torch.float8_e4m3fn) for _ in range(2)]
            for pool, cache in zip(pools, caches):
                pool.view(torch.uint8)[table.long().flatten()] = cache.view(torch.uint8).reshape(
                    batch * per, case.page_size, case.kv_heads, case.d)
            caches = pools
        lengths = torch.tensor(case.lengths, device="cuda", dtype=torch.int32)
        o, lse = attention_with_kvcache(q, *caches, lengths, causal=case.causal, block_table=table,
                                        variant=variants()[case.variant], operands=operands, descale_q=q_descale,
                                        descale_k=descales[0], descale_v=descales[1])
        for b, n in enumerate(case.lengths):
            expected, expected_lse = _expected_sequence(case, q_values[b], values[0][b, :n], values[1][b, :n],
                                                        operands, b)
            keys = values[0][b, :n].repeat_interleave(case.heads // case.kv_heads, 1).transpose(0, 1).abs()
            products = q_values[b].transpose(0, 1).abs() @ keys.transpose(-1, -2)  # (the scores' error's scale)
            e = FP8_ACCUMULATION * (float(products.max()) if n else 0.0) / math.sqrt(case.d)
            bound = (2 ** -4 + 2 * e) * float(values[1].abs().max()) + 2 ** -7 * float(expected.abs().max())
            errors = _close(o[b], expected), _close(lse[b], expected_lse, relative=True)
            if o.dtype != torch.bfloat16 or not (errors[0] <= bound and errors[1] <= 1e-3 + e):
                failures.append((case.variant, b, n, errors, bound))
    assert not failures, failures


def test_keys_the_host_does_not_check_at_a_length_give_nan_rows_never_wrong_ones():
    """`odd_end`'s keys are causal at 8,192 keys (the longest) and up to 4,096 (where the host checks them), not
    at 5,000: rows 0-41 of a sequence of 5,000 see keys past the last row's, which the item's walk does not
    visit. (The first row's keys reach past the walk's last tile there: the consumers once walked on past it,
    waiting for tiles the producer never loads, and the kernel hung.)"""
    from mlir_tile.testing.attention_variants import NOT_MONOTONE

    torch.manual_seed(5)
    with torch.no_grad():
        o, lse, expected, _ = _run_varlen(NOT_MONOTONE, ())
    rows = o.float().isnan().any(-1).any(-1)
    fine = ~rows
    assert rows[:5000].any() and not rows[5000:].any(), rows.nonzero()
    assert _close(o[fine], expected[fine]) <= 2 ** -6


def test_packed_sequences_with_a_variant_train_within_torchs_own_error():
    """`PACKED_BACKWARD_CASES` (windows, a band, softcap, ALiBi, sinks; lengths 0 and 1, fewer queries than keys
    and more, a sequence past the lengths the host checks, GQA) through `attention_varlen`'s autograd: dq, dk, dv
    against fp32 autograd of each sequence with its variant written out, within twice the error of the same
    math with bf16 products (plus the element's rounding of the gradients' scale); the sinks' gradient (a loss
    on the log-sum-exp too) within 2% of fp32 autograd's."""
    from mlir_tile.testing.attention_variants import PACKED_BACKWARD_CASES

    torch.manual_seed(60)
    failures = []
    for case in PACKED_BACKWARD_CASES:
        failures += _training_failures(case)
    assert not failures, failures


def test_a_masks_packed_deterministic_backward_gives_the_same_bits_each_run_within_the_same_bound():
    """torch.use_deterministic_algorithms with a mask on packed sequences (`DETERMINISTIC_MASKS` of
    PACKED_BACKWARD_CASES: windows and a band over lengths 0, 1 and more queries than keys, GQA; gpt-oss's local
    window at 4,500 keys, past what the host checks, where every key block walks every query block): two runs
    give the same bits, within the bound of the test above."""
    from mlir_tile.testing.attention_variants import DETERMINISTIC_MASKS, PACKED_BACKWARD_CASES

    torch.manual_seed(61)
    failures = []
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # (warn only: the fp32 reference's cuBLAS products)
    try:
        for case in (case for case in PACKED_BACKWARD_CASES if case.variant in DETERMINISTIC_MASKS):
            failures += _training_failures(case, runs=2)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    assert not failures, failures


def _training_failures(case, runs: int = 1) -> list:
    """(variant, gradient, error, bound) where `case`'s gradients through `attention_varlen` are past twice the
    error of bf16 products of fp32 autograd's; `runs` runs of ours, each the same bits."""
    from mlir_tile.kernels import attention_varlen
    from mlir_tile.testing.attention_variants import variants

    failures = []
    inputs, offsets = _packed_inputs(case)
    operands = _operand_values(case, len(case.lengths))
    sinks = "sinks" in _parts(case)
    upstream = [torch.randn_like(inputs[0]), torch.randn(case.heads, inputs[0].shape[0], device="cuda")]
    len_q, len_k = zip(*case.lengths)

    def ours(q, k, v, *operands):
        return attention_varlen(q, k, v, *offsets, max(len_q), max(len_k), causal=case.causal,
                                variant=variants()[case.variant], operands=operands)

    def gradients(forward, element):
        leaves = [x.detach().to(element).requires_grad_() for x in inputs]
        if sinks:
            leaves.append(operands[0].detach().clone().requires_grad_())
        o, lse = forward(*leaves[:3], *(leaves[3:] if sinks else operands))
        outputs, grads = [o.float()], [upstream[0].float()]
        if sinks:  # (every row's log-sum-exp finite: its sink's at least)
            outputs.append(lse)
            grads.append(upstream[1])
        return [x.float() for x in torch.autograd.grad(outputs, leaves, grads)]

    exact, theirs = (gradients(lambda *x, element=element: _packed_expected(
        case, *x[:3], offsets, tuple(x[3:]), element), element) for element in (torch.float32, torch.bfloat16))
    got, *again = (gradients(ours, torch.bfloat16) for _ in range(runs))
    assert all(torch.equal(a, b) for run in again for a, b in zip(got, run)), case
    for name, mine, bf16, truth in zip(("dq", "dk", "dv"), got, theirs, exact):
        error = float((mine - truth).abs().max())
        bound = 2 * float((bf16 - truth).abs().max()) + 4 * torch.finfo(torch.bfloat16).eps * max(
            float(truth.abs().max()), 1e-2)
        if not error <= bound:
            failures.append((case.variant, name, error, bound))
    if sinks and not float((got[3] - exact[3]).abs().max()) <= 0.02 * float(exact[3].abs().max()) + 1e-3:
        failures.append((case.variant, "dsinks", float((got[3] - exact[3]).abs().max())))
    return failures


def test_what_a_variant_on_a_cache_refuses_in_one_line_before_it_writes_the_cache():
    from mlir_tile.kernels import attention_varlen, attention_with_kvcache
    from mlir_tile.kernels.flash.masks import alibi, sliding_window
    from mlir_tile.kernels.flash.variants import Variant, maximum, minimum

    q = torch.randn(2, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(2, 256, 2, 128, device="cuda", dtype=torch.bfloat16)
    new = torch.randn(2, 1, 2, 128, device="cuda", dtype=torch.bfloat16)
    before = cache.clone()
    with pytest.raises(ValueError, match="give it causal=False"):  # (refused before the new keys are written)
        attention_with_kvcache(q, cache, cache, 100, new, new, variant=sliding_window(10))
    assert torch.equal(cache, before)
    late = Variant("late", keys=lambda query, seq, at: (maximum(query - 10, 0), minimum(query + 1, seq - 300)))
    with pytest.raises(ValueError, match=r"keys\(query, seq=256\) must keep first < end"):
        attention_with_kvcache(q, cache, cache, 100, causal=False, variant=late)
    short = Variant("short", keys=lambda query, seq, at: (0, minimum(maximum(
        query + 1, (seq - query) * maximum(minimum(100 - seq, 1), 0)), seq)))  # (causal from 100 keys on)
    with pytest.raises(ValueError, match=r"keys\(query, seq=\d+\) must keep end non-decreasing"):  # (below 256)
        attention_with_kvcache(q, cache, cache, 100, causal=False, variant=short)
    with pytest.raises(ValueError, match="operand 'slopes' is a floating tensor"):
        attention_with_kvcache(q, cache, cache, 100, variant=alibi, operands=(torch.ones(3, device="cuda"),))
    with pytest.raises(ValueError, match="operands are a variant's"):
        attention_with_kvcache(q, cache, cache, 100, operands=(1.0,))
    with pytest.raises(ValueError, match="on a KV cache has no backward"):
        attention_with_kvcache(q.requires_grad_(), cache, cache, 100, causal=False, variant=sliding_window(10))
    rows = torch.randn(10, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    offsets = torch.tensor([0, 10], device="cuda", dtype=torch.int32)
    with pytest.raises(ValueError, match="has a sink function"):
        attention_varlen(rows, rows, rows, offsets, offsets, 10, 10, variant=Variant("one", sink=lambda at: 1.0))
