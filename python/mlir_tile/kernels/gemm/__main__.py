"""C = A x B on tensor cores, written with the builder alone: fp16 or bf16 in, fp32 accumulate, the input type
out; A row-major M x K, B row-major K x N (or N x K: the weight of torch.nn.functional.linear), C row-major
M x N, any M, N, K >= 1.

    python -m mlir_tile.kernels.gemm --demo               # the main loop's transfers and mma in the PTX; a GPU run if any
    python -m mlir_tile.kernels.gemm --ptx-out g.ptx      # needs MLIR
    python -m mlir_tile.kernels.gemm --run-ptx g.ptx      # needs a GPU, no MLIR: a 1000 x 1016 x 504 product checked
    python -m mlir_tile.kernels.gemm --emulate            # a CTA's transfers and product on the reference model

Options choose the kernel: --dtype f16|bf16, --b-major kn|nk (B as [K, N] or [N, K]), --align 16|8|4|2 (the
bytes rows start on; 2: any sizes), --tile (one of `Matmul`'s, e.g. 128x256x64s4) and --arch (sm_90, the
default: the mma.sync kernel, `sm80`; sm_90a: `sm90`'s, TMA and wgmma, its tile HopperConfig's fields as
options over the element's: --bn 256 --stages 3 --persistent --cluster 2, ...); and the
product the GPU run checks: --shape M N K. --ptx-out records the kernel's options in the PTX's first line, and --run-ptx runs
the PTX as built (`python -m mlir_tile.kernels.gemm --ptx-out g.ptx --dtype bf16 --b-major nk`, then on the GPU host
`python -m mlir_tile.kernels.gemm --run-ptx g.ptx --shape 4096 4096 4096`).
"""
from __future__ import annotations

import sys

from mlir_tile.isa.targets import HOPPER_CHIP, WARPGROUP_CHIP
from mlir_tile.kernels.gemm import checks, emulation, sm80, sm90, sm90_emulation, sm90_tiles
from mlir_tile.kernels.gemm.checks import SHAPE
from mlir_tile.kernels.gemm.sm80_tiles import DEFAULT_TILE


def add_options(parser) -> tuple[str, ...]:
    from mlir_tile.isa.halves import ELEMENTS
    from mlir_tile.kernels.command_line import add_fields

    parser.add_argument("--dtype", choices=ELEMENTS + ("e4m3",), default="f16",
                        help="A's, B's and C's element type (default f16; e4m3: A and B, C bf16, with --arch sm_90a "
                             "and B [N, K])")
    parser.add_argument("--b-major", choices=("kn", "nk"), default="kn",
                        help="B given as [K, N] (kn, the default) or [N, K] (nk: torch.nn.functional.linear's weight)")
    parser.add_argument("--align", type=int, choices=(16, 8, 4, 2), default=16,
                        help="bytes every row starts on: N and K multiples of align / 2 (default 16; 2: any sizes)")
    parser.add_argument("--tile", default=None,
                        help=f"the mma.sync path's CTA tile, one of Matmul's by name (default {DEFAULT_TILE})")
    parser.add_argument("--arch", choices=(HOPPER_CHIP, WARPGROUP_CHIP), default=HOPPER_CHIP,
                        help=f"{HOPPER_CHIP}: the mma.sync path (cp.async, ldmatrix); {WARPGROUP_CHIP}: Hopper's (TMA, "
                             f"wgmma, TMA stores; rows on 16 bytes)")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"), default=SHAPE,
                        help=f"the product the GPU run checks (default {' '.join(map(str, SHAPE))})")
    fields = add_fields(parser, sm90_tiles.HopperConfig, ("b_major", "element_bits", "row_scales"),
                        "the element's tile, sm90_tiles.default_tile; with --arch sm_90a")
    return ("dtype", "b_major", "align", "tile", "arch", *fields)


def main() -> int:
    from mlir_tile.kernels.command_line import main as example_main

    def build(dtype, b_major, align, tile, arch, **fields):
        if arch == WARPGROUP_CHIP:
            if align != 16:
                raise ValueError("gemm: Hopper's path (TMA) takes rows on 16 bytes: --align 16")
            return sm90.build_module(dtype, checks.hopper_tile(dtype, b_major, tile, fields))
        return sm80.build_module(dtype, checks.sm80_config(dtype, b_major, align=align, tile=tile, fields=fields))

    def emulate_cta(dtype, b_major, align, tile, shape, arch, **fields):  # one CTA, the shape aside
        if arch == WARPGROUP_CHIP:
            return sm90_emulation.emulate(checks.hopper_tile(dtype, b_major, tile, fields), 2, dtype)
        config = checks.sm80_config(dtype, b_major, align=align, tile=tile, fields=fields)
        return emulation.emulate(config, 2 if config.bk == 32 else 1, dtype)

    return example_main(__doc__, build, checks.run_and_check, emulate_cta, options=add_options)


if __name__ == "__main__":
    sys.exit(main())
