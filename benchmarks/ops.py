"""mlir_tile.kernels' torch operators as a model calls them, against what it would call instead, in one process
on the GPU (no MLIR there: the kernels the wheel ships, or `python -m mlir_tile.kernels.ship` into the package).

    python3 benchmarks/ops.py OUT        # OUT/ops.json: per case the medians, the ratios, the SM clock and power

Cases: the plain product through the operator (`torch.ops.mlir_tile.matmul`) and through the launcher beneath it
(`gemm.launch.Matmul`, what benchmarks/gemm.py times), against cuBLAS (F.linear / torch.matmul); linear + bias + GELU
fused by the ready-made epilogue (without the compiler: the shipped `epilogues.selectable`) against our product
without it and torch's unfused F.linear then F.gelu, and linear + bias + SiLU against F.linear then F.silu;
attention against cuDNN's and FlashAttention-2's SDPA. The ratios: `torch_timing.sustained_interleaved` (every call launched back to back
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

from torch_timing import sustained_interleaved

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
    out.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (out / "ops.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "date": date, "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
