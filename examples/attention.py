"""mlir-tile's attention forward from torch: `mlir_tile.kernels.attention`, where a model calls
F.scaled_dot_product_attention (and also wants each row's log-sum-exp, as a backward pass does).

    python examples/attention.py     # an sm_90 GPU and torch: against torch's SDPA, then inside torch.compile

q, k, v are [batch, heads, seq, d], fp16 or bf16, d 64 or 128, any seq; the scale is 1 / sqrt(d), and
`causal=True` masks keys after the query's position. The result is (o, lse): o like q, lse [batch, heads, seq]
in fp32 (natural log). The op is `torch.ops.mlir_tile.attention`, with a fake implementation, so a
torch.compile'd model keeps it as one node. The kernel's command line: `python -m mlir_tile.kernels.attention
--help`; its CTA table (`TUNED`) and launcher (`Attention`) are in `mlir_tile.kernels.flash` (`sm80_tiles`, `launch`).
"""
import torch
import torch.nn.functional as F

from mlir_tile.kernels import attention


class SelfAttention(torch.nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        o, _ = attention(q, k, v, causal=True)  # non-contiguous views: the op makes them contiguous
        return o.transpose(1, 2).reshape(batch, seq, width)


def report(what: str, error: float, bound: float) -> bool:
    print(f"{what:44} largest error {error:.1e}")
    return error <= bound


def main() -> int:
    torch.manual_seed(0)
    checks = []
    for d, causal in ((64, False), (128, True)):
        q, k, v = (torch.randn(2, 8, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = attention(q, k, v, causal=causal)
        expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        scores = q.float() @ k.float().transpose(-1, -2) / d ** 0.5
        if causal:
            scores = scores.masked_fill(torch.ones(1000, 1000, device="cuda").triu(1).bool(), float("-inf"))
        checks.append(report(f"o, d {d}{' causal' if causal else ''}", (o.float() - expected).abs().max().item(), 2 ** -6))
        checks.append(report("lse", (lse - scores.logsumexp(-1)).abs().max().item(), 1e-3))

    model, x = SelfAttention(1024, 8), torch.randn(2, 512, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        q, k, v = model.qkv(x).view(2, 512, 3, 8, 128).permute(2, 0, 3, 1, 4)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 512, 1024)
        got = torch.compile(model)(x)
    checks.append(report("torch.compile'd self-attention", (got.float() - expected.float()).abs().max().item(), 2 ** -5))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
