"""`attention_with_kvcache` over a paged cache on the GPU (Hopper's path, `sm90_varlen.Pages`), as vLLM-style
engines keep one: pools [pages, page_size, kv_heads, d] and a block table. Random cases (page sizes 16 to 256
and 48, ragged lengths with 0, 1 and full, GQA (packed and not), d 64, 128 and 256, both dtypes and masks, new tokens appended
across page boundaries, shuffled tables whose unused entries hold garbage, and pages outside the pool) against
fp32 attention over each sequence's keys gathered here page by page, within twice the error torch's own 16-bit
SDPA makes, and bit for bit against the same call on the gathered contiguous cache; the pools after the append
against a copy written row by row; a CUDA graph replayed with other lengths and tables; the one-line errors.
Skipped without torch or an sm_90 GPU (the reason shown)."""
import random

import pytest

torch = pytest.importorskip("torch", reason="the kernels' torch operators need torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the paged KV cache's attention runs on Hopper's path (sm_90) only")]
from test_attention_kvcache_gpu import _check  # noqa: E402

CASES = 80
GARBAGE = (-1, -7, 2 ** 31 - 1, 1 << 20)  # (table entries past a sequence's pages, or pages outside the pool)


def _table(rng: random.Random, batch: int, per_sequence: int, pages: int, bad_page: float) -> list:
    """Each sequence's pages: distinct pool pages, shuffled (so that no two sequences write one row), some
    entries (with probability `bad_page`) outside the pool."""
    order = rng.sample(range(pages), batch * per_sequence)
    return [[rng.choice(GARBAGE) if rng.random() < bad_page else order[b * per_sequence + i]
             for i in range(per_sequence)] for b in range(batch)]


def _gathered(pool, table: list, lengths: list) -> list:
    """Each sequence's first lengths[b] keys of `pool`, page by page (a page outside the pool: zeros)."""
    pages, page_size = pool.shape[:2]
    rows = []
    for b, length in enumerate(lengths):
        keys = [pool[page] if 0 <= page < pages else torch.zeros_like(pool[0]) for page in table[b]]
        rows.append(torch.cat(keys)[:length])
    return rows


