"""`python -m mlir_tile.kernels.ship [FOLDER]`: the PTX of every kernel `matmul` and `attention` may pick, per
chip, into FOLDER (by default the package's `shipped/`, which the wheel packs: `make wheel`), so that an install
without the compiler runs them. Needs the `compiler` extra; kernels already there are kept while the library's
sources are the ones they were built from.
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from mlir_tile.isa.targets import LIBRARY_CHIPS
from mlir_tile.kernels.flash import backward as flash_backward
from mlir_tile.kernels.flash import launch as flash_launch
from mlir_tile.kernels.gemm import launch as gemm_launch, quantize
from mlir_tile.kernels.library import SHIPPED, source_digest

CHIPS = LIBRARY_CHIPS


def kernels(chip: str) -> list:
    """(name, build) of the kernels shipped for `chip`."""
    return (list(gemm_launch.shipped_kernels(chip)) + list(flash_launch.shipped_kernels(chip))
            + list(flash_backward.shipped_kernels(chip)) + list(quantize.shipped_kernels(chip)))


def _build(job: tuple[str, str, str]) -> str:
    folder, chip, name = job
    from mlir_tile.compiler.compile import compile_to_ptx

    build = dict(kernels(chip))[name]
    target = Path(folder) / chip / f"{name}.ptx"
    partial = target.with_suffix(".part")
    partial.write_text(compile_to_ptx(build()))
    partial.replace(target)
    return name


def ship(folder: Path, chips=CHIPS, jobs: int | None = None) -> int:
    """Builds the kernels missing from `folder` (all of them where its PTX was built from other sources than
    these: the folder's SOURCES holds their `source_digest`); returns how many it built."""
    stamp, digest = folder / "SOURCES", source_digest()
    if stamp.exists() and stamp.read_text() != digest:
        for stale in folder.glob("*/*.ptx"):
            stale.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)
    missing = []
    for chip in chips:
        (folder / chip).mkdir(parents=True, exist_ok=True)
        missing += [(str(folder), chip, name) for name, _ in kernels(chip) if not (folder / chip / f"{name}.ptx").exists()]
    with ProcessPoolExecutor(jobs or os.cpu_count()) as pool:
        for done, name in enumerate(pool.map(_build, missing), 1):
            print(f"[{done}/{len(missing)}] {name}", flush=True)
    return len(missing)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default=str(SHIPPED), help=f"where (default {SHIPPED})")
    parser.add_argument("--chips", nargs="+", choices=CHIPS, default=list(CHIPS))
    parser.add_argument("--jobs", type=int, help="build processes (default: one per core)")
    arguments = parser.parse_args()
    ship(Path(arguments.folder), arguments.chips, arguments.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
