"""`attention_with_kvcache` on the GPU (Hopper's path), as a serving engine calls it: random batches of cache
lengths (0, 1 and full included), new keys appended in place (some past the cache's end: dropped), GQA, d 64,
128 and 256, both dtypes and masks, against fp32 attention over each sequence's keys written out here, within
twice the error torch's own 16-bit SDPA makes; the caches after the append against a copy written row by row;
fp8 caches, contiguous and paged, against fp32 attention of their values; a cache that is a slice of a longer
buffer; a CUDA graph replayed with other lengths; the one-line errors.
Skipped without torch or an sm_90 GPU (the reason shown)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the KV cache's attention runs on Hopper's path (sm_90) only")]
from test_attention_varlen_gpu import _sequence_attention, _visible  # noqa: E402
from test_kernels_ops_hopper_gpu import FP8_DESCALES, head_magnitudes, quantized  # noqa: E402

CASES = 60


def _appended(cache, new, lengths):
    """A copy of `cache` with new[b, j] written at row lengths[b] + j where that row exists."""
    cache = cache.clone()
    for b, length in enumerate(lengths):
        for j in range(new.shape[1]):
            if length + j < cache.shape[1]:
                cache[b, length + j] = new[b, j]
    return cache


def _case(rng: random.Random, trial: int) -> dict:
    seq_cache = rng.choice([1, 64, 127, 300, rng.randint(1, 1200)])
    batch, heads = rng.randint(1, 4), rng.choice([1, 2, 4, 8])
    return {"batch": batch, "seq_cache": seq_cache, "seq_q": rng.choice([1, 1, 2, 5, 16, 70]),
            "heads": heads, "kv_heads": rng.choice([x for x in (1, 2, heads) if heads % x == 0]),
            "d": (64, 128, 256)[trial % 3], "dtype": (torch.float16, torch.bfloat16)[trial % 2],
            "causal": rng.random() < 0.7, "new": trial % 4 != 0,
            "lengths": [rng.choice([0, 1, seq_cache, rng.randint(0, seq_cache)]) for _ in range(batch)]}


def _check(o, lse, q, keys: list, values: list, c: dict) -> list:
    """What differs between (o, lse) and fp32 attention of q over each sequence's `keys` and `values`."""
    failures, seq_q, dtype = [], c["seq_q"], c["dtype"]
    for b in range(c["batch"]):
        seen = _visible(seq_q, keys[b].shape[0], c["causal"])
        sees = seen.any(1)
        if not sees.all() and (o[b][~sees].abs().max() != 0 or not torch.isneginf(lse[b][:, ~sees]).all()):
            failures.append((b, "rows seeing no key"))
        if not sees.any():
            continue
        parts = (q[b], keys[b], values[b])
        exact, exact_lse = _sequence_attention(*parts, seen)
        theirs = _sequence_attention(*parts, seen, dtype).float()
        bound = 2 * float((theirs - exact)[sees].abs().max()) + 4 * torch.finfo(dtype).eps * float(exact.abs().max())
        if float((o[b].float() - exact)[sees].abs().max()) > bound or float(
                (lse[b][:, sees] - exact_lse[:, sees]).abs().max()) > 1e-3 * max(1.0, float(exact_lse.abs().max())):
            failures.append((b, "attention"))
    return failures


