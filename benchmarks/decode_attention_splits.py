"""A decode step's attention with its split-KV count forced, beside the rule's pick (`flash.packed.kv_splits`) and
SDPA, in CUDA graphs (the kernels' own time), on the GPU host:

    PYTHONPATH=python python3 benchmarks/decode_attention_splits.py

32 query / 8 KV heads of 128, bf16, one query a sequence, every sequence full; each count's O checked against the
rule's. A sample: a graph of CALLS calls replayed, us a call; the median of SAMPLES. docs/notes/serving-plan.md
(session 43) has a run."""
import torch
import torch.nn.functional as F
from torch_timing import graph_microseconds

from mlir_tile.kernels import attention_with_kvcache
from mlir_tile.kernels.flash import packed

HEADS, KV_HEADS, D, CALLS, SAMPLES = 32, 8, 128, 30, 7
SHAPES = [(1, 4096), (1, 16384), (4, 8192), (16, 4096), (32, 4096), (64, 4096)]
COUNTS = [None, 1, 2, 3, 4, 8, 16, 24, 32]  # (None: the rule's)


def forced(count):
    """`packed.kv_splits` giving `count` (None: the rule), the configurations picked afresh."""
    packed.kv_splits = _rule if count is None else (lambda ctas, tiles, slots: count)
    packed.packed_config.cache_clear()


def timed(call) -> float:
    return graph_microseconds(call, CALLS, SAMPLES)


_rule = packed.kv_splits
for batch, seq in SHAPES:
    q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, seq, KV_HEADS, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lengths = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    read = 2 * k.numel() * k.element_size()
    sdpa = timed(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        enable_gqa=True))
    row, reference = [f"b{batch} s{seq}: SDPA {sdpa:.1f} us {read / sdpa / 1e3:.0f} GB/s"], None
    for count in COUNTS:
        forced(count)
        o = attention_with_kvcache(q, k, v, lengths)[0]
        reference = o if reference is None else reference
        assert (o.float() - reference.float()).abs().max() < 2e-2, count
        us = timed(lambda: attention_with_kvcache(q, k, v, lengths))
        row.append(f"{'rule' if count is None else count}: {us:.1f} us {read / us / 1e3:.0f}")
    forced(None)
    print("; ".join(row), flush=True)
