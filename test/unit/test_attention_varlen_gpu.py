"""Packed variable-length attention on the GPU (`mlir_tile.kernels.attention_varlen`, Hopper's path), as a
training or serving user calls it: random packed batches (empty and one-token sequences, unequal query and key
lengths, grouped K/V heads, d 64, 128 and 256, both masks and dtypes) against fp32 attention written out here per
sequence (causal aligned to the bottom right), within twice the error torch's own 16-bit SDPA makes on the same
sequences; offsets past the tensors; a CUDA graph replayed with other lengths; torch.compile; slices of a fused
projection read in place; the one-line errors. Skipped without torch or an sm_90 GPU (the reason shown)."""
import itertools
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
import mlir_tile.kernels.ops  # noqa: E402,F401  (registers torch.ops.mlir_tile.*)
F = torch.nn.functional
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="packed sequences run on Hopper's path (sm_90) only")]

CASES = 150


def _offsets(lengths) -> torch.Tensor:
    return torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")


def _visible(len_q: int, len_k: int, causal: bool) -> torch.Tensor:
    """[len_q, len_k] booleans: the keys each query row sees (causal: up to i + len_k - len_q)."""
    seen = torch.ones(len_q, len_k, dtype=torch.bool, device="cuda")
    if causal:
        rows, columns = torch.arange(len_q, device="cuda")[:, None], torch.arange(len_k, device="cuda")[None, :]
        seen = columns <= rows + (len_k - len_q)
    return seen


