"""How `attention` lays q, k, v [batch, heads, seq, d] out as packed sequences (`flash.launch.packing_of`), on the
CPU: the packed kernels' contract (cu_seqlens, each sequence's queries against its keys, causal aligned to the
bottom right, O [tokens, heads, d], the log-sum-exp [heads, tokens]) written out here in torch, run on the rows,
offsets and mask a packing gives, and its outputs read back: SDPA's O and log-sum-exp on the tensors as given.
Skipped without torch."""
import math
import re

import pytest

torch = pytest.importorskip("torch", reason="the packings lay torch tensors out")


def _packed_attention(q, k, v, cu_q, cu_k, causal: bool):
    """The packed kernels' results by their contract: sequence b's queries rows cu_q[b]:cu_q[b + 1] of q [total_q,
    heads, d] against its keys rows cu_k[b]:cu_k[b + 1] of k and v [total_k, kv_heads, d], query i of len_q seeing
    keys up to i + len_k - len_q where causal (a row seeing none: O 0, log-sum-exp -inf); (O [total_q, heads, d],
    log-sum-exp [heads, total_q])."""
    heads, group = q.shape[1], q.shape[1] // k.shape[1]
    o, lse = torch.zeros_like(q), torch.full((heads, q.shape[0]), -math.inf, dtype=torch.float64)
    for b in range(cu_q.shape[0] - 1):
        queries, keys = range(int(cu_q[b]), int(cu_q[b + 1])), range(int(cu_k[b]), int(cu_k[b + 1]))
        for h in range(heads):
            scores = q[queries.start:queries.stop, h] @ k[keys.start:keys.stop, h // group].T / math.sqrt(q.shape[2])
            if causal:
                shift = len(keys) - len(queries)
                seen = torch.arange(len(keys))[None, :] <= torch.arange(len(queries))[:, None] + shift
                scores = scores.masked_fill(~seen, -math.inf)
            lse[h, queries.start:queries.stop] = torch.logsumexp(scores, -1)
            weights = torch.nan_to_num(torch.softmax(scores, -1))
            o[queries.start:queries.stop, h] = weights @ v[keys.start:keys.stop, h // group]
    return o, lse


@pytest.mark.parametrize("heads, kv_heads, seq_q, seq_k, causal, form", [
    (4, 4, 5, 9, True, "HeadSequences"), (4, 4, 5, 9, False, "HeadSequences"),  # a head's queries
    (8, 2, 1, 7, True, "HeadSequences"), (8, 2, 1, 7, False, "HeadSequences"),  # a decode step: a row a head
    (8, 2, 3, 7, True, "QueryHeadSequences"), (8, 2, 3, 7, False, "QueryHeadSequences"),  # grouped heads' queries
    (6, 3, 4, 2, True, "QueryHeadSequences"),  # (fewer keys than queries: rows that see none)
    (8, 2, 3, 7, True, "TokenRows"), (4, 4, 9, 5, True, "HeadSequences")])  # q a view of token rows; fewer keys
def test_a_packing_runs_the_packed_contract_into_sdpas_results(heads, kv_heads, seq_q, seq_k, causal, form,
                                                               monkeypatch):
    from mlir_tile.kernels.flash.launch import packing_of

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # (a CPU build has no CUDA)

    generator = torch.Generator().manual_seed(heads + seq_q)
    q = torch.randn(2, heads, seq_q, 16, dtype=torch.float64, generator=generator)
    if form == "TokenRows":  # (q [batch, seq, heads, d] seen heads-first: not read as sequences of a head)
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    k, v = (torch.randn(2, kv_heads, seq_k, 16, dtype=torch.float64, generator=generator) for _ in range(2))
    packing = packing_of(q, k, v)
    assert type(packing).__name__ == form
    cu_q, cu_k = packing.offsets(q.device)
    o, lse = packing.outputs(*_packed_attention(*(packing.rows(x) for x in (q, k, v)), cu_q, cu_k,
                                                 packing.causal(causal)))
    group = heads // kv_heads
    wide_k, wide_v = (x.repeat_interleave(group, 1) for x in (k, v))
    scores = q @ wide_k.transpose(-1, -2) / math.sqrt(16)
    if causal:  # (bottom right: query i sees keys up to i + seq_k - seq_q)
        seen = torch.arange(seq_k)[None, :] <= torch.arange(seq_q)[:, None] + seq_k - seq_q
        scores = scores.masked_fill(~seen, -math.inf)
    want_lse = torch.logsumexp(scores, -1)
    want = torch.nan_to_num(torch.softmax(scores, -1)) @ wide_v
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    assert torch.allclose(o, want, atol=1e-12) and torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    assert torch.allclose(lse[~torch.isinf(lse)], want_lse[~torch.isinf(want_lse)], atol=1e-12)


def test_a_variants_fakes_give_the_dense_kernels_layouts_for_a_token_major_q():
    """A variant runs q, k, v made contiguous on the dense kernels (never packed): its operator's fakes give O
    and the gradients contiguous, as that path writes them, for q a [batch, heads, seq, d] view of [batch, seq,
    heads, d] too (which plain `attention` runs packed, its O then a view of [batch, seq, heads, d])."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mlir_tile.kernels import attention
    from mlir_tile.kernels.flash.masks import sliding_window

    with FakeTensorMode():
        q = torch.empty(2, 64, 8, 128, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        k, v = (torch.empty(2, 2, 64, 128, dtype=torch.bfloat16).requires_grad_() for _ in range(2))
        o, lse = attention(q, k, v, variant=sliding_window(15))
        gradients = torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
    assert o.is_contiguous() and lse.is_contiguous() and lse.shape == (2, 8, 64)
    assert all(x.is_contiguous() and x.shape == y.shape for x, y in zip(gradients, (q, k, v)))


@pytest.mark.parametrize("kv_heads, seq_q, token_major_q, in_place", [
    (8, 1, False, (True,) * 3), (2, 3, False, (True,) * 3), (2, 3, True, (True, False, False))])
def test_a_kept_step_gives_its_plan_each_calls_rows_in_place_or_as_copies_of_them(kv_heads, seq_q, token_major_q,
                                                                                  in_place, monkeypatch):
    """`TokenRowsStep` on new q, k, v of the first call's shapes and strides: its plan reads q's, k's and v's own
    memory where the packing reads them in place (heads-first tensors as sequences of a head; q a view of
    [batch, seq, heads, d]), else copies holding the token rows' values (heads-first k and v beside such a q)."""
    import ctypes

    from mlir_tile.kernels.flash import launch

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # (a CPU build has no CUDA)
    monkeypatch.setattr("mlir_tile.runtime.torch_stream", lambda tensor: 0)
    read = []

    class Plan:  # (what the launch would read at each address, copied while the call holds its tensors)
        def run(self, stream, *addresses_and_offsets):
            for address, like in zip(addresses_and_offsets[:3], (q, k, v)):
                rows = packing.rows(like)
                memory = (ctypes.c_char * (rows.numel() * rows.element_size())).from_address(address)
                read.append((address, torch.frombuffer(bytearray(memory), dtype=like.dtype).view(rows.shape)))
            return torch.zeros(packing.rows(q).shape), torch.zeros(1, q.numel() // q.shape[-1])

    def tensors(seed):
        generator = torch.Generator().manual_seed(seed)
        q = torch.randn(2, seq_q, 8, 16, generator=generator).transpose(1, 2) if token_major_q else torch.randn(
            2, 8, seq_q, 16, generator=generator)
        return q, *(torch.randn(2, kv_heads, 5, 16, generator=generator) for _ in range(2))
    q, k, v = tensors(0)
    packing = launch.packing_of(q, k, v)
    step = launch.TokenRowsStep(Plan(), packing)
    for seed in range(3):
        q, k, v = tensors(seed)
        read.clear()
        step(q, k, v)
        for (address, values), x, kept in zip(read, (q, k, v), in_place):
            assert (address == x.data_ptr()) == kept
            assert torch.equal(values, packing.rows(x).contiguous())


@pytest.mark.parametrize("causal", [False, True])
def test_used_keys_run_the_packed_contract_into_each_sequences_attention_on_its_first_keys(causal):
    """`kvcache.used_key_offsets` (attention_varlen's seqused_k over contiguous keys): the packed kernels'
    contract on its offsets gives each sequence's queries attention on the first seqused_k[b] of its keys
    (clamped to [0, its keys]; causal aligned to the last of them), written out here per sequence; ragged lengths
    with empty sequences, none used, more used than held and a negative count."""
    from mlir_tile.kernels.kvcache import used_key_offsets

    generator = torch.Generator().manual_seed(7)
    lengths_q, lengths_k, used = [3, 0, 5, 1, 4], [6, 2, 5, 0, 9], [4, 2, 9, 0, -3]
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(x).cumsum(0).tolist()], dtype=torch.int32)
                  for x in (lengths_q, lengths_k))
    q = torch.randn(sum(lengths_q), 4, 16, dtype=torch.float64, generator=generator)
    k, v = (torch.randn(sum(lengths_k), 2, 16, dtype=torch.float64, generator=generator) for _ in range(2))
    offsets = used_key_offsets(cu_q, cu_k, torch.tensor(used, dtype=torch.int32))
    assert all(x.dtype == torch.int32 and x.shape == (2 * len(used) + 1,) for x in offsets)
    o, lse = _packed_attention(q, k, v, *offsets, causal)
    for b, (len_q, count) in enumerate(zip(lengths_q, used)):
        count = min(max(count, 0), lengths_k[b])
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b]) + count)
        wide_k, wide_v = (x[keys].repeat_interleave(2, 1).transpose(0, 1) for x in (k, v))
        scores = q[rows].transpose(0, 1) @ wide_k.transpose(-1, -2) / 4
        if causal:
            scores = scores.masked_fill(torch.arange(count)[None, :] > torch.arange(len_q)[:, None] + count - len_q,
                                        -math.inf)
        want = torch.nan_to_num(torch.softmax(scores, -1)) @ wide_v
        assert torch.allclose(o[rows].transpose(0, 1), want, atol=1e-12)
        assert torch.equal(torch.isinf(lse[:, rows]), torch.isinf(torch.logsumexp(scores, -1)))


