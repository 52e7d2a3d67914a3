"""A decode step's attention (one query a sequence, Llama-3-8B's 32 query / 8 KV heads, d 128, bf16), ours
(`attention_with_kvcache`: a cache [batch, seq, 8, 128], and paged in shuffled pages of 16 and 64 tokens; and the
same caches in fp8 e4m3 with per-tensor descales, contiguous and in pages of 16 and 64, half the bytes) beside torch's
SDPA (`enable_gqa`, its fused kernels) on the same keys as [batch, 8, seq, 128], on the GPU host:

    PYTHONPATH=python python3 benchmarks/decode_attention.py
    PYTHONPATH=python python3 benchmarks/decode_attention.py --timeline   # where a step's time goes, kernel by kernel

Each call reads the caches' keys and values once: GB/s are those bytes over the median time of 50 calls back to
back (samples in shuffled rounds, 10 rounds), against HBM's peak (H100 3,350 GB/s, H200 4,800); issued eagerly
(the host's time a call included) and as one CUDA graph of the 50 (an engine's decode step: the kernels' own). Every sequence
is at its full length (no append: the read alone). FlashAttention-4's Hopper decode (no split-KV on sm_90) is in
../shared/notes/anchors.md, measured in its own process, so not beside these numbers."""
import random
import statistics

import torch
import torch.nn.functional as F

from mlir_tile.kernels import attention_with_kvcache

HEADS, KV_HEADS, D = 32, 8, 128
SHAPES = [(1, 4096), (1, 16384), (16, 4096), (64, 4096), (64, 16384)]
CALLS = 50


def cases():
    """(name, call, bytes read) of each shape's calls."""
    for batch, seq in SHAPES:
        q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, seq, KV_HEADS, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lengths = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
        read = 2 * k.numel() * k.element_size()
        yield f"b{batch} s{seq} ours", lambda q=q, k=k, v=v, lengths=lengths: attention_with_kvcache(
            q, k, v, lengths), read
        for page in (16, 64):
            pages = batch * seq // page
            order = torch.randperm(pages, device="cuda")
            pools = [x.reshape(pages, page, KV_HEADS, D)[order.argsort()] for x in (k, v)]  # (page i at order[i])
            table = order.view(batch, seq // page).int()
            yield f"b{batch} s{seq} ours paged {page}", lambda q=q, pools=pools, table=table, lengths=lengths: (
                attention_with_kvcache(q, *pools, lengths, block_table=table)), read
        yield from fp8_cases(batch, seq, q, k, v, lengths)
        q_t, k_t, v_t = (x.transpose(1, 2) for x in (q, k, v))
        yield f"b{batch} s{seq} SDPA", lambda q=q_t, k=k_t, v=v_t: F.scaled_dot_product_attention(
            q, k, v, enable_gqa=True), read


def fp8_cases(batch: int, seq: int, q, k, v, lengths):
    """The shape's fp8 calls: q, k and v in e4m3 with per-tensor descales, the cache contiguous and in shuffled
    pages of 16 and 64."""
    scaled = []
    for x in (q, k, v):
        descale = (x.abs().max().float() / 448).reshape(1)
        scaled.append(((x / descale).to(torch.float8_e4m3fn), descale))
    (q8, sq), (k8, sk), (v8, sv) = scaled
    descales = dict(descale_q=sq, descale_k=sk, descale_v=sv)
    read = 2 * k8.numel()
    yield f"b{batch} s{seq} ours fp8", lambda: attention_with_kvcache(q8, k8, v8, lengths, **descales), read
    for page in (16, 64):
        pages = batch * seq // page
        order = torch.randperm(pages, device="cuda")
        pools = [x.view(torch.uint8).reshape(pages, page, KV_HEADS, D)[order.argsort()].view(torch.float8_e4m3fn)
                 for x in (k8, v8)]
        table = order.view(batch, seq // page).int()
        yield f"b{batch} s{seq} ours fp8 paged {page}", lambda pools=pools, table=table: attention_with_kvcache(
            q8, *pools, lengths, block_table=table, **descales), read


def main():
    calls = {name: (call, read) for name, call, read in cases()}
    reference = {}
    for name, (call, _) in calls.items():  # (warm-up; ours paged and not give the same O, SDPA's within bf16)
        o = call()
        o = o[0] if isinstance(o, tuple) else o.transpose(1, 2)
        shape = name.split(" ours")[0].split(" SDPA")[0]
        if shape in reference:
            assert (o.float() - reference[shape]).abs().max() < 2e-2, name
        else:
            reference[shape] = o.float()
    runs = {**{(name, "eager"): lambda call=call: [call() for _ in range(CALLS)] for name, (call, _) in calls.items()},
            **{(name, "graph"): captured(call) for name, (call, _) in calls.items()}}
    samples = {run: [] for run in runs}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        order = list(runs)
        random.shuffle(order)
        for run in order:
            start.record()
            runs[run]()
            end.record()
            end.synchronize()
            samples[run].append(start.elapsed_time(end) / CALLS * 1e3)
    print(torch.cuda.get_device_name(), flush=True)
    for name, (_, read) in calls.items():
        us = {way: statistics.median(samples[name, way]) for way in ("eager", "graph")}
        print(f"{name}: " + ", ".join(f"{way} {t:.1f} us {read / t / 1e3:.0f} GB/s" for way, t in us.items()),
              flush=True)


def captured(call):
    """The replay of a CUDA graph of CALLS calls of `call`."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            call()
    return graph.replay


def timeline() -> None:
    """Each case's CUDA graph of CALLS calls replayed once under torch.profiler: a step's time, each kernel's
    median duration and the median gap between one kernel's end and the next's start (launch and prologue
    costs that a graph does not hide: split-KV's combine, and each step's first kernel after the last)."""
    from torch.profiler import ProfilerActivity, profile

    for name, call, _ in cases():
        call()
        replay = captured(call)
        replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as profiled:
            replay()
            torch.cuda.synchronize()
        kernels = sorted((e for e in profiled.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        durations = {}
        for e in kernels:
            durations.setdefault(e.name[:48], []).append(e.time_range.elapsed_us())
        gaps = [after.time_range.start - before.time_range.end for before, after in zip(kernels, kernels[1:])]
        step = (kernels[-1].time_range.end - kernels[0].time_range.start) / CALLS
        print(f"{name}: {step:.1f} us a step, gaps {statistics.median(gaps):.2f} us; " + ", ".join(
            f"{kernel} {statistics.median(d):.2f} us" for kernel, d in durations.items()), flush=True)


if __name__ == "__main__":
    import sys

    if "--timeline" in sys.argv[1:]:
        timeline()
    else:
        main()
