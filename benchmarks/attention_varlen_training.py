"""Packed sequences that train with a variant: `attention_varlen`'s forward and backward with a sliding window
(Mistral's and gpt-oss's local layers, packed for training) beside the same batch causal, in one process.

    python benchmarks/attention_varlen_training.py build DIR     # here (MLIR): the kernels, as the cache lays them
    MLIR_TILE_CACHE_DIR=DIR python3 benchmarks/attention_varlen_training.py run DIR   # GPU host

The batch: sequences of 300-4,000 tokens (a fixed draw) packed to about 16k tokens, 32 query / 8 K/V heads of
128, bf16; the window `WINDOW` keys back from each query (itself included). Each call is a forward and a
backward (dq, dk, dv); TFLOP/s count the scores each visits (a window's: min(position + 1, WINDOW) a row; the
causal: position + 1), 4 d flops a score forward and 2.5 times that backward. Times: `torch_timing.
sustained_interleaved`. DIR/attention_varlen_training.json.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from torch_timing import sustained_interleaved

HEADS, KV_HEADS, D, WINDOW = 32, 8, 128, 1024


def lengths() -> list:
    draw, picked = random.Random(60), []
    while sum(picked) < 16000:
        picked.append(draw.randint(300, 4000))
    return picked


def _kernels():
    """(name, build) of the forward's (the launcher's pick on 132 SMs) and the backward's kernels of each form."""
    from functools import partial

    from mlir_tile.kernels.flash import sm90, sm90_backward
    from mlir_tile.kernels.flash.masks import sliding_window
    from mlir_tile.kernels.flash.packed import packed_config
    from mlir_tile.kernels.flash.sm90_backward_tiles import BackwardConfig

    sizes = lengths()
    for variant, causal in ((sliding_window(WINDOW - 1), False), (None, True)):
        suffix = variant.suffix if variant else ""
        config, _, _ = packed_config(D, causal, "bf16", max(sizes), HEADS // KV_HEADS, 0, max_seqlen_k=max(sizes),
                                     kv_items=len(sizes) * KV_HEADS, sms=132)
        yield str(config) + suffix, partial(sm90.build_module, config, variant=variant)
        backward = BackwardConfig(D, causal, "bf16", varlen=True)
        yield str(backward) + suffix, partial(sm90_backward.build_module, backward, variant=variant)


def build(directory: Path) -> None:
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.library import source_digest

    folder = directory / "kernels" / source_digest() / "sm_90"
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in _kernels():
        (folder / f"{name}.ptx").write_text(compile_to_ptx(make()))


def run(directory: Path) -> None:
    import torch

    from mlir_tile.kernels import attention_varlen
    from mlir_tile.kernels.flash.masks import sliding_window

    sizes = lengths()
    tokens, longest = sum(sizes), max(sizes)
    offsets = torch.tensor([0, *torch.tensor(sizes).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    q = torch.randn(tokens, HEADS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(tokens, KV_HEADS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    grad, window = torch.randn_like(q), sliding_window(WINDOW - 1)

    def step(**options):
        o, _ = attention_varlen(q, k, v, offsets, offsets, longest, longest, **options)
        return torch.autograd.grad(o, (q, k, v), grad)

    calls = {"window": lambda: step(variant=window), "causal": lambda: step(causal=True)}
    seconds, conditions = sustained_interleaved(calls)
    scores = {"window": sum(min(i + 1, WINDOW) for n in sizes for i in range(n)),
              "causal": sum(n * (n + 1) // 2 for n in sizes)}
    row = {"tokens": tokens, "sequences": len(sizes), "longest": longest, "heads": HEADS, "kv_heads": KV_HEADS, "d": D,
           "window": WINDOW, **conditions,
           **{f"{name}, ms": round(1e3 * time, 4) for name, time in seconds.items()},
           **{f"{name}, TFLOP/s": round(3.5 * 4 * D * HEADS * scores[name] / seconds[name] / 1e12, 1)
              for name in seconds},
           "window vs causal, time": round(seconds["causal"] / seconds["window"], 3)}
    print(json.dumps(row), flush=True)
    (directory / "attention_varlen_training.json").write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))