@pytest.mark.parametrize("change, message", [
    (dict(seqused_k=None), "seqused_k int32 [batch] = [2]"),
    (dict(seqused_k="int64"), "seqused_k int32 [batch] = [2]"),
    (dict(cu_seqlens_k="short"), "cu_seqlens_k int32 [batch + 1] = [3] beside seqused_k"),
    (dict(block_table="table"), "a paged cache (block_table) takes cu_seqlens_k=None"),
    (dict(cu_seqlens_q="float"), "cu_seqlens_q int32 [batch + 1]"),
    (dict(operands=(3.0,)), "operands are a variant's")])
def test_what_a_varlen_call_over_a_cache_does_not_take_is_a_one_line_value_error(change, message):
    from mlir_tile.kernels.ops import attention_varlen

    q, k = torch.zeros(4, 2, 64, dtype=torch.bfloat16), torch.zeros(6, 2, 64, dtype=torch.bfloat16)
    arguments = dict(cu_seqlens_q=torch.tensor([0, 1, 4], dtype=torch.int32),
                     cu_seqlens_k=torch.tensor([0, 3, 6], dtype=torch.int32),
                     seqused_k=torch.tensor([2, 3], dtype=torch.int32), block_table=None)
    values = {"int64": torch.tensor([2, 3]), "short": torch.tensor([0, 6], dtype=torch.int32),
              "table": torch.zeros(2, 1, dtype=torch.int32), "float": torch.tensor([0.0, 1.0, 4.0])}
    arguments.update({name: values.get(value, value) for name, value in change.items()})
    if change == dict(seqused_k=None):
        arguments["block_table"] = values["table"]
        arguments["cu_seqlens_k"] = None
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        attention_varlen(q, k, k, arguments["cu_seqlens_q"], arguments["cu_seqlens_k"], 3, 3,
                         seqused_k=arguments["seqused_k"], block_table=arguments["block_table"],
                         operands=arguments.get("operands", ()))
    assert "\n" not in str(raised.value)


