"""mlir_tile.kernels' torch operators as a model calls them, against what it would call instead, in one process
on the GPU (no MLIR there: the kernels the wheel ships, or `python -m mlir_tile.kernels.ship` into the package).

    python3 benchmarks/ops.py OUT        # OUT/ops.json: per case the medians, the ratios, the SM clock and power
    python3 benchmarks/ops.py OUT small  # OUT/ops_small.json: products below 4096x4096x4096 and decode shapes:
                                         # wall time a call, host time a call, the time a call in a CUDA
                                         # graph (the GPU's alone), the share of HBM bandwidth
    python3 benchmarks/ops.py OUT train  # OUT/ops_train.json: a linear layer's training step, ours and torch's
    python3 benchmarks/ops.py OUT backward  # OUT/ops_backward.json: attention's backward beside cuDNN's and FA2's
    MLIR_TILE_BASELINE_KERNELS=DIR python3 benchmarks/ops.py OUT backward  # and beside the backward of DIR's
                                         # kernels (DIR/sm_90/*.ptx: an earlier tree's shipped folder)
    python3 benchmarks/ops.py OUT varlen    # OUT/ops_varlen.json: packed sequences' attention (the issue's batch)

Cases: the plain product through the operator (`torch.ops.mlir_tile.matmul`) and through the launcher beneath it
(`gemm.launch.Matmul`, what benchmarks/gemm.py times), against cuBLAS (F.linear / torch.matmul); linear + bias + GELU
fused by the ready-made epilogue (without the compiler: the shipped `epilogues.selectable`) against our product
without it and torch's unfused F.linear then F.gelu, and linear + bias + SiLU against F.linear then F.silu;
attention against cuDNN's and FlashAttention-2's SDPA. `small`: `matmul` against F.linear where a call's host time
counts (decode shapes M <= 128, 512-2048 rows): each call's wall time in the loop, its host time (`host_time.py`'s
measure: calls without synchronization), and for the decode shapes the bytes a product must move over the time,
against the bandwidth of a device-to-device copy measured in the same process (the ceiling). The ratios: `torch_timing.sustained_interleaved` (every call launched back to back
with no synchronization or pause, as a training loop issues them, rounds of the calls taking turns, medians);
the SM clock and the power: nvidia-smi over those rounds.
"""
import datetime
import itertools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_timing import flash_attention_4, sustained_interleaved

LINEAR = [(8192, 4096, 4096), (8192, 11008, 4096), (4096, 4096, 11008), (2048, 2048, 2048)]  # M, N, K
ATTENTION = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (8, 32, 2048, 64, True)]  # batch, heads, seq, d


def linear_cases():
    from mlir_tile.kernels import matmul, ops

    for m, n, k in LINEAR:
        x, w = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) / 8 for shape in ((m, k), (n, k)))
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        launcher = ops.kernels_on(x.device).matmul
        yield f"linear {m}x{n}x{k}", 2 * m * n * k, {
            "operator": lambda: matmul(x, w, b_layout="nk"),
            "launcher": lambda: launcher(x, w, b_major="nk"),
            "cuBLAS": lambda: F.linear(x, w)}
        yield f"gelu(linear + bias) {m}x{n}x{k}", 2 * m * n * k, {
            "operator": lambda: matmul(x, w, b_layout="nk", bias=b, activation="gelu_tanh"),
            "ours, no epilogue": lambda: matmul(x, w, b_layout="nk"),
            "cuBLAS+torch": lambda: F.gelu(F.linear(x, w, b), approximate="tanh")}
        yield f"silu(linear + bias) {m}x{n}x{k}", 2 * m * n * k, {
            "operator": lambda: matmul(x, w, b_layout="nk", bias=b, activation="silu"),
            "cuBLAS+torch": lambda: F.silu(F.linear(x, w, b))}


SMALL = [(m, n, k) for m in (1, 16, 64, 128) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))] + [
    (512, 4096, 4096), (1024, 4096, 4096), (2048, 2048, 2048), (3000, 5000, 7000)]  # M, N, K
DECODE_ROWS = 128  # products with at most this many rows are bound by moving B: their HBM share is reported


