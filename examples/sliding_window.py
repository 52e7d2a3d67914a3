"""Causal sliding-window attention (each query sees itself and the 1023 keys before it) on attention's
extension points, `python examples/sliding_window.py` on an sm_90 GPU: the variant says which keys a row sees;
on any grid the library picks, the kernel visits only the window's key tiles, masking those at both ends.
(torch is imported in `main`: the GPU tests build the kernels of `local` where torch is not.)"""
from mlir_tile.kernels.flash.variants import Variant, maximum, minimum

WINDOW = 1024
SHAPES = ((64, 700), (64, 1500), (64, 3000), (128, 3000), (256, 2100), (128, 1))  # (d, seq): d 64's three grids


def window(query, seq, at):  # keys [query - 1023, query] of the sequence
    return maximum(query - (WINDOW - 1), 0), minimum(query + 1, seq)


local = Variant("local", keys=window)


def main() -> int:
    import torch
    from mlir_tile.kernels import attention

    torch.manual_seed(0)
    worst = 0.0
    for d, seq in SHAPES:
        q, k, v = (torch.randn(2, 4, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = attention(q, k, v, variant=local)
        query, key = torch.arange(seq, device="cuda")[:, None], torch.arange(seq, device="cuda")[None, :]
        scores = (q.float() @ k.float().transpose(-1, -2) / d ** 0.5).masked_fill(
            (key > query) | (key <= query - WINDOW), float("-inf"))
        errors = ((o.float() - scores.softmax(-1) @ v.float()).abs().max().item(),
                  (lse - scores.logsumexp(-1)).abs().max().item())
        print(f"d {d}, seq {seq}: O off by {errors[0]:.1e}, lse by {errors[1]:.1e}")
        worst = max(worst, errors[0] / 2 ** -6, errors[1] / 1e-3)
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
