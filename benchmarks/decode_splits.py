"""Decode-shaped products (M 1-128, B [N, K]), ours (`matmul`) beside cuBLAS (F.linear), on the GPU host:

    PYTHONPATH=python python3 benchmarks/decode_splits.py time    # wall us a call, and N 11008 forced to 2, 3 splits
    PYTHONPATH=python ncu --csv --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        python3 benchmarks/decode_splits.py                        # each kernel's time and HBM share (three calls)

`time`: 100 calls back to back a sample, the cases' samples in shuffled rounds, medians; the HBM share counts the
bytes the product must move against 3.0 TB/s. The forced splits (through a launcher whose `library_splits` is
replaced while its plans are made) say whether one-launch split-K should take the products whose tiles cover
the SMs once but unevenly (86 tiles of 132 at N 11008): docs/notes/operators.md, session 40."""
import random
import statistics
import sys

import torch
import torch.nn.functional as F
from mlir_tile.kernels import matmul, ops

SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (1, 11008, 4096), (16, 11008, 4096),
          (64, 4096, 11008), (16, 4096, 11008)]
calls = {}
for m, n, k in SHAPES:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
    for _ in range(3):
        matmul(x, w, b_layout="nk")
        F.linear(x, w)
    launcher = ops.kernels_on(x.device).matmul
    print("SHAPE", m, n, k, launcher.last_config, launcher.last_splits, flush=True)
    calls[(m, n, k, "ours")] = lambda x=x, w=w: matmul(x, w, b_layout="nk")
    calls[(m, n, k, "cuBLAS")] = lambda x=x, w=w: F.linear(x, w)
torch.cuda.synchronize()
if sys.argv[1:] == ["time"]:  # (and N 11008's products forced to 2 and 3 splits, through the launcher)
    from mlir_tile.kernels.gemm import launch as gemm_launch

    chosen = gemm_launch.library_splits
    for m in (1, 16, 64, 128):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(11008, 4096, device="cuda", dtype=torch.bfloat16) / 64
        for splits in (2, 3):
            forced = gemm_launch.Matmul(ops.kernels_on(x.device).matmul.library)
            gemm_launch.library_splits = lambda *arguments, splits=splits, **keywords: splits
            forced(x, w, b_major="nk")
            gemm_launch.library_splits = chosen
            assert forced.last_splits == splits
            calls[(m, 11008, 4096, f"x{splits}")] = lambda x=x, w=w, forced=forced: forced(x, w, b_major="nk")
            calls[(m, 11008, 4096, "cuBLAS")] = lambda x=x, w=w: F.linear(x, w)

    samples = {key: [] for key in calls}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for key, call in calls.items():
        for _ in range(300):
            call()
    for _ in range(15):
        order = list(calls)
        random.shuffle(order)
        for key in order:
            start.record()
            for _ in range(100):
                calls[key]()
            end.record()
            end.synchronize()
            samples[key].append(start.elapsed_time(end) * 10)
    for m, n, k in sorted({key[:3] for key in calls}):
        theirs = statistics.median(samples[(m, n, k, "cuBLAS")])
        for who in sorted(key[3] for key in calls if key[:3] == (m, n, k) and key[3] != "cuBLAS"):
            ours = statistics.median(samples[(m, n, k, who)])
            hbm = 2 * (m * k + n * k + m * n) / (ours * 1e-6) / 3.0e12
            print(f"{m}x{n}x{k} {who}: {ours:.2f} us, cuBLAS {theirs:.2f} us, speed vs cuBLAS {theirs / ours:.3f}, "
                  f"HBM share of 3.0 TB/s {hbm:.3f}", flush=True)