def small_cases():
    """Each SMALL shape with B [N, K] and [K, N]: the operator, cuBLAS, and where the mma.sync path would split K
    (`pick_splits`), that path's split-K beside them (the launcher with `splits`)."""
    from mlir_tile.kernels import matmul, ops
    from mlir_tile.kernels.gemm.sm80_tiles import pick_splits, smallest_tile, variant

    for (m, n, k), layout in itertools.product(SMALL, ("nk", "kn")):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(*((n, k) if layout == "nk" else (k, n)), device="cuda", dtype=torch.bfloat16) / 64
        torch_call = (lambda: F.linear(x, w)) if layout == "nk" else (lambda: torch.matmul(x, w))
        calls = {"operator": lambda: matmul(x, w, b_layout=layout), "cuBLAS": torch_call}
        launcher = ops.kernels_on(x.device).matmul
        splits = pick_splits(m, n, k, launcher.sms, variant(smallest_tile(16), 16, b_major=layout))
        if splits > 1:
            calls["mma.sync split-K"] = lambda: launcher(x, w, b_major=layout, splits=splits)
        launcher(x, w, b_major=layout)  # (the kernel the operator runs, for the row)
        yield f"linear {m}x{n}x{k} B {layout}", (m, n, k, f"{launcher.last_config} x{launcher.last_splits}"), calls


TRAIN = [(8192, 4096, 4096), (4096, 11008, 4096), (2048, 2048, 2048)]  # M, N, K of a linear layer's step


def train(out: Path) -> int:
    """A training step through one linear layer (silu(x w^T + b), its backward for x, w and b) by the operator
    against torch's F.linear then F.silu, both in bf16, timed as the cases are."""
    from mlir_tile.kernels import matmul

    results = []
    for m, n, k in TRAIN:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64).requires_grad_()
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        upstream = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

        def step(forward):
            def call():
                x.grad = w.grad = b.grad = None
                forward().backward(upstream)
            return call

        calls = {"operator": step(lambda: matmul(x, w, b_layout="nk", bias=b, activation="silu")),
                 "cuBLAS+torch": step(lambda: F.silu(F.linear(x, w, b)))}
        seconds, sampled = sustained_interleaved(calls)
        row = {"case": f"silu(linear + bias) {m}x{n}x{k}, forward and backward",
               "ms": {who: round(t * 1e3, 3) for who, t in seconds.items()},
               "operator vs cuBLAS+torch": round(seconds["cuBLAS+torch"] / seconds["operator"], 3), **sampled}
        print(json.dumps(row), flush=True)
        results.append(row)
    _write(out / "ops_train.json", {"cases": results})
    return 0


BACKWARD = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (8, 16, 2048, 64, True), (2, 16, 4096, 256, False),
            (2, 16, 4096, 256, True)]  # batch, heads, seq, d


def baseline_backward(ours):
    """The backward launcher (`flash.backward`) over the kernels in the folder MLIR_TILE_BASELINE_KERNELS names
    (their PTX by chip, as the package ships them: an earlier tree's, to time a change against in one process),
    or None where it names none."""
    import os

    from mlir_tile.kernels.flash.backward import HopperAttentionBackward
    from mlir_tile.kernels.library import KernelLibrary

    folder = os.environ.get("MLIR_TILE_BASELINE_KERNELS")
    return HopperAttentionBackward(KernelLibrary(ours.library.runtime, shipped=Path(folder))) if folder else None


def backward(out: Path) -> int:
    """Attention's backward (bf16) as a training step runs it: ours (the launcher beneath the operator's autograd
    formula, `flash.backward`, with its pre- and postprocessing kernels, given O and the log-sum-exp) against
    torch.autograd.grad through SDPA with cuDNN's and FlashAttention-2's backend (their preprocessing included),
    and through FlashAttention-4's Hopper kernels where `MLIR_TILE_FA4_SITE` holds them (benchmarks/fa4_site.py),
    TFLOP/s counting the backward as 2.5x the forward's work, halved for causal; ours deterministic beside."""
    from mlir_tile.kernels import attention, ops

    results = []
    for batch, heads, seq, d, causal in BACKWARD:
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)
        o, lse = (x.detach() for x in attention(q, k, v, causal=causal))
        gradients = ops.kernels_on(q.device).attention_backward

        def sdpa(backend):
            with sdpa_kernel(backend):
                o_torch = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return lambda: torch.autograd.grad(o_torch, (q, k, v), grad, retain_graph=True)

        calls = {"ours": lambda: gradients(grad, q.detach(), k.detach(), v.detach(), o, lse, causal=causal,
                                           deterministic=False),
                 "ours deterministic": lambda: gradients(grad, q.detach(), k.detach(), v.detach(), o, lse,
                                                         causal=causal, deterministic=True)}
        baseline = baseline_backward(gradients)
        if baseline is not None:
            calls["baseline"] = lambda: baseline(grad, q.detach(), k.detach(), v.detach(), o, lse, causal=causal,
                                                 deterministic=False)
        declined = {}
        for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FlashAttention-2", SDPBackend.FLASH_ATTENTION)):
            try:  # (a backend that does not take the shape is left out, saying why)
                calls[name] = sdpa(backend)
                calls[name]()
            except RuntimeError as error:
                calls.pop(name, None)
                declined[name] = str(error).splitlines()[0][:200]
        fa4 = flash_attention_4()
        if fa4 is not None:  # (its native layout, [batch, seq, heads, d]: the transposes outside the timing)
            q4, k4, v4 = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
            o4 = fa4(q4, k4, v4, causal=causal)
            o4 = o4[0] if isinstance(o4, tuple) else o4
            grad4 = grad.transpose(1, 2).contiguous()
            calls["FlashAttention-4"] = lambda: torch.autograd.grad(o4, (q4, k4, v4), grad4, retain_graph=True)
        seconds, sampled = sustained_interleaved(calls)
        flop = 2.5 * 4 * batch * heads * seq * seq * d / (2 if causal else 1)
        rates = {who: round(flop / t / 1e12, 1) for who, t in seconds.items()}
        row = {"case": f"attention backward {batch}x{heads}x{seq}x{d}{' causal' if causal else ''}",
               "TFLOP/s": rates, "ours vs": {who: round(rates["ours"] / r, 3) for who, r in rates.items() if who != "ours"},
               **({"declined": declined} if declined else {}), **sampled}
        print(json.dumps(row), flush=True)
        results.append(row)
    _write(out / "ops_backward.json", {"cases": results})
    return 0


