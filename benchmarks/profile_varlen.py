"""Where packed attention's backward spends its time (issue 60's batch): the CUDA time of each kernel a call
launches (ours: the row passes and the main kernel; torch's fills and the token places), by torch.profiler.

    python3 benchmarks/profile_varlen.py
"""
import itertools

import torch

from ops import VARLEN, packed_lengths


def main() -> None:
    from mlir_tile.kernels import attention_varlen, ops

    count, shortest, longest, heads, d = VARLEN
    lengths = packed_lengths(count, shortest, longest)
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")
    q, k, v, grad = (torch.randn(sum(lengths), heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = attention_varlen(q, k, v, cu, cu, longest, longest, causal=True)
    backward = ops.kernels_on(q.device).attention_backward
    for _ in range(5):
        backward.packed(grad, q, k, v, o, lse, cu, cu, longest, causal=True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(20):
            backward.packed(grad, q, k, v, o, lse, cu, cu, longest, causal=True)
        torch.cuda.synchronize()
    print(profile.key_averages().table(sort_by="cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