def _appended(pool, new, table: list, lengths: list):
    """A copy of `pool` with new[b, j] written at sequence b's key lengths[b] + j where its page lies in the pool."""
    pool, (pages, page_size) = pool.clone(), pool.shape[:2]
    for b, length in enumerate(lengths):
        for j in range(new.shape[1]):
            key = length + j
            if key < len(table[b]) * page_size and 0 <= table[b][key // page_size] < pages:
                pool[table[b][key // page_size], key % page_size] = new[b, j]
    return pool


def _case(rng: random.Random, trial: int) -> dict:
    page_size = rng.choice([16, 32, 64, 128, 256, 48])
    per_sequence = rng.choice([1, 2, 5, rng.randint(1, 2048 // page_size)])
    batch, heads = rng.randint(1, 4), rng.choice([1, 2, 4, 8, 6])  # (groups of 2 to 8 packed, 3 and 6 not)
    capacity = per_sequence * page_size
    return {"batch": batch, "page_size": page_size, "per_sequence": per_sequence,
            "pages": batch * per_sequence + rng.randint(0, 3), "seq_q": rng.choice([1, 1, 2, 5, 16, 70]),
            "heads": heads, "kv_heads": rng.choice([x for x in (1, 2, heads) if heads % x == 0]),
            # (bf16 but every eighth case: the f16 twins differ in their conversions only, and each kernel a
            # case takes is compiled from PTX by the driver on its first launch, seconds each)
            "d": (64, 128, 256)[trial % 3], "dtype": torch.float16 if trial % 8 == 7 else torch.bfloat16,
            "causal": rng.random() < 0.7, "new": trial % 4 != 0, "bad_page": rng.choice([0, 0, 0.2]),
            "lengths": [rng.choice([0, 1, capacity, rng.randint(0, capacity)]) for _ in range(batch)]}


def test_queries_against_random_paged_caches_match_fp32_attention_and_the_appends_are_row_by_row():
    from mlir_tile.kernels import attention_with_kvcache

    rng, failures = random.Random(62), []
    for trial in range(CASES):
        c = _case(rng, trial)
        batch, seq_q, dtype, page_size = c["batch"], c["seq_q"], c["dtype"], c["page_size"]
        table = _table(rng, batch, c["per_sequence"], c["pages"], c["bad_page"])
        q = torch.randn(batch, seq_q, c["heads"], c["d"], device="cuda", dtype=dtype)
        k_pool, v_pool = (torch.randn(c["pages"], page_size, c["kv_heads"], c["d"], device="cuda", dtype=dtype)
                          for _ in range(2))
        k_new, v_new = ((torch.randn(batch, seq_q, c["kv_heads"], c["d"], device="cuda", dtype=dtype)
                         for _ in range(2)) if c["new"] else (None, None))
        expected_k, expected_v = ((_appended(k_pool, k_new, table, c["lengths"]),
                                   _appended(v_pool, v_new, table, c["lengths"])) if c["new"]
                                  else (k_pool.clone(), v_pool.clone()))
        capacity = c["per_sequence"] * page_size
        seen_keys = [min(length + (seq_q if c["new"] else 0), capacity) for length in c["lengths"]]
        keys, values = _gathered(expected_k, table, seen_keys), _gathered(expected_v, table, seen_keys)
        o, lse = attention_with_kvcache(q, k_pool, v_pool, torch.tensor(c["lengths"], dtype=torch.int32,
                                                                        device="cuda"),
                                        k_new, v_new, causal=c["causal"],
                                        block_table=torch.tensor(table, dtype=torch.int32, device="cuda"))
        if not (torch.equal(k_pool, expected_k) and torch.equal(v_pool, expected_v)):
            failures.append((trial, c, "pools"))
        failures += [(trial, c, *failure) for failure in _check(o, lse, q, keys, values, c)]
        contiguous = [torch.zeros(batch, capacity, c["kv_heads"], c["d"], device="cuda", dtype=dtype) for _ in "kv"]
        for b in range(batch):
            contiguous[0][b, :seen_keys[b]], contiguous[1][b, :seen_keys[b]] = keys[b], values[b]
        unpaged = attention_with_kvcache(q, *contiguous, torch.tensor(seen_keys, dtype=torch.int32, device="cuda"),
                                         causal=c["causal"])
        if not (torch.equal(o, unpaged[0]) and torch.equal(lse, unpaged[1])):
            failures.append((trial, c, "not the unpaged call's bits"))
    assert not failures, failures[:5]


def test_varlen_queries_over_used_keys_and_paged_pools_match_fp32_attention():
    """`attention_varlen` over a KV cache (vLLM's mixed batch: prefill chunks and decode steps of ragged lengths in
    one call): each sequence's queries (0, 1 or several) against the first seqused_k[b] of its keys (0, 1, all,
    more than held, negative), contiguous (cu_seqlens_k, `kvcache.used_key_offsets`: at most the sequence's keys)
    and paged (shuffled tables, pages of 16 to 256: at most its pages' keys), each within twice the error of
    torch's own 16-bit SDPA, rows that see no key O 0 and log-sum-exp -inf; 24 random cases."""
    from mlir_tile.kernels import attention_varlen
    from test_attention_varlen_gpu import _sequence_attention, _visible

    rng, failures = random.Random(63), []
    for trial in range(24):
        batch, heads, d, dtype = rng.randint(1, 5), rng.choice([2, 4, 8]), (64, 128, 256)[trial % 3], torch.bfloat16
        kv_heads, causal, page_size = rng.choice([1, 2]), trial % 4 != 3, rng.choice([16, 64, 256])
        per_sequence = rng.randint(1, 4)
        held = [rng.randint(0, per_sequence * page_size) for _ in range(batch)]
        used = [rng.choice([0, 1, n, n + 5, -2, rng.randint(0, n)]) for n in held]
        lengths_q = [rng.choice([0, 1, 1, 7, 130]) for _ in range(batch)]
        cu_q, cu_k = ([0, *(sum(x[:i + 1]) for i in range(batch))] for x in (lengths_q, held))
        q = torch.randn(cu_q[-1], heads, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(cu_k[-1], kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
        order = rng.sample(range(batch * per_sequence), batch * per_sequence) if trial % 2 else list(
            range(batch * per_sequence))  # (shuffled pages, or each sequence's in order)
        table = [order[b * per_sequence:(b + 1) * per_sequence] for b in range(batch)]
        pools = [torch.zeros(batch * per_sequence, page_size, kv_heads, d, device="cuda", dtype=dtype) for _ in "kv"]
        for b in range(batch):
            for pool, x in zip(pools, (k, v)):
                pool.view(-1, kv_heads, d)[[page * page_size + i for page in table[b] for i in range(page_size)]
                                           [:held[b]]] = x[cu_k[b]:cu_k[b + 1]]
        as_int = lambda values: torch.tensor(values, dtype=torch.int32, device="cuda")  # noqa: E731
        with torch.no_grad():
            o, lse = attention_varlen(q, k, v, as_int(cu_q), as_int(cu_k), max(lengths_q), max(held), causal=causal,
                                      seqused_k=as_int(used))
            paged = attention_varlen(q, *pools, as_int(cu_q), None, max(lengths_q), 0, causal=causal,
                                     seqused_k=as_int(used), block_table=as_int(table))
        for b in range(batch):
            rows = slice(cu_q[b], cu_q[b + 1])
            if not lengths_q[b]:
                continue
            # (contiguous: the sequence's own keys, at most those it holds; paged: its pages' first keys, at most
            # its table row's, the pool's zeros past those written)
            pages = [pool.view(-1, kv_heads, d)[[page * page_size + i for page in table[b] for i in range(page_size)]]
                     for pool in pools]
            for form, (o_of, lse_of), keys, values in (
                    ("contiguous", (o, lse), k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]), ("paged", paged, *pages)):
                count = min(max(used[b], 0), keys.shape[0])
                seen = _visible(lengths_q[b], count, causal)
                sees = seen.any(1)
                parts = (q[rows], keys[:count], values[:count])
                exact, exact_lse = _sequence_attention(*parts, seen) if sees.any() else (None, None)
                theirs = _sequence_attention(*parts, seen, dtype).float() if sees.any() else None
                o_b, lse_b = o_of[rows].float(), lse_of[:, rows]
                if not sees.all() and (o_b[~sees].abs().max() != 0 or not torch.isneginf(lse_b[:, ~sees]).all()):
                    failures.append((trial, b, form, "rows seeing no key"))
                if not sees.any():
                    continue
                bound = 2 * float((theirs - exact)[sees].abs().max()) + 4 * torch.finfo(dtype).eps * float(
                    exact.abs().max())
                if float((o_b - exact)[sees].abs().max()) > bound or float(
                        (lse_b[:, sees] - exact_lse[:, sees]).abs().max()) > 1e-3 * max(1.0, float(
                        exact_lse.abs().max())):
                    failures.append((trial, b, form, "attention", lengths_q[b], count, causal))
    assert not failures, failures[:5]


def test_a_decode_step_over_long_caches_is_split_among_many_ctas_and_combined():
    """Few CTAs (2 sequences x 2 K/V heads) over caches of up to 9,000 keys: split-KV (`packed.kv_splits`: 32
    splits of 3 key tiles, most of the short sequence's empty) and its combine, paged and not, against fp32
    attention; the two calls give the same bits."""
    from mlir_tile.kernels import attention_with_kvcache
    from mlir_tile.kernels.flash.packed import packed_config

    assert packed_config(128, True, "bf16", 1, 8, 64, max_seqlen_k=9024, kv_items=4, sms=132)[2] == 32
    for lengths in ([0, 9000], [1, 4097], [9024, 129]):
        q = torch.randn(2, 1, 16, 128, device="cuda", dtype=torch.bfloat16)
        k_cache, v_cache = (torch.randn(2, 9024, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        o, lse = attention_with_kvcache(q, k_cache, v_cache, seqlens)
        table = torch.arange(2 * 141, device="cuda", dtype=torch.int32).view(2, 141)
        paged = attention_with_kvcache(q, *(x.view(2 * 141, 64, 2, 128) for x in (k_cache, v_cache)), seqlens,
                                       block_table=table)
        assert torch.equal(o, paged[0]) and torch.equal(lse, paged[1]), lengths
        c = {"batch": 2, "seq_q": 1, "dtype": torch.bfloat16, "causal": True}
        failures = _check(o, lse, q, [k_cache[b, :n] for b, n in enumerate(lengths)],
                          [v_cache[b, :n] for b, n in enumerate(lengths)], c)
        assert not failures, (lengths, failures)


def test_a_cuda_graph_replays_a_paged_decode_step_with_other_lengths_and_tables():
    """One captured decode step (append one token into its page, attend) replayed after new lengths, tables and
    token values are copied into its inputs: the outputs and the pools equal an eager step's on copies."""
    from mlir_tile.kernels import attention_with_kvcache

    def inputs(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        return [torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator) for shape in (
            (4, 1, 8, 128), (40, 64, 2, 128), (40, 64, 2, 128), (4, 1, 2, 128), (4, 1, 2, 128))]

    def tables(seed):
        return torch.randperm(40, generator=torch.Generator().manual_seed(seed))[:32].view(4, 8).int().cuda()

    static, table = inputs(1), tables(1)
    lengths = torch.tensor([5, 0, 300, 511], dtype=torch.int32, device="cuda")
    attention_with_kvcache(*[x.clone() for x in static[:3]], lengths, *static[3:], block_table=table)  # (warm-up)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = attention_with_kvcache(*static[:3], lengths, *static[3:], block_table=table)
    for step, new_lengths in enumerate(([1, 64, 65, 128], [511, 512, 0, 77])):
        fresh, new_table = inputs(2 + step), tables(2 + step)
        eager = [x.clone() for x in fresh]
        expected = attention_with_kvcache(*eager[:3], torch.tensor(new_lengths, dtype=torch.int32, device="cuda"),
                                          *eager[3:], block_table=new_table)
        for into, value in zip(static + [table], fresh + [new_table]):
            into.copy_(value)
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(o, expected[0]) and torch.equal(lse, expected[1]), new_lengths
        assert torch.equal(static[1], eager[1]) and torch.equal(static[2], eager[2]), new_lengths


def test_what_a_paged_call_does_not_take_is_a_one_line_value_error():
    from mlir_tile.kernels import attention_with_kvcache

    q = torch.randn(2, 1, 4, 64, device="cuda", dtype=torch.float16)
    pool = torch.randn(6, 32, 2, 64, device="cuda", dtype=torch.float16)
    lengths, table = torch.zeros(2, dtype=torch.int32, device="cuda"), torch.zeros(2, 3, dtype=torch.int32,
                                                                                  device="cuda")
    apart = torch.randn(6, 64, 2, 64, device="cuda", dtype=torch.float16)[:, :32]  # (pages 64 rows apart)
    for arguments, keywords, message in (
            ((q, pool, pool, lengths), {"block_table": table.long()}, "block_table int32"),
            ((q, pool, pool, lengths), {"block_table": table[:1]}, "block_table int32"),
            ((q, pool[:, :24], pool[:, :24], lengths), {"block_table": table}, "multiple of 16"),
            ((q, apart, apart, lengths, pool[:2, :1], pool[:2, :1]), {"block_table": table}, "never copied"),
            ((q, pool, pool[:, :, :1], lengths), {"block_table": table}, "alike"),
            ((q, pool, pool, lengths, pool[:2, :1], pool[:2, :1].float()), {"block_table": table}, "k_new")):
        before = pool.clone()
        with pytest.raises(ValueError, match=message) as raised:
            attention_with_kvcache(*arguments, **keywords)
        assert "\n" not in str(raised.value) and torch.equal(pool, before)  # (refused before any write)