VARLEN = (27, 64, 1100, 16, 128)  # sequences, shortest, longest, heads, d: issue 60's packed batch (about 16k tokens)


def packed_lengths(count: int, shortest: int, longest: int, seed: int = 60) -> list:
    """`count` sequence lengths drawn uniformly in [shortest, longest], the longest among them."""
    import random

    rng = random.Random(seed)
    return [longest] + [rng.randint(shortest, longest) for _ in range(count - 1)]


def varlen(out: Path) -> int:
    """Packed causal sequences' attention (bf16, `attention_varlen`), forward and backward (ours: the launcher
    beneath the operator's autograd formula with its pre- and postprocessing kernels), against cuDNN's SDPA on the
    same sequences padded to the longest ([batch, heads, longest, d]: the padded rows' work in its time, not in the
    FLOPs) and FlashAttention-4's varlen kernels where `MLIR_TILE_FA4_SITE` holds them; TFLOP/s counting only the
    scores inside each sequence (causal: half of each length squared; the backward 2.5x the forward's work)."""
    from mlir_tile.kernels import attention_varlen, ops

    count, shortest, longest, heads, d = VARLEN
    lengths = packed_lengths(count, shortest, longest)
    total = sum(lengths)
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")
    q, k, v, grad = (torch.randn(total, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    padded = [torch.zeros(count, heads, longest, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for x, full in zip((q, k, v, grad), padded):
        for b, length in enumerate(lengths):
            full[b, :, :length] = x[cu[b]:cu[b] + length].transpose(0, 1)
    inputs = [x.requires_grad_() for x in padded[:3]]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o_padded = F.scaled_dot_product_attention(*inputs, is_causal=True)
    o, lse = attention_varlen(q, k, v, cu, cu, longest, longest, causal=True)
    backward = ops.kernels_on(q.device).attention_backward

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*(x.detach() for x in inputs), is_causal=True)
    calls = {"ours": lambda: attention_varlen(q, k, v, cu, cu, longest, longest, causal=True),
             "cuDNN padded": cudnn,
             "ours backward": lambda: backward.packed(grad, q, k, v, o, lse, cu, cu, longest, causal=True),
             "cuDNN padded backward": lambda: torch.autograd.grad(o_padded, inputs, padded[3], retain_graph=True)}
    if flash_attention_4() is not None:
        from flash_attn.cute import flash_attn_varlen_func

        q4, k4, v4 = (x.detach().clone().requires_grad_() for x in (q, k, v))
        o4 = flash_attn_varlen_func(q4, k4, v4, cu, cu, longest, longest, causal=True)
        o4 = o4[0] if isinstance(o4, tuple) else o4
        calls["FlashAttention-4"] = lambda: flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)
        calls["FlashAttention-4 backward"] = lambda: torch.autograd.grad(o4, (q4, k4, v4), grad, retain_graph=True)
    seconds, sampled = sustained_interleaved(calls)
    flop = sum(4 * heads * d * length * length / 2 for length in lengths)
    rates = {who: round(flop * (2.5 if "backward" in who else 1) / t / 1e12, 1) for who, t in seconds.items()}
    row = {"case": f"attention_varlen {count} causal sequences of {shortest}-{longest} ({total} tokens) x {heads} "
                   f"heads x d {d}", "lengths": lengths, "TFLOP/s": rates,
           "ms": {who: round(t * 1e3, 4) for who, t in seconds.items()},
           "ours vs": {who: round(rates["ours backward" if "backward" in who else "ours"] / r, 3)
                       for who, r in rates.items() if not who.startswith("ours")}, **sampled}
    print(json.dumps(row), flush=True)
    _write(out / "ops_varlen.json", {"cases": [row]})
    return 0


def copy_bandwidth() -> dict:
    """Bytes a second a device-to-device copy of 1 GiB moves (read and written), timed as the cases are."""
    source = torch.empty(2 ** 29, device="cuda", dtype=torch.bfloat16)
    target = torch.empty_like(source)
    seconds, sampled = sustained_interleaved({"copy": lambda: target.copy_(source)})
    return {"bytes/s": 2 * source.numel() * 2 / seconds["copy"], **sampled}


GRAPHED = 10  # calls a CUDA graph holds, replayed to time the GPU's work without the host's


def _graphed(call):
    """A replay of GRAPHED calls of `call` captured in a CUDA graph (after one outside it)."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPHED):
            call()
    return graph.replay


def small(out: Path) -> int:
    from host_time import host_microseconds

    ceiling, results = copy_bandwidth(), []
    print(json.dumps({"copy GB/s": round(ceiling["bytes/s"] / 1e9)}), flush=True)
    for name, (m, n, k, kernel), calls in small_cases():
        graphs = {f"{who} in a graph": _graphed(calls[who]) for who in ("operator", "cuBLAS")}
        seconds, sampled = sustained_interleaved({**calls, **graphs})
        gpu = {who.removesuffix(" in a graph"): seconds.pop(who) / GRAPHED for who in graphs}
        hosts = {who: round(min(host_microseconds(call) for _ in range(3)), 1) for who, call in calls.items()}
        row = {"case": name, "kernel": kernel, "wall us": {who: round(t * 1e6, 2) for who, t in seconds.items()},
               "operator vs cuBLAS": round(seconds["cuBLAS"] / seconds["operator"], 3), "host us": hosts,
               "in a graph us": {who: round(t * 1e6, 2) for who, t in gpu.items()},
               "in a graph, operator vs cuBLAS": round(gpu["cuBLAS"] / gpu["operator"], 3), **sampled}
        if m <= DECODE_ROWS:
            row["HBM share"] = {who: round(2 * (m * k + n * k + m * n) / t / ceiling["bytes/s"], 3)
                                for who, t in seconds.items()}
            row["HBM share in a graph"] = {who: round(2 * (m * k + n * k + m * n) / t / ceiling["bytes/s"], 3)
                                           for who, t in gpu.items()}
        print(json.dumps(row), flush=True)
        results.append(row)
    _write(out / "ops_small.json", {"copy bytes/s": ceiling, "cases": results})
    return 0


def _write(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": date,
                                "command": " ".join(sys.argv), **document}, indent=1))


def attention_cases():
    from mlir_tile.kernels import attention

    def sdpa(backend, q, k, v, causal):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return call

    for batch, heads, seq, d, causal in ATTENTION:
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flop = 4 * batch * heads * seq * seq * d // (2 if causal else 1)
        yield f"attention {batch}x{heads}x{seq}x{d}{' causal' if causal else ''}", flop, {
            "operator": lambda: attention(q, k, v, causal=causal),
            "cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal),
            "FlashAttention-2": sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)}


def main(out: Path) -> int:
    results = []
    for name, flop, calls in itertools.chain(linear_cases(), attention_cases()):  # each case timed before the
        # generator makes the next one's tensors (its calls read them)
        seconds, sampled = sustained_interleaved(calls)
        rates = {k: flop / t / 1e12 for k, t in seconds.items()}
        row = {"case": name, "seconds": seconds, "sustained TFLOP/s": {k: round(r, 1) for k, r in rates.items()},
               "operator vs": {k: round(rates["operator"] / r, 3) for k, r in rates.items() if k != "operator"},
               **sampled}
        print(json.dumps(row), flush=True)
        results.append(row)
    _write(out / "ops.json", {"cases": results})
    return 0


if __name__ == "__main__":
    sys.exit({"small": small, "train": train, "backward": backward, "varlen": varlen}.get(sys.argv[2] if sys.argv[2:] else "", main)(
        Path(sys.argv[1])))
