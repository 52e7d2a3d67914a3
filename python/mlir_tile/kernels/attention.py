"""`python -m mlir_tile.kernels.attention`: the attention kernel's command line (`flash_attention.main`).

The kernel's builder is `mlir_tile.kernels.flash_attention`: this package's name `attention` is the torch
function, so this module is only run, never imported.
"""
import sys

if __name__ == "__main__":
    from mlir_tile.kernels.flash_attention import main

    sys.exit(main())
