"""Host time a call: each operator as a model calls it, beside the torch call it replaces and the launcher beneath
it (what `torch.library.custom_op` adds), on shapes whose kernels run in a few microseconds, so that the host is
what sets the pace. In one process on the GPU host.

    python3 benchmarks/host_time.py OUT     # OUT/host_time.json: microseconds of host time a call, per case
    python3 benchmarks/host_time.py OUT --profile  # and where an operator call's host time goes (cProfile)
    python3 benchmarks/host_time.py OUT --case decode  # the cases whose names hold "decode" alone
    python3 benchmarks/host_time.py OUT --trace    # and torch.profiler's table of each call (ops, driver calls)

A figure: CALLS calls issued back to back (the GPU is idle between them, not the host), the wall time until the
last returned (no synchronization) over CALLS; the median of ROUNDS rounds, the calls of a case taking turns.
Also each case's step captured in a CUDA graph (torch.cuda.graph) and replayed, the host time a replay.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

CALLS, ROUNDS = 300, 9


def cases():
    from mlir_tile.kernels import attention, matmul, ops

    x, w = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, 4096, device="cuda",
                                                                                     dtype=torch.bfloat16) / 64
    bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    launcher = ops.kernels_on(x.device).matmul
    yield "linear 16x4096x4096", {"operator": lambda: matmul(x, w, b_layout="nk"),
                                  "launcher": lambda: launcher(x, w, b_major="nk"), "torch": lambda: F.linear(x, w)}
    yield "silu(linear + bias) 16x4096x4096", {
        "operator": lambda: matmul(x, w, b_layout="nk", bias=bias, activation="silu"),
        "torch": lambda: F.silu(F.linear(x, w, bias))}
    xs, ws = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) / 32 for shape in ((256, 1024), (1024, 1024)))
    yield "linear 256x1024x1024 (Hopper's path, one launch)", {
        "operator": lambda: matmul(xs, ws, b_layout="nk"), "launcher": lambda: launcher(xs, ws, b_major="nk"),
        "torch": lambda: F.linear(xs, ws)}
    if torch.cuda.get_device_capability() == (9, 0):
        from mlir_tile.kernels import scaled_mm

        x8, w8 = (t.to(torch.float8_e4m3fn) for t in (x, w))
        one = torch.ones(1, device="cuda")
        yield "scaled_mm 16x4096x4096 (fp8)", {
            "operator": lambda: scaled_mm(x8, w8, one, one),
            "torch": lambda: torch._scaled_mm(x8, w8.t(), one, one, out_dtype=torch.bfloat16)}
        yield from moe_cases(x, w)
    q = torch.randn(1, 8, 128, 128, device="cuda", dtype=torch.bfloat16)
    yield "attention 1x8x128x128", {"operator": lambda: attention(q, q, q),
                                    "torch": lambda: F.scaled_dot_product_attention(q, q, q)}
    last, cache = torch.randn(1, 8, 16, 128, device="cuda", dtype=torch.bfloat16), torch.randn(
        1, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    yield "attention 1x8x16x128 on 1024 keys (a heads-first cache, read in place)", {
        "operator": lambda: attention(last, cache, cache),
        "torch": lambda: F.scaled_dot_product_attention(last, cache, cache)}
    if torch.cuda.get_device_capability() == (9, 0):  # (a decode step, 32/8 heads: contiguous and paged caches)
        from mlir_tile.kernels import attention_with_kvcache

        step = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k_cache, v_cache = (torch.randn(4, 1024, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lengths = torch.full((4,), 1000, dtype=torch.int32, device="cuda")
        table = torch.arange(64, dtype=torch.int32, device="cuda").view(4, 16)
        pools = [x.view(64, 64, 8, 128) for x in (k_cache, v_cache)]
        heads_first = [x.transpose(1, 2) for x in (step, k_cache, v_cache)]
        cached = [x.contiguous() for x in heads_first]  # (Hugging Face's static cache: [batch, kv_heads, seq, d])
        yield "decode 4x32 heads on 1000 of 1024 keys (kv 8)", {
            "operator": lambda: attention_with_kvcache(step, k_cache, v_cache, lengths),
            "paged": lambda: attention_with_kvcache(step, *pools, lengths, block_table=table),
            "heads-first attention on 1024": lambda: attention(*cached),
            "torch": lambda: F.scaled_dot_product_attention(*heads_first, enable_gqa=True)}


def moe_cases(x, w):
    """The MoE operators on small shapes (Hopper's): fused SwiGLU, grouped GEMMs masked and contiguous (8 experts)."""
    from mlir_tile.kernels import grouped_mm, swiglu_mm, swiglu_weights

    gate, up = w[:1024], w[1024:2048]
    fused = swiglu_weights(gate, up)
    yield "swiglu_mm 16x4096x(2x1024)", {"operator": lambda: swiglu_mm(x, fused),
                                        "torch": lambda: F.silu(F.linear(x, gate)) * F.linear(x, up)}
    experts = w[:8 * 512, :1024].reshape(8, 512, 1024).contiguous()
    tokens = torch.randn(8, 128, 1024, device="cuda", dtype=torch.bfloat16)
    counts = torch.full((8,), 100, device="cuda", dtype=torch.int32)
    yield "grouped_mm masked 8x128x512x1024", {"operator": lambda: grouped_mm(tokens, experts, counts),
                                              "torch": lambda: torch.bmm(tokens, experts.transpose(1, 2))}
    flat, offsets = tokens.view(1024, 1024), torch.arange(1, 9, device="cuda", dtype=torch.int32) * 100
    calls = {"operator": lambda: grouped_mm(flat, experts, offsets=offsets)}
    if hasattr(torch, "_grouped_mm"):
        calls["torch"] = lambda: torch._grouped_mm(flat, experts.transpose(1, 2), offs=offsets)
    yield "grouped_mm contiguous 8 experts x 100 of 1024 tokens x 512x1024", calls


def host_microseconds(call) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / CALLS * 1e6


def replayed(call):
    """A replay of `call` captured in a CUDA graph (after a warm-up outside it)."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


def profile(calls: dict) -> str:
    """cProfile of CALLS calls of each of our calls (all but torch's and the graphs'): the functions taking the most
    time."""
    import cProfile
    import io
    import pstats

    report = io.StringIO()
    for who in calls:
        if who != "torch" and "graph" not in who:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: [calls[who]() for _ in range(CALLS)])
            report.write(f"--- {who}\n")
            pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(18)
            pstats.Stats(profiler, stream=report).sort_stats("cumulative").print_stats(30)
    return report.getvalue()


def traced(calls: dict) -> str:
    """torch.profiler's table of 50 calls of each of our calls (CPU and CUDA: torch's ops, the driver's launches
    and copies, by their own host time), where cProfile sees only the Python."""
    from torch.profiler import ProfilerActivity, profile

    tables = []
    for who, call in calls.items():
        if who != "torch" and "graph" not in who:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
                for _ in range(50):
                    call()
                torch.cuda.synchronize()
            tables.append(f"--- {who}\n" + profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=16,
                                                                         max_name_column_width=48))
    return "\n".join(tables)


def main(out: Path, profiled: bool = False, case: str = "", trace: bool = False) -> int:
    results = []
    for name, calls in cases():
        if case not in name:
            continue
        calls = {**calls, **{f"{who} in a graph": replayed(call) for who, call in list(calls.items())
                             if who in ("operator", "torch")}}
        samples = {who: [] for who in calls}
        for _ in range(ROUNDS):
            for who, call in calls.items():
                samples[who].append(host_microseconds(call))
        row = {"case": name, "host us a call": {who: round(statistics.median(s), 1) for who, s in samples.items()}}
        print(json.dumps(row), flush=True)
        if profiled:
            print(profile(calls), flush=True)
        if trace:
            print(traced(calls), flush=True)
        results.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_time.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                                    "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder host_time.json goes to")
    parser.add_argument("--profile", action="store_true", help="and where each of our calls' host time goes")
    parser.add_argument("--case", default="", help="only the cases whose names hold this")
    parser.add_argument("--trace", action="store_true", help="and torch.profiler's table of each of our calls")
    arguments = parser.parse_args()
    sys.exit(main(arguments.out, arguments.profile, arguments.case, arguments.trace))
