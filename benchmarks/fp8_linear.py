"""fp8 training's linear layer (`kernels.fp8_training.fp8_linear`, issue 62) beside bf16 F.linear (cuBLAS), a
forward and a backward a call, in one process on the GPU host:

    PYTHONPATH=python:benchmarks python3 benchmarks/fp8_linear.py OUT     # OUT/fp8_linear.json
    PYTHONPATH=python:benchmarks python3 benchmarks/fp8_linear.py OUT --profile   # and each kernel of a step

Per shape (tokens, K, N: Llama-3-8B's and DeepSeek-V3's projections): ms a forward + backward
(`torch_timing.sustained_interleaved`: back to back, shuffled rounds, medians, the SM clock and power beside), its
three GEMMs alone in fp8 (`scaled_mm` on operands quantized once, outside the timing), x's quantization by the
library's kernel (`gemm.quantize`) and by torch's ops, x^T's (along the tokens, dw's) and w's 128 x 128 by the
kernels, and each result's relative RMS error against fp32's: what the quantizations cost beside the GEMMs they
feed. `--profile`: each kernel's GPU time in one fp8_linear step (torch.profiler), per shape."""
import json
import sys
from pathlib import Path

from torch_timing import sustained_interleaved

SHAPES = [(8192, 4096, 4096), (8192, 4096, 14336), (8192, 14336, 4096), (16384, 7168, 2048)]


def kernel_times(step) -> str:
    """torch.profiler's table of the GPU kernels of one `step()` (after one unprofiled), by total GPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiled:
        step()
        torch.cuda.synchronize()
    return profiled.key_averages().table(sort_by="device_time_total", row_limit=24, max_name_column_width=70)


def main(out: Path, profiled: bool = False) -> None:
    import torch
    import torch.nn.functional as F

    from mlir_tile.kernels import fp8_training, scaled_mm

    rows = []
    for tokens, depth, n in SHAPES:
        x = torch.randn(tokens, depth, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        weight = (torch.randn(n, depth, device="cuda", dtype=torch.bfloat16) / depth ** 0.5).requires_grad_()
        grad = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16)

        def trained(linear):
            return lambda: torch.autograd.backward(linear(x, weight), grad)

        gemms = [(fp8_training.quantized_rows(x.detach()), fp8_training.quantized_blocks(weight.detach()))]
        (dy, scale_dy), (w, scale_w) = fp8_training.quantized_rows(grad), fp8_training.quantized_blocks(weight.detach())
        gemms.append(((dy, scale_dy), (w.t().contiguous(), scale_w.t().contiguous())))
        gemms.append(tuple(fp8_training.quantized_rows(t.t()) for t in (grad, x.detach())))
        calls = {"bf16 F.linear": trained(F.linear), "fp8_linear": trained(fp8_training.fp8_linear),
                 "its three fp8 GEMMs": lambda: [scaled_mm(a, b, sa, sb) for (a, sa), (b, sb) in gemms],
                 "x's 1 x 128 quantization (kernel)": lambda: fp8_training.quantized_rows(x.detach()),
                 "x's 1 x 128 quantization (torch's ops)": lambda: fp8_training.quantized_by_torch(x.detach(), 1),
                 "x^T's 1 x 128 quantization (kernel)": lambda: fp8_training.quantized_columns(x.detach()),
                 "w's 128 x 128 quantization (kernel)": lambda: fp8_training.quantized_blocks(weight.detach())}
        seconds, conditions = sustained_interleaved(calls)
        exact = [t.detach().float().requires_grad_() for t in (x, weight)]
        want = F.linear(*exact)
        want.backward(grad.float())
        x.grad = weight.grad = None
        y = fp8_training.fp8_linear(x, weight)
        y.backward(grad)
        errors = {name: float((got.float() - expected).pow(2).mean().sqrt() / expected.pow(2).mean().sqrt())
                  for name, got, expected in (("y", y, want), ("dx", x.grad, exact[0].grad),
                                              ("dw", weight.grad, exact[1].grad))}
        row = {"shape": [tokens, depth, n], **conditions, "ms": {k: round(v * 1e3, 4) for k, v in seconds.items()},
               "relative RMS error": {k: round(v, 4) for k, v in errors.items()}}
        print(json.dumps(row), flush=True)
        if profiled:
            print(kernel_times(calls["fp8_linear"]), flush=True)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fp8_linear.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), profiled="--profile" in sys.argv[2:])
