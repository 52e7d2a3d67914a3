"""Sliding-window attention on the extension points (examples/sliding_window.py's variant) beside
FlexAttention's sliding window (torch.compile'd, its block mask made once), and the full causal attention of
ours and cuDNN's, in one process.

    python benchmarks/attention_window.py build DIR   # here (MLIR): the kernels, as the library names them
    python3 benchmarks/attention_window.py run DIR    # GPU host: times (ms) and the window's speed over theirs

Each case: causal, window 1024 (a query sees itself and the 1023 keys before it), bf16; outputs checked against
FlexAttention's. Times: `torch_timing.sustained_interleaved` (back to back, the calls taking turns in
shuffled rounds, medians, the SM clock and power beside). DIR/attention_window.json.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from torch_timing import library, sustained_interleaved

CASES = [(4, 32, 4096, 128), (2, 32, 8192, 128), (4, 32, 4096, 64), (1, 32, 16384, 128)]  # batch, heads, seq, d
WINDOW = 1024
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sliding_window.py"


def _local():
    spec = importlib.util.spec_from_file_location("sliding_window", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.WINDOW == WINDOW
    return module.local


def build(directory: Path) -> None:
    """The window's kernels and the full causal ones `HopperAttention` picks for CASES, into DIR/window/sm_90."""
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.kernels.flash import sm90
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    folder, local = directory / "window" / "sm_90", _local()
    folder.mkdir(parents=True, exist_ok=True)
    for _, _, seq, d in CASES:
        window, causal = (HopperAttentionConfig.picked(d, causal, "bf16", seq) for causal in (False, True))
        (folder / f"{window}{local.suffix}.ptx").write_text(compile_to_ptx(sm90.build_module(window, variant=local)))
        (folder / f"{causal}.ptx").write_text(compile_to_ptx(sm90.build_module(causal)))


def run(directory: Path) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from mlir_tile.kernels.flash.launch import HopperAttention
    from mlir_tile.runtime import Runtime

    def sliding(b, h, q_index, kv_index):
        return (kv_index <= q_index) & (q_index - kv_index < WINDOW)

    flex, local, results = torch.compile(flex_attention), _local(), []
    with Runtime() as runtime:
        ours = HopperAttention(library(runtime, directory / "window"))
        for batch, heads, seq, d in CASES:
            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            mask = create_block_mask(sliding, None, None, seq, seq)

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            calls = {"ours, window": lambda: ours(q, k, v, variant=local)[0],
                     "FlexAttention, window": lambda: flex(q, k, v, block_mask=mask),
                     "ours, causal": lambda: ours(q, k, v, causal=True)[0], "cuDNN, causal": cudnn}
            difference = float((calls["ours, window"]().float() - calls["FlexAttention, window"]().float()).abs().max())
            seconds, conditions = sustained_interleaved(calls)
            row = {"batch": batch, "heads": heads, "seq": seq, "d": d, **conditions,
                   **{f"{name}, ms": round(1e3 * time, 4) for name, time in seconds.items()},
                   "window vs FlexAttention": round(seconds["FlexAttention, window"] / seconds["ours, window"], 3),
                   "window vs our causal": round(seconds["ours, causal"] / seconds["ours, window"], 3),
                   "largest difference from FlexAttention": difference}
            print(json.dumps(row), flush=True)
            results.append(row)
            (directory / "attention_window.json").write_text(json.dumps(results, indent=1))
            torch.cuda.empty_cache()


if __name__ == "__main__":
    {"build": build, "run": run}[sys.argv[1]](Path(sys.argv[2]))