def test_a_varlen_call_over_a_cache_traces_to_the_cache_operators_fakes():
    """Under torch's fake tensors (as torch.compile traces a model), attention_varlen over a paged pool and over
    contiguous keys with seqused_k reach the cache operators' fakes (`attention_paged`, `attention_cached`, the
    used keys' offsets by torch's ops): O [total_q, heads, d] in q's dtype, the log-sum-exp [heads, total_q]."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mlir_tile.kernels.ops import attention_varlen

    with FakeTensorMode():
        q = torch.empty(10, 8, 128, dtype=torch.bfloat16)
        pool, keys = torch.empty(6, 64, 2, 128, dtype=torch.bfloat16), torch.empty(20, 2, 128, dtype=torch.bfloat16)
        cu, used = torch.empty(4, dtype=torch.int32), torch.empty(3, dtype=torch.int32)
        table = torch.empty(3, 2, dtype=torch.int32)
        outputs = [attention_varlen(q, pool, pool, cu, None, 7, 0, causal=True, seqused_k=used, block_table=table),
                   attention_varlen(q, keys, keys, cu, cu, 7, 9, causal=True, seqused_k=used)]
    for o, lse in outputs:
        assert (o.shape, o.dtype, lse.shape, lse.dtype) == ((10, 8, 128), torch.bfloat16, (8, 10), torch.float32)