def test_queries_against_random_caches_match_fp32_attention_and_the_appends_are_row_by_row():
    from mlir_tile.kernels import attention_with_kvcache

    rng, failures = random.Random(61), []
    for trial in range(CASES):
        c = _case(rng, trial)
        batch, seq_q, dtype = c["batch"], c["seq_q"], c["dtype"]
        q = torch.randn(batch, seq_q, c["heads"], c["d"], device="cuda", dtype=dtype)
        k_cache, v_cache = (torch.randn(batch, c["seq_cache"], c["kv_heads"], c["d"], device="cuda", dtype=dtype)
                            for _ in range(2))
        k_new, v_new = ((torch.randn(batch, seq_q, c["kv_heads"], c["d"], device="cuda", dtype=dtype)
                         for _ in range(2)) if c["new"] else (None, None))
        lengths = torch.tensor(c["lengths"], dtype=torch.int32, device="cuda")
        expected_k, expected_v = ((_appended(k_cache, k_new, c["lengths"]), _appended(v_cache, v_new, c["lengths"]))
                                  if c["new"] else (k_cache.clone(), v_cache.clone()))
        o, lse = attention_with_kvcache(q, k_cache, v_cache, lengths, k_new, v_new, causal=c["causal"])
        if not (torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)):
            failures.append((trial, c, "cache"))
        if not torch.equal(lengths.cpu(), torch.tensor(c["lengths"], dtype=torch.int32)):
            failures.append((trial, c, "cache_seqlens changed"))
        seen_keys = [min(length + (seq_q if c["new"] else 0), c["seq_cache"]) for length in c["lengths"]]
        failures += [(trial, c, *failure) for failure in _check(
            o, lse, q, [expected_k[b, :n] for b, n in enumerate(seen_keys)],
            [expected_v[b, :n] for b, n in enumerate(seen_keys)], c)]
    assert not failures, failures[:5]


