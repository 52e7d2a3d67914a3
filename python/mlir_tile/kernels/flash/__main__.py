"""FlashAttention-2's forward pass, written with the builder alone: O = softmax(Q K^T * scale (+ causal mask)) V
and the log-sum-exp of each row, fp16 or bf16, head dims 64 and 128, any sequence length.

    python -m mlir_tile.kernels.attention --demo            # the main loop's transfers and mma in the PTX; a GPU run if any
    python -m mlir_tile.kernels.attention --ptx-out a.ptx   # needs MLIR
    python -m mlir_tile.kernels.attention --run-ptx a.ptx   # needs a GPU, no MLIR: one case against numpy
    python -m mlir_tile.kernels.attention --emulate         # a CTA on the reference model against numpy, no GPU

Options choose the kernel: --dtype f16|bf16, --head-dim 64|128, --causal, --tuned (the CTA `Attention` runs);
with --arch sm_90a Hopper's, whose configuration's fields are options too (--persistent, --consumers 3, ...);
and the case the GPU run checks: --batch, --heads, --seq. --ptx-out records the kernel's options in the PTX's
first line and --run-ptx runs the PTX as built (`--ptx-out a.ptx --head-dim 128 --causal --tuned`, then on the
GPU host `--run-ptx a.ptx --batch 2 --heads 16 --seq 4097`).
"""
from __future__ import annotations

import sys

from mlir_tile.isa.targets import PORTABLE_CHIP, WARPGROUP_CHIP
from mlir_tile.kernels.flash.checks import CASE, configure, run_and_check
from mlir_tile.kernels.flash.emulation import emulate
from mlir_tile.kernels.flash.sm80 import build_module


def add_options(parser) -> tuple[str, ...]:
    from mlir_tile.isa.halves import ELEMENTS
    from mlir_tile.kernels.command_line import add_fields
    from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig

    parser.add_argument("--dtype", choices=(*ELEMENTS, "e4m3"), default="f16",
                        help="q's, k's, v's and O's element type (default f16; e4m3 with --arch sm_90a: O in bf16)")
    parser.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=64, help="d (default 64; 256 with --arch sm_90a)")
    parser.add_argument("--causal", action="store_true", help="the causal mask")
    parser.add_argument("--tuned", action="store_true", help="the CTA `Attention` runs for d and the mask (TUNED's)")
    parser.add_argument("--arch", choices=(PORTABLE_CHIP, WARPGROUP_CHIP), default=PORTABLE_CHIP,
                        help=f"{PORTABLE_CHIP}: mma.sync (FlashAttention-2's form, any {PORTABLE_CHIP} or newer GPU); "
                             f"{WARPGROUP_CHIP}: Hopper's path (TMA, wgmma, a producer warpgroup; `flash.sm90`)")
    parser.add_argument("--batch", type=int, default=1, help="the GPU run's batch (default 1)")
    parser.add_argument("--heads", type=int, default=CASE[0], help=f"the GPU run's heads (default {CASE[0]})")
    parser.add_argument("--seq", type=int, default=CASE[1],
                        help=f"positions of the GPU run and of --emulate's case, its first CTA (default {CASE[1]})")
    fields = add_fields(parser, HopperAttentionConfig, ("head_dim", "causal", "element"),
                        "the head dim's; with --arch sm_90a")
    return ("dtype", "head_dim", "causal", "tuned", "arch", *fields)


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    def build(dtype, head_dim, causal, tuned, arch, **fields):
        config = configure(dtype, head_dim, causal, tuned, arch, **fields)
        if arch == WARPGROUP_CHIP:
            from mlir_tile.kernels.flash import sm90 as flash_sm90

            return flash_sm90.build_module(config)
        return build_module(config)

    def emulate_cta(dtype, head_dim, causal, tuned, batch, heads, seq, arch, **fields):  # one CTA of one head
        if arch == WARPGROUP_CHIP:
            raise ValueError("attention: --emulate models the sm_80 kernel; Hopper's runs on the GPU (--run-ptx)")
        return emulate(configure(dtype, head_dim, causal, tuned, **fields), seq, causal)

    return example_main(__doc__, build, run_and_check, emulate_cta, options=add_options)


if __name__ == "__main__":
    sys.exit(main())
