"""mlir-tile: ldmatrix/stmatrix tile transfers described by layouts.

`import mlir_tile` loads no MLIR: the layout notation is imported here, the compiler entry point on first
use, so GPU hosts without the MLIR wheels can use `mlir_tile.runtime` and `mlir_tile.models.reference`.
"""
from mlir_tile.algebra.layout import Layout, S, laneid, warpid

__all__ = ["Layout", "S", "compile_to_cubin", "compile_to_ptx", "laneid", "warpid"]


def __getattr__(name: str):
    if name in ("compile_to_ptx", "compile_to_cubin"):
        from mlir_tile.compiler import compile

        return getattr(compile, name)
    raise AttributeError(f"module 'mlir_tile' has no attribute {name!r}")