def test_a_cache_sliced_from_a_longer_buffer_is_read_and_written_where_it_lies():
    """k_cache and v_cache the first 200 of 256 rows an entry (a pool whose entries are longer than the call's
    window): the keys read in place, rows 200 on of the buffer never written."""
    from mlir_tile.kernels import attention_with_kvcache

    buffers = [torch.randn(3, 256, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    before = [x.clone() for x in buffers]
    k_cache, v_cache = (x[:, :200] for x in buffers)
    q, k_new, v_new = (torch.randn(3, 4, count, 128, device="cuda", dtype=torch.bfloat16) for count in (8, 2, 2))
    lengths = [0, 150, 198]
    contiguous = [x.contiguous() for x in (k_cache, v_cache)]
    o, _ = attention_with_kvcache(q, k_cache, v_cache, torch.tensor(lengths, dtype=torch.int32, device="cuda"),
                                  k_new, v_new)
    expected, _ = attention_with_kvcache(q, *contiguous, torch.tensor(lengths, dtype=torch.int32, device="cuda"),
                                         k_new, v_new)
    assert torch.equal(o, expected)
    assert all(torch.equal(x[:, 200:], y[:, 200:]) for x, y in zip(buffers, before))
    assert torch.equal(k_cache, contiguous[0]) and torch.equal(v_cache, contiguous[1])


def test_a_cuda_graph_replays_a_decode_step_with_other_lengths_and_tokens():
    """One captured decode step (append one token, attend) replayed after new lengths and new token values are
    copied into its inputs: the outputs and the caches equal an eager step's on copies."""
    from mlir_tile.kernels import attention_with_kvcache

    def inputs(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        return [torch.randn(*shape, device="cuda", dtype=torch.float16, generator=generator) for shape in (
            (4, 1, 8, 128), (4, 512, 2, 128), (4, 512, 2, 128), (4, 1, 2, 128), (4, 1, 2, 128))]

    static = inputs(1)
    lengths = torch.tensor([5, 0, 300, 511], dtype=torch.int32, device="cuda")
    attention_with_kvcache(*[x.clone() for x in static[:3]], lengths, *static[3:])  # (warm-up)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = attention_with_kvcache(*static[:3], lengths, *static[3:])
    for step, new_lengths in enumerate(([1, 2, 3, 4], [511, 512, 0, 77])):
        fresh = inputs(2 + step)
        eager = [x.clone() for x in fresh]
        expected = attention_with_kvcache(*eager[:3], torch.tensor(new_lengths, dtype=torch.int32, device="cuda"),
                                          *eager[3:])
        for into, value in zip(static, fresh):
            into.copy_(value)
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(o, expected[0]) and torch.equal(lse, expected[1]), new_lengths
        assert torch.equal(static[1], eager[1]) and torch.equal(static[2], eager[2]), new_lengths


def test_repeated_decode_steps_run_their_kept_launch_on_new_lengths_and_values():
    """A decode step's second and third calls on tensors of the first's shapes, strides and dtypes run the launch
    the first kept (`kvcache._EagerStep`: no checks, no planning): 40 random cases, contiguous caches (some
    sliced from longer buffers) and paged ones (shuffled pages of 16-64 tokens), lengths as a tensor or an int,
    new values and lengths each call (negative and past the cache among them: clamped), each call against fp32
    attention over the keys it should see; one step kept a key."""
    from mlir_tile.kernels import attention_with_kvcache, kvcache

    rng, failures = random.Random(63), []
    for trial in range(40):
        c = {**_case(rng, trial), "new": False}
        batch, seq_q, heads, kv_heads, d, dtype = (c[x] for x in ("batch", "seq_q", "heads", "kv_heads", "d", "dtype"))
        paged, page = trial % 2 == 1, 16 * rng.randint(1, 4)
        seq_cache = page * -(-c["seq_cache"] // page) if paged else c["seq_cache"]
        pages = seq_cache // page
        sliced = not paged and trial % 4 == 0  # (entries of a longer buffer: rows past seq_cache never read)
        buffers = [torch.empty(batch, seq_cache + 16 * sliced, kv_heads, d, device="cuda", dtype=dtype) for _ in range(2)]
        caches, q = [x[:, :seq_cache] for x in buffers], torch.empty(batch, seq_q, heads, d, device="cuda", dtype=dtype)
        table = torch.randperm(batch * pages, device="cuda").int().view(batch, pages) if paged else None
        as_int = trial % 3 == 0
        kvcache._steps.clear()  # (so that this case's step is the one its first call keeps)
        for call in range(3):
            lengths = [rng.choice([0, 1, seq_cache, rng.randint(0, seq_cache)] + [-3, seq_cache + 5] * (call == 2))
                       for _ in range(batch)]
            lengths = lengths[:1] * batch if as_int else lengths
            for x in (q, *caches):
                x.copy_(torch.randn(x.shape, device="cuda", dtype=dtype))
            given = caches
            if paged:  # (page table[b, i] holds keys i x page on of sequence b)
                given = [torch.empty(batch * pages, page, kv_heads, d, device="cuda", dtype=dtype) for _ in range(2)]
                for pool, cache in zip(given, caches):
                    pool[table.flatten().long()] = cache.reshape(batch * pages, page, kv_heads, d)
            argument = lengths[0] if as_int else torch.tensor(lengths, dtype=torch.int32, device="cuda")
            o, lse = attention_with_kvcache(q, *given, argument, causal=c["causal"], block_table=table)
            if call == 0:  # (the step kept by the call's key: a contiguous cache's may run as pages)
                key = set(kvcache._steps)
                kept = len(kvcache._steps)
            seen = [min(max(n, 0), seq_cache) for n in lengths]
            failures += [(trial, call, paged, *failure) for failure in _check(
                o, lse, q, [caches[0][b, :n] for b, n in enumerate(seen)], [caches[1][b, :n] for b, n in enumerate(seen)],
                {**c, "seq_q": seq_q})]
        if len(key) != 1 or not key <= set(kvcache._steps) or len(kvcache._steps) != kept:
            failures.append((trial, "the first call's step not kept, or another kept"))
    assert not failures, failures[:5]


def test_a_decode_step_launches_its_kernels_alone():
    """A kept decode step on a contiguous cache of a multiple of 64 rows (run on the paged kernels, each entry a page:
    `kvcache._entries_as_pages`) and on a paged one launches the split kernel and its combine and nothing else
    (no torch op for the lengths or the offsets: the kernels clamp the lengths), lengths as a tensor or an int;
    its O is, within bf16's rounding, the same keys' through the contiguous form (a cache of 3,000 rows, which is
    not a multiple of 64)."""
    from torch.profiler import ProfilerActivity, profile

    from mlir_tile.kernels import attention_with_kvcache

    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    caches = [torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    pools = [x.view(64, 64, 8, 128) for x in caches]
    table = torch.arange(64, dtype=torch.int32, device="cuda").view(1, 64)
    for lengths in (torch.tensor([3000], dtype=torch.int32, device="cuda"), 3000):
        for given, block_table in ((caches, None), (pools, table)):
            for _ in range(2):  # (the second runs the kept step)
                attention_with_kvcache(q, *given, lengths, block_table=block_table)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as profiled:
                o, _ = attention_with_kvcache(q, *given, lengths, block_table=block_table)
                torch.cuda.synchronize()
            kernels = [e.name for e in profiled.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            assert len(kernels) == 2 and all(name.startswith("attention") for name in kernels), kernels
    unpaged = attention_with_kvcache(q, *(x[:, :3000].contiguous() for x in caches), 3000)[0]  # (3,000 rows)
    assert (o.float() - unpaged.float()).abs().max() < 2e-2


def test_empty_batches_queries_caches_and_negative_lengths():
    from mlir_tile.kernels import attention_with_kvcache

    def call(batch, seq_q, seq_cache, new=0):
        q = torch.randn(batch, seq_q, 4, 64, device="cuda", dtype=torch.float16)
        cache = [torch.randn(batch, seq_cache, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2)]
        added = [torch.randn(batch, new, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2)] if new else []
        return attention_with_kvcache(q, *cache, 3, *added)

    o, lse = call(0, 1, 16)
    assert o.shape == (0, 1, 4, 64) and lse.shape == (0, 4, 1)
    o, lse = call(2, 0, 16)
    assert o.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)
    for new in (0, 1):  # (no cache rows: nothing fits, every row sees no key)
        o, lse = call(2, 3, 0, new)
        assert not o.any() and torch.isneginf(lse).all()
    q, cache = torch.randn(1, 1, 2, 64, device="cuda", dtype=torch.float16), torch.randn(1, 8, 2, 64, device="cuda",
                                                                                         dtype=torch.float16)
    none = cache[:, :0]  # (no new tokens: nothing written)
    assert torch.equal(attention_with_kvcache(q, cache, cache.clone(), 3, none, none)[0],
                       attention_with_kvcache(q, cache, cache.clone(), 3)[0])
    q, cache, added = (torch.randn(1, 1, 2, 64, device="cuda", dtype=torch.float16),
                       torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.float16),
                       torch.randn(1, 1, 2, 64, device="cuda", dtype=torch.float16))
    before = cache.clone()
    o, _ = attention_with_kvcache(q, cache, cache.clone(), -5, added, added)  # (a negative length: 0)
    assert torch.equal(cache[:, 0], added[:, 0]) and torch.equal(cache[:, 1:], before[:, 1:])
    assert torch.allclose(o.float(), added.float(), atol=1e-3)  # (the one key it sees: its value)


def test_an_fp8_cache_matches_fp32_attention_of_its_values_within_e4m3s_rounding_of_p():
    """fp8 caches (q, the caches and the appended keys and values float8_e4m3fn, vLLM's and FlashAttention-3's
    form) with the descales in turn one a tensor, that expanded to [batch, kv_heads] (strides 0) and one a
    (batch, K/V head) over inputs whose heads' magnitudes differ up to 64-fold, contiguous and paged in pages of
    16, 64 and 128 (shuffled), decode steps (GQA packed, split-KV over 8k keys) and prefills of 70 queries
    against the cache, lengths 0 and 1 included, causal or not: O (bf16) within (2^-4 + 2 e) max |v| + 2^-7 max
    |O| of fp32 attention of the values the fp8 inputs stand for (`attention`'s fp8 bound: P rounded to e4m3, e
    the scores' error), the log-sum-exp within 1e-3 + e, rows that see no key O 0; the appended rows the new
    keys' bytes."""
    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.kernels.flash.sm90_checks import FP8_ACCUMULATION

    rng, failures = random.Random(45), []
    for trial in range(24):
        batch, seq_cache, page = rng.randint(1, 4), rng.choice([256, 1024, 8192]), (0, 16, 64, 128)[trial % 4]
        heads, kv_heads = rng.choice([(32, 8), (8, 8), (16, 2)])
        seq_q, causal, new = rng.choice([1, 1, 4, 70]), rng.random() < 0.5, trial % 3 != 0
        form, group = FP8_DESCALES[trial // 2 % 3], heads // kv_heads
        lengths = [rng.choice([0, 1, seq_cache - seq_q, rng.randint(0, seq_cache - seq_q)]) for _ in range(batch)]
        magnitudes = head_magnitudes(batch, heads, group, 2, rng, 1.5)
        (q,), q_descale, (q_values,) = quantized([2 * torch.randn(batch, seq_q, heads, 128, device="cuda")
                                                  * magnitudes], group, form, 2)
        caches, descales, values = [], [], []
        for spread in (1.5, 3):  # (K's, then V's: the cache and its new rows under one set of descales)
            magnitudes = head_magnitudes(batch, kv_heads, 1, 2, rng, spread)
            fp8, descale, dequantized = quantized([2 * torch.randn(batch, seq_cache, kv_heads, 128, device="cuda")
                                                   * magnitudes,
                                                   2 * torch.randn(batch, seq_q, kv_heads, 128, device="cuda")
                                                   * magnitudes], 1, form, 2)
            caches.append(fp8)
            descales.append(descale)
            values.append(_appended(dequantized[0], dequantized[1], lengths) if new else dequantized[0])
        (k_cache, k_new), (v_cache, v_new) = caches
        appended = _appended(k_cache.view(torch.uint8), k_new.view(torch.uint8), lengths)
        table, k_arg, v_arg = None, k_cache, v_cache
        if page:  # (each sequence's pages a random choice of the pool's; written as bytes)
            per = seq_cache // page
            table = torch.randperm(batch * per, device="cuda", dtype=torch.int32).view(batch, per)
            k_arg, v_arg = (torch.empty(batch * per, page, kv_heads, 128, device="cuda", dtype=torch.float8_e4m3fn)
                            for _ in range(2))
            for pool, cache in ((k_arg, k_cache), (v_arg, v_cache)):
                pool.view(torch.uint8)[table.long().flatten()] = cache.view(torch.uint8).reshape(
                    batch * per, page, kv_heads, 128)
        o, lse = attention_with_kvcache(q, k_arg, v_arg, torch.tensor(lengths, dtype=torch.int32, device="cuda"),
                                        k_new if new else None, v_new if new else None, causal=causal,
                                        block_table=table, descale_q=q_descale, descale_k=descales[0],
                                        descale_v=descales[1])
        if new and not page and not torch.equal(k_cache.view(torch.uint8), appended):
            failures.append((trial, "appended"))
        for b, length in enumerate(lengths):
            keys, got = min(length + (seq_q if new else 0), seq_cache), o[b].transpose(0, 1).float()
            if not keys:  # (no key: O 0)
                if bool(got.any()):
                    failures.append((trial, b, "a sequence without keys"))
                continue
            qf, kf, vf = (x.transpose(0, 1) for x in (q_values[b], *(
                x[b, :keys].repeat_interleave(heads // kv_heads, 1) for x in values)))
            scores = (qf @ kf.transpose(-1, -2) / 128 ** 0.5).masked_fill(~_visible(seq_q, keys, causal),
                                                                            float("-inf"))
            sees = scores.isfinite().any(-1)
            expected = torch.nan_to_num(scores.softmax(-1)) @ vf
            # (each head's error against its own bound: their magnitudes differ)
            e = FP8_ACCUMULATION * (qf.abs() @ kf.abs().transpose(-1, -2)).amax((-1, -2)) / 128 ** 0.5
            bound = (2 ** -4 + 2 * e) * vf.abs().amax((-1, -2)) + 2 ** -7 * expected.abs().amax((-1, -2))
            error = (got - expected).abs().amax((-1, -2))
            lse_error = (lse[b] - scores.logsumexp(-1)).where(sees, 0).abs().amax(-1)
            if o.dtype != torch.bfloat16 or bool((error > bound).any() or (lse_error > 1e-3 + e).any()
                                                 or got[~sees].any()):
                failures.append((trial, b, page, seq_q, keys, causal, form, float((error / bound).max()),
                                 float((lse_error - e).max())))
    assert not failures, failures[:6]


def test_what_it_does_not_take_is_a_one_line_value_error():
    from mlir_tile.kernels import attention_with_kvcache

    q = torch.randn(2, 1, 4, 64, device="cuda", dtype=torch.float16)
    cache = torch.randn(2, 32, 2, 64, device="cuda", dtype=torch.float16)
    lengths = torch.zeros(2, dtype=torch.int32, device="cuda")
    for arguments, message in (
            ((q[0], cache, cache, lengths), "4-D tensors"),
            ((q, cache, cache[:, :, :1], lengths), "k_cache and v_cache"),
            ((q, cache, cache, lengths.long()), "cache_seqlens an int or an int32"),
            ((q, cache, cache, lengths[:1]), r"int32 \[batch\] = \[2\]"),
            ((q, cache, cache, lengths, cache[:, :1]), "k_new and v_new both or neither"),
            ((q, cache, cache, lengths, cache[:, :1].half(), cache[:, :1, :1]), "k_new and v_new both"),
            ((q.float(), cache.float(), cache.float(), lengths), "float16 or all bfloat16"),
            ((q.bfloat16(), cache, cache, lengths, cache[:, :1], cache[:, :1]), "float16 or all bfloat16"),
            ((q[..., :32], cache[..., :32], cache[..., :32], lengths), "head dim"),
            ((q[:, :, :3], cache, cache, lengths, cache[:, :1], cache[:, :1]), "kv_heads dividing heads"),
            ((q.to(torch.float8_e4m3fn), cache, cache, lengths), "take descale_q, descale_k and descale_v")):
        before = cache.clone()
        with pytest.raises(ValueError, match=message) as raised:
            attention_with_kvcache(*arguments)
        assert "\n" not in str(raised.value) and torch.equal(cache, before)  # (refused before any write)
    one, fp8 = torch.ones(1, device="cuda"), [x.to(torch.float8_e4m3fn) for x in (q, cache)]
    with pytest.raises(ValueError, match=r"head dim 128 \(torch.float8_e4m3fn\)"):
        attention_with_kvcache(fp8[0], fp8[1], fp8[1], lengths, descale_q=one, descale_k=one, descale_v=one)
    q, cache = (torch.zeros(2, s, h, 128, device="cuda", dtype=torch.float8_e4m3fn) for s, h in ((1, 4), (32, 2)))
    heads = torch.ones(2, 2, device="cuda")
    for descales in ((heads, heads, one), (heads.T, heads.T, heads.T), (heads[:1],) * 3, (heads.double(),) * 3):
        with pytest.raises(ValueError, match=r"descales") as raised:  # (mixed forms, not contiguous, not [2, 2])
            attention_with_kvcache(q, cache, cache, lengths, descale_q=descales[0], descale_k=descales[1],
                                   descale_v=descales[2])
        assert "\n" not in str(raised.value)
