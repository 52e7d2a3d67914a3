"""gelu(x @ w.T + b) in one kernel, the epilogue written here (`mlir_tile.kernels.epilogues` has it ready-made
as `bias.then(gelu_tanh)`, and `matmul(..., bias=b, activation="gelu_tanh")` runs that).

    python examples/fused_linear_gelu.py      # a GPU and torch; builds the kernel on first use (the compiler)
"""
import torch
import torch.nn.functional as F

from mlir_tile.kernels import matmul
from mlir_tile.kernels.epilogues import Operand, epilogue, tanh


@epilogue(Operand("bias", "column"))
def linear_gelu(x, at):
    x = x + at.load("bias")  # the bias of this accumulator's column
    return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    linear = torch.nn.Linear(4096, 11008, device="cuda", dtype=torch.bfloat16)
    y = matmul(x, linear.weight, b_layout="nk", epilogue=linear_gelu, operands=(linear.bias,))
    expected = F.gelu(F.linear(x.float(), linear.weight.float(), linear.bias.float()), approximate="tanh")
    error = ((y.float() - expected).abs() / (expected.abs() + 1)).max().item()
    print(f"gelu(x @ w.T + b), {tuple(x.shape)} x {tuple(linear.weight.shape)}: largest relative error {error:.1e}")


if __name__ == "__main__":
    main()
