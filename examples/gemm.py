"""mlir-tile's GEMM from torch: `mlir_tile.kernels.matmul`, where a model calls torch.matmul or F.linear.

    python examples/gemm.py          # a GPU and torch: each call below against torch, then inside torch.compile

What it shows, in order: a product of [M, K] by [K, N]; F.linear's layout (the weight [N, K]) with a bias, an
activation and a residual fused into the kernel; leading batch dimensions; writing into a given tensor; a
torch.compile'd module that calls it (the op is `torch.ops.mlir_tile.matmul`, with a fake implementation);
and an epilogue of your own, which reads extra operands. Without the compiler installed, the calls run the
kernels the wheel ships; an epilogue of your own is built on first use, so it needs the `compiler` extra.

The kernel's own command line (build PTX here, run it on a GPU host, check a CTA on the reference model):
`python -m mlir_tile.kernels.gemm --help`. Its tile table, epilogues and launcher are
`mlir_tile.kernels.gemm` (`TILES`, `PREFERRED`, `Matmul`) and `mlir_tile.kernels.epilogues`.
"""
import torch
import torch.nn.functional as F

from mlir_tile.kernels import matmul
from mlir_tile.kernels.epilogues import Operand, epilogue, maximum


def report(what: str, got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Within bf16's rounding of the fp32 result (and fp32 accumulation in another order)."""
    error = ((got.float() - expected.float()).abs() / (expected.float().abs() + 1)).max().item()
    print(f"{what:48} largest relative error {error:.1e}")
    return error < 2 ** -6


@epilogue(Operand("scale", "scalar"), Operand("floor", "row"))
def scaled_clamp(x, at):
    """x * scale, at least its row's floor: a scalar and a per-row vector as operands."""
    return maximum(x * at.load("scale"), at.load("floor"))


class MLP(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width, device="cuda", dtype=torch.bfloat16)
        self.down = torch.nn.Linear(4 * width, width, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        hidden = matmul(x, self.up.weight, b_layout="nk", bias=self.up.bias, activation="gelu_tanh")
        return matmul(hidden, self.down.weight, b_layout="nk", bias=self.down.bias, residual=x)


def main() -> int:
    torch.manual_seed(0)
    cuda = dict(device="cuda", dtype=torch.bfloat16)
    a, b = torch.randn(1000, 1016, **cuda), torch.randn(1016, 504, **cuda)
    checks = [report("a @ b", matmul(a, b), a.float() @ b.float())]

    x, w, bias = torch.randn(2, 512, 1024, **cuda), torch.randn(4096, 1024, **cuda) / 32, torch.randn(4096, **cuda)
    residual = torch.randn(2, 512, 4096, **cuda)
    fused = matmul(x, w, b_layout="nk", bias=bias, activation="silu", residual=residual)
    expected = F.silu(F.linear(x.float(), w.float(), bias.float())) + residual.float()
    checks.append(report("silu(F.linear(x, w, b)) + r, x [2, 512, 1024]", fused, expected))

    out = torch.empty(1000, 504, **cuda)
    checks.append(report("into out=", matmul(a, b, out=out), a.float() @ b.float()) and out.data_ptr() != 0)

    mlp, tokens = MLP(1024), torch.randn(4, 128, 1024, **cuda)
    with torch.no_grad():
        expected = mlp.down(F.gelu(mlp.up(tokens), approximate="tanh")) + tokens
        checks.append(report("torch.compile'd MLP", torch.compile(mlp)(tokens), expected))

    floor = torch.randn(1000, **cuda)
    mine = matmul(a, b, epilogue=scaled_clamp, operands=(0.5, floor))
    checks.append(report("your epilogue: max(0.5 a @ b, floor[row])", mine,
                         torch.maximum(0.5 * (a.float() @ b.float()), floor.float()[:, None])))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
