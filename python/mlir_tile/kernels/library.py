"""Where the library's kernels come from: the PTX the wheel ships (built by `python -m
mlir_tile.kernels.ship`), else a disk cache of kernels built here before, else a build with the compiler
(the `compiler` extra) into that cache. A runtime-only install without the kernel asks for the extra.

PTX is kept per chip: `targets.HOPPER_CHIP` (Hopper: C through stmatrix) and `targets.PORTABLE_CHIP` (any
other chip from Ampere on: the driver compiles its PTX for the device). A kernel's name says what it computes
(element type, tile, epilogue with its code's fingerprint); the cache's folder is a digest of the library's
sources (`source_digest`), so an edited library never runs a stale kernel.
"""
from __future__ import annotations
from mlir_tile.isa.targets import HOPPER_CHIP, PORTABLE_CHIP

import functools
import hashlib
import os
import threading
from pathlib import Path
from typing import Callable

PACKAGE = Path(__file__).resolve().parents[1]  # mlir_tile
SHIPPED = Path(__file__).resolve().parent / "shipped"


class KernelNotAvailable(RuntimeError):
    """A kernel that is neither shipped nor cached, where the compiler is not installed."""


def chip_of(capability: tuple[int, int]) -> str:
    """The chip whose PTX runs on a device of this compute capability."""
    if tuple(capability) < (8, 0):
        raise KernelNotAvailable(f"mlir-tile's kernels need an sm_80 or newer GPU; this one is sm_{capability[0]}"
                                 f"{capability[1]}")
    return HOPPER_CHIP if tuple(capability) == (9, 0) else PORTABLE_CHIP


def source_digest() -> str:
    """A digest of the library's Python sources (all that a kernel's build runs through: the package, its
    dialect and passes), the same in a checkout and in the wheel."""
    from importlib.util import find_spec

    digest = hashlib.sha256()
    for package in ("mlir_tile", "mlir_tile.dialect", "mlir_tile.passes"):
        spec = find_spec(package)
        # a checkout on the path without its editable install: the folders beside python/, as that install maps them
        beside = [PACKAGE.parents[1] / package.rsplit(".", 1)[1]] if spec is None and package != "mlir_tile" else []
        for folder in spec.submodule_search_locations if spec is not None else [f for f in beside if f.is_dir()]:
            for path in sorted(Path(folder).glob("*.py" if package != "mlir_tile" else "**/*.py")):
                relative = path.relative_to(folder)
                if package == "mlir_tile" and relative.parts[0] in ("dialect", "passes"):
                    continue  # (inside the package in the wheel, beside it in a checkout)
                digest.update(f"{package}/{relative}".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_folder() -> Path | None:
    """Where kernels built here are kept: `kernels/<source_digest>` in mlir-tile's cache (`ptx.cache_directory`:
    MLIR_TILE_CACHE_DIR, else the user's cache folder); None where MLIR_TILE_NO_CACHE turns it off."""
    from mlir_tile.runtime.ptx import cache_directory

    root = cache_directory()
    return None if root is None else root / "kernels" / source_digest()


@functools.cache  # (asked on every ready-made epilogue's call)
def compiler_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("mlir") is not None and find_spec("mlir.ir") is not None


class KernelLibrary:
    """PTX by (chip, name), loaded once per runtime: `module(name, build)`, where `build()` returns the kernel's
    MLIR module (called only where the PTX is neither shipped nor cached)."""

    def __init__(self, runtime, chip: str | None = None, shipped: Path = SHIPPED, cache: Path | None = None):
        self.runtime = runtime
        self.chip = chip or chip_of(runtime.device.compute_capability)
        self.shipped, self._cache, self.modules, self._lock = shipped, cache, {}, threading.Lock()

    @property
    def cache(self) -> Path | None:  # (looked up each time: only for a kernel not loaded yet)
        return self._cache if self._cache is not None else cache_folder()

    def module(self, name: str, build: Callable):
        with self._lock:
            if name not in self.modules:
                self.modules[name] = self.runtime.load_ptx(self.ptx(name, build), name=name)
            return self.modules[name]

    def ptx(self, name: str, build: Callable) -> str:
        file = f"{self.chip}/{name}.ptx"
        shipped = self.shipped / file
        if shipped.is_file():
            return shipped.read_text()
        cached = None if self.cache is None else self.cache / file
        if cached is not None and cached.is_file():
            return cached.read_text()
        if not compiler_installed():
            raise KernelNotAvailable(f"the kernel {name} for {self.chip} is not among the kernels this install ships; "
                                     f"install mlir-tile with its compiler extra to build it (pip install "
                                     f"'WHEEL[compiler]', or pip install -e '.[compiler]' in the source tree)")
        from mlir_tile.compiler.compile import compile_to_ptx

        ptx = compile_to_ptx(build())
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.part")
            partial.write_text(ptx)
            partial.replace(cached)  # whole or absent, where processes build at once
        return ptx
