"""A Llama-style decoder block's training step with every matmul and attention mlir-tile's, against the same block
on torch's ops (cuBLAS through F.linear, SDPA), in one process on the GPU (issue 60's benchmark):

    python3 benchmarks/training_step.py OUT [--steps 20] [--compile]   # OUT/training_step.json

The block (bf16): RMSNorm, q/k/v projections (d_model 4096 to 32 query heads and 8 K/V heads of 128), rotary
embeddings, causal attention with grouped-query heads, the output projection and a residual; RMSNorm, a SwiGLU
MLP of 14336 and a residual; batch 2 x 4096 tokens. Two copies start from one initialization and take the same
inputs and AdamW steps: the loss of each step, and after the first backward every parameter's gradient, of ours
against torch's (relative error: |ours - torch's| / |torch's|, largest over the parameters), then each step's
time, the two interleaved (`torch_timing.sustained_interleaved`: rounds of whole steps, medians), with the SM
clock and the power. `--compile`: both blocks under torch.compile.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from torch_timing import sustained_interleaved

D_MODEL, HEADS, KV_HEADS, HEAD_DIM, MLP, BATCH, SEQ = 4096, 32, 8, 128, 14336, 2, 4096


class Block(torch.nn.Module):
    """One decoder block; `linear(x, w)` and `attend(q, k, v)` are the ops it runs on (ours or torch's)."""

    def __init__(self, linear, attend):
        super().__init__()
        self.linear, self.attend = linear, attend
        scale = D_MODEL ** -0.5
        shapes = {"wq": (HEADS * HEAD_DIM, D_MODEL), "wk": (KV_HEADS * HEAD_DIM, D_MODEL),
                  "wv": (KV_HEADS * HEAD_DIM, D_MODEL), "wo": (D_MODEL, HEADS * HEAD_DIM),
                  "w_gate": (MLP, D_MODEL), "w_up": (MLP, D_MODEL), "w_down": (D_MODEL, MLP)}
        for name, shape in shapes.items():
            self.register_parameter(name, torch.nn.Parameter(torch.randn(shape, dtype=torch.bfloat16) * scale))
        self.norm_attention = torch.nn.Parameter(torch.ones(D_MODEL, dtype=torch.bfloat16))
        self.norm_mlp = torch.nn.Parameter(torch.ones(D_MODEL, dtype=torch.bfloat16))

    def forward(self, x, cos, sin):
        batch, seq, _ = x.shape
        h = F.rms_norm(x, (D_MODEL,), self.norm_attention)
        q = self.linear(h, self.wq).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.linear(h, self.wk).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.linear(h, self.wv).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        o = self.attend(q, k, v).transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM)
        x = x + self.linear(o, self.wo)
        h = F.rms_norm(x, (D_MODEL,), self.norm_mlp)
        return x + self.linear(F.silu(self.linear(h, self.w_gate)) * self.linear(h, self.w_up), self.w_down)


def _rotary(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


def _rotary_tables(seq: int):
    frequencies = 1.0 / (500000 ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))
    angles = torch.outer(torch.arange(seq, device="cuda").float(), frequencies)
    angles = torch.cat((angles, angles), -1)
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def ours():
    from mlir_tile.kernels import attention, matmul

    return Block(lambda x, w: matmul(x, w, b_layout="nk"), lambda q, k, v: attention(q, k, v, causal=True)[0])


def torchs():
    return Block(F.linear, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true")
    arguments = parser.parse_args()
    torch.manual_seed(0)
    blocks = {"ours": ours().cuda(), "torch": torchs().cuda()}
    blocks["torch"].load_state_dict(blocks["ours"].state_dict())
    optimizers = {who: torch.optim.AdamW(block.parameters(), lr=1e-4) for who, block in blocks.items()}
    runs = {who: torch.compile(block) if arguments.compile else block for who, block in blocks.items()}
    cos, sin = _rotary_tables(SEQ)
    losses, gradient_errors = [], None
    for step in range(arguments.steps):
        x = torch.randn(BATCH, SEQ, D_MODEL, device="cuda", dtype=torch.bfloat16)
        target = torch.randn_like(x)
        row = {}
        for who, run in runs.items():
            optimizers[who].zero_grad(set_to_none=True)
            loss = F.mse_loss(run(x, cos, sin).float(), target.float())
            loss.backward()
            row[who] = float(loss)
        if step == 0:
            gradient_errors = {name: float((mine.grad.float() - theirs.grad.float()).norm()
                                           / theirs.grad.float().norm())
                               for (name, mine), theirs in zip(blocks["ours"].named_parameters(),
                                                               blocks["torch"].parameters())}
        for optimizer in optimizers.values():
            optimizer.step()
        losses.append(row)
        print(json.dumps({"step": step, **row}), flush=True)

    def step_of(who):
        x = torch.randn(BATCH, SEQ, D_MODEL, device="cuda", dtype=torch.bfloat16)

        def call():
            optimizers[who].zero_grad(set_to_none=True)
            runs[who](x, cos, sin).float().square().mean().backward()
        return call

    seconds, sampled = sustained_interleaved({who: step_of(who) for who in runs}, rounds=5)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": " ".join(sys.argv), "losses": losses,
              "largest relative loss difference": max(abs(r["ours"] - r["torch"]) / abs(r["torch"]) for r in losses),
              "first step's gradients, relative error": gradient_errors,
              "step ms": {who: round(t * 1e3, 2) for who, t in seconds.items()},
              "ours vs torch": round(seconds["torch"] / seconds["ours"], 3), **sampled}
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "training_step.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
