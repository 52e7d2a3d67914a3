"""`python -m mlir_tile.kernels.attention`: the attention family's command line (`mlir_tile.kernels.flash`).

This package's name `attention` is the torch function, so this module is only run, never imported.
"""
import sys

if __name__ == "__main__":
    from mlir_tile.kernels.flash.__main__ import main

    sys.exit(main())
