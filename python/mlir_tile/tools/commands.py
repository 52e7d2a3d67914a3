"""The console scripts (`tile-opt`, `tile-translate`, `mlir-opt`): each runs its tool where the compiler is
installed and, in a runtime-only install (a GPU host without MLIR), says in one line which extra it needs
instead of dying on an import. Imports no MLIR itself."""
from __future__ import annotations

import importlib
import importlib.util
import sys

# mlir-tile is installed from its wheel or its source tree (it is on no package index)
COMPILER_EXTRA = "install mlir-tile with its compiler extra (pip install 'WHEEL[compiler]', or pip install -e '.[compiler]' in the source tree)"


def _command(name: str, module: str, function: str):
    def run() -> int | None:
        try:
            compiler = importlib.util.find_spec("mlir") is not None
        except (ImportError, ValueError):
            compiler = False
        if not compiler:
            print(f"{name}: needs the MLIR compiler, which this install does not have; {COMPILER_EXTRA}",
                  file=sys.stderr)
            return 1
        return getattr(importlib.import_module(module), function)()
    run.__name__ = name.replace("-", "_")
    return run


tile_opt = _command("tile-opt", "mlir_tile.tools.tile_opt", "main")
tile_translate = _command("tile-translate", "mlir_tile.tools.tile_translate", "main")
mlir_opt = _command("mlir-opt", "mlir_tile.tools.upstream", "mlir_opt")