def _sequence_attention(q, k, v, seen, dtype=None):
    """One sequence's O [len_q, heads, d] through SDPA in `dtype`, or (O, lse [heads, len_q]) in fp32; k and v
    repeated for their groups of q's heads. Rows that see no key: NaN in SDPA's, the caller leaves them out."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (x.transpose(0, 1) for x in (q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)))
    if dtype is not None:  # (no mask, or is_causal where it is the top-left one; a fused backend, whose backward
        # takes D = rowsum(dO O) from the rounded O as ours does, not the math one's exact softmax gradient)
        square_causal = seen.shape[0] == seen.shape[1] and torch.equal(seen, seen.tril())
        mask = None
        if not (bool(seen.all()) or square_causal):  # (an additive mask whose rows lie on 16 bytes, as the
            # memory-efficient backend takes it)
            columns = -(-seen.shape[1] // 8) * 8
            mask = torch.zeros(seen.shape[0], columns, device="cuda", dtype=dtype)[:, :seen.shape[1]]
            mask.masked_fill_(~seen, float("-inf"))
        fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
        for backends in (fused, fused + [SDPBackend.MATH]):  # (the math one where no fused one takes the case)
            try:
                with sdpa_kernel(backends):
                    return F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask,
                                                          is_causal=mask is None and not bool(seen.all())).transpose(0, 1)
            except RuntimeError:
                if backends != fused:
                    raise
    scores = (q.float() @ k.float().transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~seen, float("-inf"))
    return (scores.softmax(-1) @ v.float()).transpose(0, 1), scores.logsumexp(-1)


def _case(rng: random.Random, trial: int):
    """(lengths_q, lengths_k, heads, kv_heads, d, causal, dtype)."""
    count = rng.randint(1, 6)
    pick = lambda: rng.choice([0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 200, 255, rng.randint(1, 700)])
    lengths_q = [pick() for _ in range(count)]
    lengths_k = list(lengths_q) if trial % 3 else [pick() for _ in range(count)]
    heads = rng.choice([1, 2, 3, 4, 8])
    kv_heads = rng.choice([x for x in range(1, heads + 1) if heads % x == 0]) if trial % 2 else heads
    d = rng.choice([64, 128, 128, 256])
    return lengths_q, lengths_k, heads, kv_heads, d, rng.random() < 0.5, (torch.float16, torch.bfloat16)[trial % 2]


def test_packed_sequences_match_fp32_attention_within_torchs_own_error():
    """Per case and sequence: O's largest error from fp32 at most twice SDPA's (16-bit, the same mask) plus a floor
    of the element's rounding; the log-sum-exp within 1e-3 of fp32's (relative to its size); rows that see no key
    O 0 and lse -inf."""
    from mlir_tile.kernels import attention_varlen

    rng, failures = random.Random(60), []
    for trial in range(CASES):
        lengths_q, lengths_k, heads, kv_heads, d, causal, dtype = _case(rng, trial)
        cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
        q = torch.randn(sum(lengths_q), heads, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(sum(lengths_k), kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
        o, lse = attention_varlen(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal)
        case = (lengths_q, lengths_k, heads, kv_heads, d, causal, dtype)
        for b, (len_q, len_k) in enumerate(zip(lengths_q, lengths_k)):
            rows_q, rows_k = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if not len_q:
                continue
            seen = _visible(len_q, len_k, causal)
            some = seen.any(1)
            got_o, got_lse = o[rows_q].float(), lse[:, rows_q]
            if not bool((got_o[~some] == 0).all()) or not bool((got_lse[:, ~some] == float("-inf")).all()):
                failures.append((case, b, "rows that see no key"))
            if not bool(some.any()):
                continue
            exact_o, exact_lse = _sequence_attention(q[rows_q], k[rows_k], v[rows_k], seen)
            torchs = _sequence_attention(q[rows_q], k[rows_k], v[rows_k], seen, dtype).float()
            error = float((got_o[some] - exact_o[some]).abs().max())
            bound = 2 * float((torchs[some] - exact_o[some]).abs().max()) + 4 * torch.finfo(dtype).eps * float(
                exact_o[some].abs().max())
            lse_error = float(((got_lse[:, some] - exact_lse[:, some]).abs() / exact_lse[:, some].abs().clamp(min=1)).max())
            if not (error <= bound and lse_error <= 1e-3):
                failures.append((case, b, error, bound, lse_error))
    assert not failures, failures[:10]


def test_offsets_past_the_tensors_are_clamped_not_a_fault():
    """cu_seqlens past total rows (and out of order) make shorter or empty sequences: no CUDA fault, no write
    outside O; the first sequence's rows as fp32's."""
    from mlir_tile.kernels import attention_varlen

    q, k, v = (torch.randn(100, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, 60, 5000, 7], dtype=torch.int32, device="cuda")
    o, lse = attention_varlen(q, k, v, cu, cu, 5000, 5000, causal=True)
    torch.cuda.synchronize()
    exact, _ = _sequence_attention(q[:60], k[:60], v[:60], _visible(60, 60, True))
    assert float((o[:60].float() - exact).abs().max()) < 2e-2
    fp32, _ = _sequence_attention(q[60:], k[60:], v[60:], _visible(40, 40, True))  # (clamped: rows 60..100)
    assert float((o[60:].float() - fp32).abs().max()) < 2e-2


def test_a_cuda_graph_replays_with_other_lengths():
    """The offsets live on the device: a graph captured once replays new lengths written into them."""
    from mlir_tile.kernels import attention_varlen

    q, k, v = (torch.randn(300, 4, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    cu = _offsets([100, 200])
    attention_varlen(q, k, v, cu, cu, 256, 256, causal=True)  # (plans made outside the capture)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, _ = attention_varlen(q, k, v, cu, cu, 256, 256, causal=True)
    for lengths in ([100, 200], [1, 255], [256, 0], [44, 5]):
        cu.copy_(_offsets(lengths))
        graph.replay()
        expected, _ = attention_varlen(q, k, v, cu.clone(), cu.clone(), 256, 256, causal=True)
        rows = sum(lengths)  # (rows past the sequences: not written)
        assert torch.equal(o[:rows], expected[:rows]), lengths


def test_torch_compile_traces_the_operator():
    from mlir_tile.kernels import attention_varlen

    q, k, v = (torch.randn(200, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = _offsets([50, 150])
    compiled = torch.compile(lambda *x: attention_varlen(*x, cu, cu, 150, 150, causal=True)[0] * 2, fullgraph=True)
    assert torch.equal(compiled(q, k, v), attention_varlen(q, k, v, cu, cu, 150, 150, causal=True)[0] * 2)


def test_what_it_does_not_take_is_a_one_line_value_error():
    from mlir_tile.kernels import attention_varlen

    q, k, v = (torch.randn(64, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = _offsets([64])
    for arguments, message in [
        ((q, k, v, cu.long(), cu, 64, 64), "int32"),
        ((q, k, v, cu, _offsets([32, 32]), 64, 64), "int32"),
        ((q, k[:, :3], v[:, :3], cu, cu, 64, 64), "dividing"),
        ((q.float(), k, v, cu, cu, 64, 64), "bfloat16"),
        ((q[..., :96].contiguous(), k[..., :96].contiguous(), v[..., :96].contiguous(), cu, cu, 64, 64), "head dim"),
        ((q, k, v, cu, cu, -1, 64), "max_seqlen_q"),
        ((q.unsqueeze(0), k, v, cu, cu, 64, 64), "total_q"),
    ]:
        with pytest.raises(ValueError, match=message) as raised:
            attention_varlen(*arguments)
        assert "\n" not in str(raised.value)


CASES_BACKWARD = 150  # a dtype


def _masked_attention(q, k, v, seen, dtype=None):
    """One sequence's O [len_q, heads, d] in fp32 (or through SDPA in `dtype`), differentiable, rows that see no
    key 0 (they see every key inside, so that nothing is NaN, then are zeroed: no gradient flows from them)."""
    some = seen.any(1)
    safe = seen | ~some[:, None]
    if dtype is None:
        o, _ = _sequence_attention(q, k, v, safe)
    else:
        o = _sequence_attention(q, k, v, safe, dtype).float()
    return o * some[:, None, None]


def _sequence_gradients(q, k, v, grad, seen, dtype=None):
    q, k, v = (x.detach().float().requires_grad_() if dtype is None else x.detach().requires_grad_() for x in (q, k, v))
    return torch.autograd.grad(_masked_attention(q, k, v, seen, dtype), (q, k, v), grad.float())


def _rounded_o_shift(q, k, v, grad, seen, dtype):
    """The largest change to dq and to dk (and 0 to dv) that taking D = rowsum(dO O) from O rounded to `dtype`
    makes to the exact gradients, as every fused backward does (it has only the O the forward stored): dS changes
    by -P rowsum(dO (round(O) - O)). Where no fused backend of SDPA takes a sequence its math one is the reference,
    whose D is exact: on a row of two keys with a peaked P this alone can be a few percent of dq."""
    group, scale = q.shape[1] // k.shape[1], q.shape[-1] ** -0.5
    q, k, v = (x.float().transpose(0, 1) for x in (q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)))
    p = (q @ k.transpose(-1, -2) * scale).masked_fill(~seen, float("-inf")).softmax(-1).nan_to_num()
    o = p @ v
    shift = -p * (grad.float().transpose(0, 1) * (o.to(dtype).float() - o)).sum(-1, keepdim=True)
    dq, dk = shift @ k * scale, shift.transpose(-1, -2) @ q * scale
    dk = dk.unflatten(0, (-1, group)).sum(1)
    return float(dq.abs().max()), float(dk.abs().max()), 0.0


def test_packed_gradients_match_fp32_autograd_within_torchs_own_error():
    """Per case (CASES_BACKWARD a dtype: empty and one-token sequences, unequal lengths, grouped K/V heads, d 64,
    128 and 256, both masks) and sequence: dq, dk, dv through torch.autograd of `attention_varlen` against fp32
    autograd of the sequence alone, within twice the error of SDPA's 16-bit backward on it (the same mask) and
    twice what D from the rounded O shifts (`_rounded_o_shift`, for sequences only SDPA's math backend takes) plus
    a floor of the element's rounding; keys no row sees and rows that see none have gradients 0."""
    from mlir_tile.kernels import attention_varlen

    rng, failures = random.Random(61), []
    for trial in range(2 * CASES_BACKWARD):
        lengths_q, lengths_k, heads, kv_heads, d, causal, dtype = _case(rng, trial)
        cu_q, cu_k = _offsets(lengths_q), _offsets(lengths_k)
        q, grad = (torch.randn(sum(lengths_q), heads, d, device="cuda", dtype=dtype) for _ in range(2))
        k, v = (torch.randn(sum(lengths_k), kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
        inputs = [x.detach().requires_grad_() for x in (q, k, v)]
        o, _ = attention_varlen(*inputs, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal)
        ours = torch.autograd.grad(o, inputs, grad)
        for b, (len_q, len_k) in enumerate(zip(lengths_q, lengths_k)):
            rows_q, rows_k = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if not (len_q and len_k):
                continue
            seen = _visible(len_q, len_k, causal)
            parts = (q[rows_q], k[rows_k], v[rows_k], grad[rows_q], seen)
            exact, torchs = _sequence_gradients(*parts), _sequence_gradients(*parts, dtype)
            shifts = _rounded_o_shift(*parts, dtype)
            for name, got, theirs, truth, shift in zip("qkv", (g[r] for g, r in zip(ours, (rows_q, rows_k, rows_k))),
                                                       torchs, exact, shifts):
                error = float((got.float() - truth).abs().max())
                # (the floor at least 1e-2's: a one-key row's gradients are 0 in truth, ours rounding's)
                bound = 2 * float((theirs.float() - truth).abs().max()) + 2 * shift + 4 * torch.finfo(
                    dtype).eps * max(float(truth.abs().max()), 1e-2)
                if not error <= bound:
                    failures.append(((lengths_q, lengths_k, heads, kv_heads, d, causal, dtype), b, f"d{name}", error,
                                     bound))
        for name, got, lengths, offsets in (("q", ours[0], lengths_q, cu_q), ("k", ours[1], lengths_k, cu_k)):
            for b, length in enumerate(lengths):  # (a sequence with no query or no key: its gradients 0)
                other = lengths_k[b] if name == "q" else lengths_q[b]
                if length and not other and bool(got[int(offsets[b]):int(offsets[b + 1])].abs().max() != 0):
                    failures.append(((lengths_q, lengths_k), b, f"d{name} of a sequence with no partner"))
    assert not failures, failures[:10]


def test_packed_gradients_under_torch_compile_equal_eagers():
    from mlir_tile.kernels import attention_varlen

    q, k, v = (torch.randn(300, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = _offsets([100, 1, 199])

    def loss(q, k, v):
        o, lse = attention_varlen(q, k, v, cu, cu, 199, 199, causal=True)
        return (o.float() ** 2).sum() + lse.sum()
    eager, compiled = ([x.detach().requires_grad_() for x in (q, k, v)] for _ in range(2))
    torch.autograd.grad(loss(*eager), eager)
    expected = torch.autograd.grad(loss(*eager), eager)
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(*compiled), compiled)
    for a, b in zip(got, expected):  # (dQ's additions in another order: within bf16's rounding)
        assert float((a.float() - b.float()).abs().max()) <= 2e-2 * float(b.float().abs().max())


def test_slices_of_a_fused_projection_are_read_in_place_and_equal_copies_of_them():
    """q, k and v as slices of one fused [tokens, heads + 2 kv_heads, d] projection (rows 2 (heads + 2 kv_heads) d
    bytes apart: read in place by the 2-D maps, `packed.token_rows`) and q as a view off 16 bytes (copied): O, lse,
    dK and dV bitwise those of contiguous copies (the same kernels on the same values), dQ to the order of its
    additions."""
    from mlir_tile.kernels import attention_varlen

    heads, kv_heads, d, cu = 8, 2, 128, _offsets([100, 1, 0, 260])
    fused = torch.randn(361, heads + 2 * kv_heads, d, device="cuda", dtype=torch.bfloat16)
    q, k, v = fused.split([heads, kv_heads, kv_heads], 1)
    odd = torch.randn(361 * heads * d + 1, device="cuda", dtype=torch.bfloat16)[1:].view(361, heads, d)
    grad = torch.randn(361, heads, d, device="cuda", dtype=torch.bfloat16)

    def run(q, k, v):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        o, lse = attention_varlen(q, k, v, cu, cu, 260, 260, causal=True)
        return (o, lse, *torch.autograd.grad(o, (q, k, v), grad))
    assert not q.is_contiguous() and odd.data_ptr() % 16
    for inputs in ((q, k, v), (odd, k, v)):
        got, expected = run(*inputs), run(*(x.contiguous() for x in inputs))
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got, expected):
            if name == "dq":
                assert float((a.float() - b.float()).abs().max()) <= 1e-2 * float(b.float().abs().max()), name
            else:
                assert torch.equal(a, b), name


def test_the_packed_deterministic_mode_gives_the_same_gradients_bitwise_each_run():
    """Packed sequences (an empty one, one of one token, one of 1,300: 11 key blocks) under
    `torch.use_deterministic_algorithms(True)`: three runs give dQ, dK and dV bitwise equal."""
    from mlir_tile.kernels import attention_varlen

    lengths, cu = [700, 1, 0, 1300, 64], _offsets([700, 1, 0, 1300, 64])
    q, grad = (torch.randn(sum(lengths), 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(sum(lengths), 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def gradients():
        inputs = [x.detach().requires_grad_() for x in (q, k, v)]
        o, _ = attention_varlen(*inputs, cu, cu, 1300, 1300, causal=True)
        return torch.autograd.grad(o, inputs, grad)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [gradients() for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(before)
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0]))


def test_attention_on_token_major_views_and_longer_keys_runs_packed_and_matches_fp32():
    """`attention` on [batch, heads, seq, d] views of [batch, seq, heads, d] projections (read in place by the
    packed kernels) and on q shorter than k (a cache's last queries: causal aligned to the bottom right), d 64, 128
    and 256, grouped heads: O, the log-sum-exp and dq, dk, dv per batch entry within the bounds of the packed
    tests, O and the gradients laid out as the fakes say (`empty_outputs`): as [batch, seq, heads, d], or
    contiguous where heads-first k and v are read in place (`heads_as_sequences`: a head's queries, or a row a head)."""
    rng, failures = random.Random(71), []
    for trial in range(24):
        batch, heads, d = rng.randint(1, 3), rng.choice([2, 4, 8]), (64, 128, 256)[trial % 3]
        kv_heads, causal = rng.choice([x for x in (1, 2, heads) if heads % x == 0]), trial % 2 == 1
        seq_q = rng.choice([1, 17, 130, 300])
        seq_k = seq_q if trial % 4 < 2 else seq_q + rng.choice([0, 5, 200, 700])
        projections = [torch.randn(batch, seq, count, d, device="cuda", dtype=torch.bfloat16)
                       for seq, count in ((seq_q, heads), (seq_k, kv_heads), (seq_k, kv_heads))]
        q, k, v = (x.transpose(1, 2) if trial % 4 in (0, 3) else x.transpose(1, 2).contiguous() for x in projections)
        failures += [(trial, *failure) for failure in _packed_call_failures(q, k, v, causal)]
    assert not failures, failures[:10]


def test_grouped_heads_of_several_queries_against_a_heads_first_cache_match_fp32():
    """Contiguous heads-first q, k, v of grouped heads, q of 2-130 queries against 1-900 keys, causal or not (the
    packing `QueryHeadSequences`: each query head a sequence of its own, its K/V head's rows read in place; the
    backward on token rows): as the test above, 16 random cases (fewer keys than queries among them: rows that
    see none)."""
    rng, failures = random.Random(73), []
    for trial in range(16):
        batch, d, group = rng.randint(1, 3), (64, 128, 256)[trial % 3], rng.choice([2, 4, 8])
        kv_heads, seq_q = rng.choice([1, 2]), rng.choice([2, 5, 17, 64, 130])
        seq_k = rng.choice([1, 3]) if trial % 8 == 7 else seq_q + rng.choice([1, 40, 700])
        q = torch.randn(batch, kv_heads * group, seq_q, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, kv_heads, seq_k, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        failures += [(trial, *failure) for failure in _packed_call_failures(q, k, v, trial % 4 != 1)]
    assert not failures, failures[:10]


def _packed_call_failures(q, k, v, causal: bool, dtype=torch.bfloat16) -> list:
    """`attention` and its gradients on q, k, v [batch, heads, seq, d] against fp32 attention per batch entry
    (bounds of the packed tests), O's, the log-sum-exp's and the gradients' strides against the fakes': what
    failed."""
    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.launch import empty_gradients
    from mlir_tile.kernels.ops import kernels_on

    batch, heads, seq_q, d = q.shape
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    grad = torch.randn(batch, heads, seq_q, d, device="cuda", dtype=dtype)
    o, lse = attention(q, k, v, causal=causal)
    ours, failures = torch.autograd.grad(o, (q, k, v), grad), []
    expected = kernels_on(q.device).attention.empty_outputs(q, k, v) + empty_gradients(q, k, v)
    if [x.stride() for x in (o, lse, *ours)] != [x.stride() for x in expected]:
        failures.append(("strides", [x.stride() for x in (o, lse, *ours)]))
    seen = _visible(seq_q, k.shape[2], causal)
    for b in range(batch):
        parts = [x[b].transpose(0, 1) for x in (q, k, v, grad)]  # (one sequence: [seq, heads, d])
        exact, exact_lse = _masked_attention(*parts[:3], seen), _sequence_attention(*parts[:3], seen)[1]
        theirs = _masked_attention(*parts[:3], seen, dtype)  # (rows that see no key: O 0, log-sum-exp -inf)
        bound = 2 * float((theirs - exact).abs().max()) + 4 * torch.finfo(dtype).eps * float(exact.abs().max())
        finite = ~torch.isinf(exact_lse)
        lse_error = float((lse[b] - exact_lse)[finite].abs().max()) if finite.any() else 0.0
        lse_size = float(exact_lse[finite].abs().max()) if finite.any() else 0.0
        if float((o[b].transpose(0, 1).float() - exact).abs().max()) > bound or not torch.equal(
                torch.isinf(lse[b]), ~finite) or lse_error > 1e-3 * max(1.0, lse_size):
            failures.append((b, "forward"))
        truth, torchs = _sequence_gradients(*parts, seen), _sequence_gradients(*parts, seen, dtype)
        shifts = _rounded_o_shift(*parts, seen, dtype)
        for name, got, their, true, shift in zip("qkv", ours, torchs, truth, shifts):
            error = float((got[b].transpose(0, 1).float() - true).abs().max())
            if error > 2 * float((their.float() - true).abs().max()) + 2 * shift + 4 * torch.finfo(
                    dtype).eps * max(float(true.abs().max()), 1e-2):
                failures.append((b, f"d{name}", error))
    return failures


def test_repeated_token_major_calls_run_their_kept_step_on_new_values():
    """Eager `attention` calls without gradients as packed sequences (keys longer than the queries, q a view of
    [batch, seq, heads, d] or contiguous, k and v heads-first copies or views), three calls a case on new values:
    the second and third run the first's kept `TokenRowsStep`, each against fp32 attention; 16 random cases."""
    from mlir_tile.kernels import attention, ops
    from mlir_tile.kernels.flash.launch import TokenRowsStep, token_major

    rng, failures = random.Random(72), []
    for trial in range(16):
        batch, heads, d = rng.randint(1, 3), rng.choice([2, 4, 8]), (64, 128, 256)[trial % 3]
        kv_heads, causal = rng.choice([x for x in (1, 2, heads) if heads % x == 0]), trial % 2 == 1
        seq_q = rng.choice([1, 16, 130])
        seq_k = seq_q + rng.choice([0, 5, 700]) if trial % 4 else seq_q
        projections = [torch.empty(batch, seq, count, d, device="cuda", dtype=torch.float16)
                       for seq, count in ((seq_q, heads), (seq_k, kv_heads), (seq_k, kv_heads))]
        views = trial % 3 == 0
        for call in range(3):
            for x in projections:
                x.copy_(torch.randn(x.shape, device="cuda", dtype=x.dtype))
            q, k, v = (x.transpose(1, 2) if views else x.transpose(1, 2).contiguous() for x in projections)
            o, lse = attention(q, k, v, causal=causal)
            seen = _visible(seq_q, seq_k, causal)
            for b in range(batch):
                parts = [x[b].transpose(0, 1) for x in (q, k, v)]
                exact, exact_lse = _sequence_attention(*parts, seen)
                theirs = _sequence_attention(*parts, seen, torch.float16).float()
                bound = 2 * float((theirs - exact).abs().max()) + 4 * torch.finfo(torch.float16).eps * float(
                    exact.abs().max())
                if float((o[b].transpose(0, 1).float() - exact).abs().max()) > bound or float(
                        (lse[b] - exact_lse).abs().max()) > 1e-3 * max(1.0, float(exact_lse.abs().max())):
                    failures.append((trial, call, b))
        if token_major(q, k):
            key = ops._eager_key(q, k, v, extra=(causal, q.stride(), k.stride(), v.stride()))
            if not isinstance(ops._eager.get(key), TokenRowsStep):
                failures.append((trial, "no step kept"))
    assert not failures, failures[:10]


def test_token_major_attention_is_captured_in_a_cuda_graph_at_shapes_new_to_it():
    """`attention` with keys longer than the queries (the packed kernels' path) first called inside a capture,
    forward and backward: replayed on new values, O and the gradients equal the eager call's bit for bit (in
    torch's deterministic mode: else dQ's fp32 reductions land in any order; the H100 found the replay's outputs
    unequal without it); and an eager call right after the capture, before any replay, is right too (the
    sequences' offsets recorded under the capture were only written by a replay: they are not reused outside
    it)."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # (warn only: the fp32 reference's cuBLAS products)
    try:
        _capture_new_shapes()
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _capture_new_shapes():
    from mlir_tile.kernels import attention

    def inputs(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        return [torch.randn(2, heads, seq, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
                for heads, seq in ((8, 37), (2, 301), (2, 301), (8, 37))]

    def step(q, k, v, grad):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        o, _ = attention(q, k, v, causal=True)
        return [o, *torch.autograd.grad(o, (q, k, v), grad)]

    static = inputs(1)
    side = torch.cuda.Stream()  # (torch's warm-up on a side stream: autograd's own state, not our plans)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(*(torch.randn_like(x)[:, :, :5] for x in static))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step(*static)
    fresh = inputs(2)
    eager = step(*fresh)
    seen = _visible(37, 301, True)
    for b in range(2):
        parts = [x[b].transpose(0, 1) for x in fresh[:3]]
        exact, _ = _sequence_attention(*parts, seen)
        assert float((eager[0][b].transpose(0, 1).float() - exact).abs().max()) < 3e-2
    for into, value in zip(static, fresh):
        into.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    for name, got, expected in zip(("o", "dq", "dk", "dv"), outputs, eager):
        assert torch.equal(got, expected), (name, float((got.float() - expected.float()).abs().max()))
