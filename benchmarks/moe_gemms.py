"""Issue 62's GEMMs beside torch's, in one process on the GPU host (the wheel's shipped kernels; nothing to build):

    PYTHONPATH=python python3 benchmarks/moe_gemms.py DIR [PART ...]   # DIR/moe_gemms.json; PARTS: all by default

- fused SwiGLU (`swiglu_mm` on `swiglu_weights`) against F.linear twice + silu * and against one F.linear on the
  stacked weights + chunk + silu * (Llama-3-8B's MLP: K 4096, F 14336; M 128-8192), bf16;
- the masked grouped GEMM (`grouped_mm`: E experts, T rows each, all counted) against a loop of F.linear over
  the experts and torch._grouped_mm where the installed torch has it, bf16;
- the contiguous grouped GEMM (`grouped_mm(..., offsets=)`: tokens split unevenly among the experts, a
  multinomial draw) against torch._grouped_mm, a loop of F.linear and a loop of our `matmul`, bf16, and the
  ceiling: one dense F.linear of the same FLOPs (every token on one expert's weights);
- the contiguous form's forward and backward (dx and dw) against torch._grouped_mm's and a loop of F.linear's
  (the rows compare dw), and `fp8_grouped_linear`'s (the forward and dx blockwise fp8 grouped GEMMs);
- blockwise fp8 (`scaled_mm` with scale_a [M, K / 128], scale_b [N / 128, K / 128], all 1: the same product as
  per tensor) against torch._scaled_mm with the same scales where the installed torch takes them, cuBLASLt per
  tensor, and ours per tensor, fast and precise.
Times: `torch_timing.sustained_interleaved` (back to back, shuffled rounds, medians, the SM clock and power);
each row also the largest difference of ours from torch's first call, relative to its largest value.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from torch_timing import sustained_interleaved

SWIGLU_SHAPES = [(128, 4096, 14336), (2048, 4096, 14336), (8192, 4096, 14336)]  # M, K, F
GROUPED_SHAPES = [(8, 256, 4096, 14336), (64, 128, 7168, 2048), (256, 128, 7168, 2048)]  # E, T, K, N
CONTIGUOUS_SHAPES = [(8, 8192, 4096, 14336), (64, 16384, 7168, 2048), (256, 32768, 7168, 2048)]  # E, tokens, K, N
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384)]  # M, N, K


def _row(kind: str, shape, calls: dict, outputs: dict) -> dict:
    """Time `calls` (the first torch's), and each of ours' largest difference from it."""
    seconds, conditions = sustained_interleaved(calls)
    reference = outputs[next(iter(outputs))].float()
    scale = float(reference.abs().max()) or 1.0
    row = {"kind": kind, "shape": list(shape), **conditions, "ms": {k: round(1e3 * t, 4) for k, t in seconds.items()},
           "largest difference (relative)": {k: float((v.float() - reference).abs().max()) / scale
                                             for k, v in outputs.items()}}
    print(json.dumps(row), flush=True)
    return row


def swiglu_rows() -> list:
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import swiglu_mm, swiglu_weights

    rows = []
    for m, depth, features in SWIGLU_SHAPES:
        x = torch.randn(m, depth, device="cuda", dtype=torch.bfloat16)
        gate, up = (torch.randn(features, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5 for _ in range(2))
        stacked, fused = torch.cat([gate, up]), swiglu_weights(gate, up)

        def stacked_call():
            g, u = F.linear(x, stacked).chunk(2, -1)
            return F.silu(g) * u
        calls = {"torch: 2 x F.linear + silu *": lambda: F.silu(F.linear(x, gate)) * F.linear(x, up),
                 "torch: F.linear stacked + silu *": stacked_call, "ours: swiglu_mm": lambda: swiglu_mm(x, fused)}
        rows.append(_row("swiglu", (m, depth, features), calls, {k: call() for k, call in calls.items()}))
    return rows


def grouped_rows() -> list:
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import grouped_mm

    rows = []
    for experts, tokens, depth, n in GROUPED_SHAPES:
        x = torch.randn(experts, tokens, depth, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(experts, n, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5
        counts = torch.full((experts,), tokens, device="cuda", dtype=torch.int32)
        calls = {"torch: F.linear a expert": lambda: torch.stack([F.linear(x[e], w[e]) for e in range(experts)]),
                 "ours: grouped_mm": lambda: grouped_mm(x, w, counts)}
        if hasattr(torch, "_grouped_mm"):  # (tokens by expert, offsets int32 [E]: each expert's end)
            offsets = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * tokens
            flat, w_t = x.reshape(experts * tokens, depth), w.transpose(1, 2)
            calls["torch._grouped_mm"] = lambda: torch._grouped_mm(flat, w_t, offs=offsets).view(experts, tokens, n)
        rows.append(_row("grouped", (experts, tokens, depth, n), calls, {k: call() for k, call in calls.items()}))
    return rows


def contiguous_rows() -> list:
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import grouped_mm, matmul

    rows = []
    for experts, tokens, depth, n in CONTIGUOUS_SHAPES:
        generator = torch.Generator().manual_seed(experts)
        sizes = torch.multinomial(torch.rand(experts, generator=generator) + 0.5, tokens, replacement=True,
                                  generator=generator).bincount(minlength=experts).tolist()
        ends = torch.tensor(sizes).cumsum(0).tolist()
        offsets = torch.tensor(ends, device="cuda", dtype=torch.int32)
        x = torch.randn(tokens, depth, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(experts, n, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5
        pieces = [(x[end - size:end], w[e]) for e, (size, end) in enumerate(zip(sizes, ends))]
        calls = {"torch: F.linear a expert": lambda: torch.cat([F.linear(a, b) for a, b in pieces]),
                 "ours: matmul a expert": lambda: torch.cat([matmul(a, b, b_layout="nk") for a, b in pieces]),
                 "ours: grouped_mm contiguous": lambda: grouped_mm(x, w, offsets=offsets),
                 # (the ceiling: the same FLOPs as one dense product, every token on expert 0's weights)
                 "dense ceiling: F.linear of all tokens": lambda: F.linear(x, w[0])}
        if hasattr(torch, "_grouped_mm"):
            w_t = w.transpose(1, 2)
            calls["torch._grouped_mm"] = lambda: torch._grouped_mm(x, w_t, offs=offsets)
        rows.append(_row("contiguous", (experts, tokens, depth, n), calls,
                         {k: call() for k, call in calls.items() if not k.startswith("dense")}))
        torch.cuda.empty_cache()
    return rows


def training_rows() -> list:
    """The contiguous form's forward + backward (dx, dw) beside torch._grouped_mm's and a loop of F.linear's."""
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import fp8_grouped_linear, grouped_mm

    rows = []
    for experts, tokens, depth, n in CONTIGUOUS_SHAPES[:2]:
        sizes = [tokens // experts + (e % 3) * 8 - 8 for e in range(experts)]
        ends = torch.tensor(sizes).cumsum(0).tolist()
        offsets = torch.tensor(ends, device="cuda", dtype=torch.int32)
        x = torch.randn(ends[-1], depth, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = (torch.randn(experts, n, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5).requires_grad_()
        grad = torch.randn(ends[-1], n, device="cuda", dtype=torch.bfloat16)

        def step(forward):
            def run():
                x.grad = w.grad = None
                forward().backward(grad)
                return w.grad
            return run
        pieces = [(end - size, end) for size, end in zip(sizes, ends)]
        calls = {"torch: F.linear a expert": step(lambda: torch.cat([F.linear(x[a:b], w[e]) for e, (a, b) in
                                                                    enumerate(pieces)])),
                 "ours: grouped_mm contiguous": step(lambda: grouped_mm(x, w, offsets=offsets)),
                 "ours: fp8_grouped_linear": step(lambda: fp8_grouped_linear(x, w, offsets))}
        if hasattr(torch, "_grouped_mm"):
            calls["torch._grouped_mm"] = step(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offsets))
        rows.append(_row("contiguous training (dw)", (experts, ends[-1], depth, n), calls,
                         {k: call().clone() for k, call in calls.items()}))
    return rows


def fp8_rows() -> list:
    import torch

    from mlir_tile.kernels import scaled_mm

    rows = []
    for m, n, depth in FP8_SHAPES:
        a, b = (torch.randn(rows_, depth, device="cuda").to(torch.float8_e4m3fn) for rows_ in (m, n))
        one = torch.ones(1, device="cuda")
        # (blockwise scales of 1: every result the same product, so the differences compare the accumulations)
        scale_a = torch.ones(m, -(-depth // 128), device="cuda")
        scale_b = torch.ones(-(-n // 128), -(-depth // 128), device="cuda")
        calls = {"cuBLASLt per tensor": lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16),
                 "ours per tensor, fast": lambda: scaled_mm(a, b, one, one, accumulation="fast"),
                 "ours per tensor, precise": lambda: scaled_mm(a, b, one, one, accumulation="precise"),
                 "ours blockwise": lambda: scaled_mm(a, b, scale_a, scale_b)}
        try:  # (the installed torch's blockwise path, where it has one: its scale layouts, not ours, may differ)
            torch._scaled_mm(a, b.t(), scale_a, scale_b.t().contiguous().t(), out_dtype=torch.bfloat16)
            calls["torch._scaled_mm blockwise"] = lambda: torch._scaled_mm(a, b.t(), scale_a, scale_b.t().contiguous().t(),
                                                                          out_dtype=torch.bfloat16)
        except (RuntimeError, ValueError) as refused:
            print(f"torch._scaled_mm takes no blockwise scales here: {str(refused).splitlines()[0]}", flush=True)
        rows.append(_row("fp8", (m, n, depth), calls, {k: call() for k, call in calls.items()}))
    return rows


PARTS = {"grouped": grouped_rows, "contiguous": contiguous_rows, "training": training_rows, "fp8": fp8_rows,
         "swiglu": swiglu_rows}


def main(directory: Path, parts=tuple(PARTS)) -> None:
    import torch

    results = {"chip": torch.cuda.get_device_name(), "rows": []}
    for part in (PARTS[name] for name in parts):
        results["rows"] += part()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "moe_gemms.json").write_text(json.dumps(results, indent=1))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or tuple(PARTS))
