"""The score steps and sinks of `kernels.flash.masks` (softcap, ALiBi, gpt-oss's sinks) beside the plain kernel
of the same shape, in one process: issue 61's target is >= 0.95x the plain kernel for softcap and ALiBi.

    python benchmarks/attention_score_steps.py build DIR   # here (MLIR): the kernels, as the library names them
    python3 benchmarks/attention_score_steps.py run DIR    # GPU host: times (ms), each step's speed over plain

Cases: bf16, [batch, heads, seq, d]; each step causal and not, against the plain kernel with the same
causality (their results: test_attention_variants_gpu.py). Times:
`torch_timing.sustained_interleaved` (back to back, shuffled rounds, medians, the SM clock and power beside).
DIR/attention_score_steps.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from torch_timing import library, sustained_interleaved

CASES = [(4, 32, 4096, 128), (4, 32, 4096, 64), (16, 16, 1024, 128)]  # batch, heads, seq, d


def _steps():
    from mlir_tile.kernels.flash import masks

    return {"softcap": masks.softcap, "alibi": masks.alibi, "sinks": masks.sinks}


def build(directory: Path) -> None:
    """The kernels `HopperAttention` picks for CASES, plain and with each step, into DIR/steps/sm_90."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    folder = directory / "steps" / "sm_90"
    folder.mkdir(parents=True, exist_ok=True)
    for _, _, seq, d in CASES:
        for causal in (False, True):
            config = HopperAttentionConfig.picked(d, causal, "bf16", seq)
            (folder / f"{config}.ptx").write_text(compile_to_ptx(sm90.build_module(config)))
            for step in _steps().values():
                built = compile_to_ptx(sm90.build_module(config, variant=step))
                (folder / f"{config}{step.suffix}.ptx").write_text(built)


def run(directory: Path) -> None:
    import torch

    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.kernels.flash.masks import alibi_slopes
    from mlir_tile.runtime import Runtime

    results = []
    with Runtime() as runtime:
        ours = HopperAttention(library(runtime, directory / "steps"))
        for batch, heads, seq, d in CASES:
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            operands = {"softcap": (30.0,), "alibi": (torch.tensor(alibi_slopes(heads), device="cuda"),),
                        "sinks": (torch.randn(heads, device="cuda"),)}
            for causal in (False, True):
                calls = {"plain": lambda: ours(q, k, v, causal=causal)[0]}
                calls.update({name: (lambda step=step, name=name: ours(q, k, v, causal=causal, variant=step,
                                                                        operands=operands[name])[0])
                              for name, step in _steps().items()})
                seconds, conditions = sustained_interleaved(calls)
                row = {"batch": batch, "heads": heads, "seq": seq, "d": d, "causal": causal, **conditions,
                       **{f"{name}, ms": round(1e3 * time, 4) for name, time in seconds.items()},
                       **{f"{name} vs plain": round(seconds["plain"] / seconds[name], 3) for name in _steps()}}
                print(json.dumps(row), flush=True)
                results.append(row)
                (directory / "attention_score_steps.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))
