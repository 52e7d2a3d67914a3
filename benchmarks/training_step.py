"""A Llama-style decoder block's training step with every matmul and attention mlir-tile's, against the same block
on torch's ops (cuBLAS through F.linear, SDPA), in one process on the GPU (issue 60's benchmark):

    python3 benchmarks/training_step.py OUT [--steps 20] [--compile] [--varlen] [--profile]
                                                                      # OUT/training_step[_varlen].json

The block (bf16): RMSNorm, q/k/v projections (d_model 4096 to 32 query heads and 8 K/V heads of 128), rotary
embeddings, causal attention with grouped-query heads, the output projection and a residual; RMSNorm, a SwiGLU
MLP of 14336 and a residual; batch 2 x 4096 tokens. Two copies start from one initialization and take the same
inputs and AdamW steps: the loss of each step, and after the first backward every parameter's gradient, of ours
against torch's (relative error: |ours - torch's| / |torch's|, largest over the parameters), then each step's
time, the two interleaved (`torch_timing.sustained_interleaved`: rounds of whole steps, medians), with the SM
clock and the power. `--compile`: both blocks under torch.compile. `--varlen`: one packed batch of sequences of
mixed lengths (PACKED, 8,192 tokens, positions restarting at each), ours by `attention_varlen` on the projections'
[tokens, heads, d] as they are, torch's by SDPA on each sequence. `--profile`: each block's step's kernels by CUDA
time (torch.profiler), printed.
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
PACKED = (3000, 1800, 1200, 900, 600, 400, 200, 92)  # the varlen batch's lengths: 8,192 tokens


class Block(torch.nn.Module):
    """One decoder block; `linear(x, w)` and `attend(q, k, v)` ([batch, seq, heads, d] in and out) are the ops it
    runs on (ours or torch's)."""

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
        q = self.linear(h, self.wq).view(batch, seq, HEADS, HEAD_DIM)
        k = self.linear(h, self.wk).view(batch, seq, KV_HEADS, HEAD_DIM)
        v = self.linear(h, self.wv).view(batch, seq, KV_HEADS, HEAD_DIM)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        o = self.attend(q, k, v).reshape(batch, seq, HEADS * HEAD_DIM)
        x = x + self.linear(o, self.wo)
        h = F.rms_norm(x, (D_MODEL,), self.norm_mlp)
        return x + self.linear(F.silu(self.linear(h, self.w_gate)) * self.linear(h, self.w_up), self.w_down)


def _rotary(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


def _rotary_tables(positions):
    """cos and sin [tokens, 1, d] (broadcast over the heads) at each token's position."""
    frequencies = 1.0 / (500000 ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))
    angles = torch.outer(positions.float(), frequencies)
    angles = torch.cat((angles, angles), -1)[:, None]
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def ours(lengths=None):
    from mlir_tile.kernels import attention, attention_varlen, matmul

    def attend(q, k, v):
        if lengths is None:
            return attention(*(x.transpose(1, 2) for x in (q, k, v)), causal=True)[0].transpose(1, 2)
        cu, longest = lengths
        return attention_varlen(q[0], k[0], v[0], cu, cu, longest, longest, causal=True)[0][None]
    return Block(lambda x, w: matmul(x, w, b_layout="nk"), attend)


def torchs(bounds=None):
    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True,
                                              enable_gqa=True).transpose(1, 2)

    def attend(q, k, v):
        if bounds is None:
            return sdpa(q, k, v)
        return torch.cat([sdpa(q[:, a:b], k[:, a:b], v[:, a:b]) for a, b in bounds], 1)
    return Block(F.linear, attend)


def _batch(varlen: bool):
    """(the inputs' [batch, seq], the rotary tables, each block's attention arguments: ours, torch's)."""
    if not varlen:
        return (BATCH, SEQ), _rotary_tables(torch.arange(SEQ, device="cuda")), (None, None)
    starts = [sum(PACKED[:i]) for i in range(len(PACKED) + 1)]
    positions = torch.cat([torch.arange(length, device="cuda") for length in PACKED])
    cu = torch.tensor(starts, dtype=torch.int32, device="cuda")
    return (1, starts[-1]), _rotary_tables(positions), ((cu, max(PACKED)), list(zip(starts, starts[1:])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--varlen", action="store_true")
    parser.add_argument("--profile", action="store_true")
    arguments = parser.parse_args()
    torch.manual_seed(0)
    shape, (cos, sin), (lengths, bounds) = _batch(arguments.varlen)
    blocks = {"ours": ours(lengths).cuda(), "torch": torchs(bounds).cuda()}
    blocks["torch"].load_state_dict(blocks["ours"].state_dict())
    optimizers = {who: torch.optim.AdamW(block.parameters(), lr=1e-4) for who, block in blocks.items()}
    runs = {who: torch.compile(block) if arguments.compile else block for who, block in blocks.items()}
    losses, gradient_errors = [], None
    for step in range(arguments.steps):
        x = torch.randn(*shape, D_MODEL, device="cuda", dtype=torch.bfloat16)
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
        x = torch.randn(*shape, D_MODEL, device="cuda", dtype=torch.bfloat16)

        def call():
            optimizers[who].zero_grad(set_to_none=True)
            runs[who](x, cos, sin).float().square().mean().backward()
        return call

    seconds, sampled = sustained_interleaved({who: step_of(who) for who in runs}, rounds=5)
    if arguments.profile:
        for who in runs:
            _profile(who, step_of(who))
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": " ".join(sys.argv), "losses": losses,
              "largest relative loss difference": max(abs(r["ours"] - r["torch"]) / abs(r["torch"]) for r in losses),
              "first step's gradients, relative error": gradient_errors,
              "step ms": {who: round(t * 1e3, 2) for who, t in seconds.items()},
              "ours vs torch": round(seconds["torch"] / seconds["ours"], 3), **sampled}
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / f"training_step{'_varlen' if arguments.varlen else ''}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}), flush=True)
    return 0


def _profile(who: str, step) -> None:
    """The kernels of three of `who`'s steps, by CUDA time."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    print(f"{who}'s step, 3 times:\n{profile.key_averages().table(sort_by='cuda_time_total', row_limit=18)}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
