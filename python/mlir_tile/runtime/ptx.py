"""PTX -> cubin in-process with nvJitLink (the CUDA toolkit's ptxas as a library; no GPU needed), with an
on-disk cache of the results, and the error type of every compile step. Imports no MLIR, so GPU hosts can
assemble PTX too.

The cache keeps each cubin under the hash of its PTX text and chip, in `$MLIR_TILE_CACHE_DIR` (default
`$XDG_CACHE_HOME/mlir-tile`, else `~/.cache/mlir-tile`); `MLIR_TILE_NO_CACHE=1` turns it off. It answers
for a kernel assembled before, in this process or another, as the CUDA driver's JIT cache does for PTX. It
is keyed on the PTX, not on the nvJitLink version: a cubin from an older assembler is still a valid cubin
for its chip; delete the folder to assemble everything anew.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from mlir_tile.isa import targets

ELF_MAGIC = b"\x7fELF"
_CACHE_FORMAT = "mlir-tile cubin 1"


class CompileError(RuntimeError):
    """A compile step failed; the message holds the diagnostics (and, for a pass, a tile-opt command)."""


def cache_directory() -> Path | None:
    """Where cubins are cached; None when MLIR_TILE_NO_CACHE is set to anything but 0 or empty."""
    if os.environ.get("MLIR_TILE_NO_CACHE", "0") not in ("", "0"):
        return None
    if os.environ.get("MLIR_TILE_CACHE_DIR"):
        return Path(os.environ["MLIR_TILE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlir-tile"


def cubin_of_ptx(ptx: str, chip: str = targets.DEFAULT_CHIP) -> bytes:
    """`ptx` assembled for `chip`: a cubin that a GPU host of that chip loads without JIT-compiling anything.
    Answered from the cache when the same PTX was assembled for the same chip before."""
    problem = targets.chip_problem(chip)  # nvJitLink ends the process on some malformed names (sm_9)
    if problem:
        raise CompileError(f"chip {problem}")
    directory = cache_directory()
    entry = None
    if directory is not None:
        key = hashlib.sha256(f"{_CACHE_FORMAT}\0{chip}\0{ptx}".encode()).hexdigest()
        entry = directory / "cubin" / f"{key}.cubin"
        cached = _read(entry)
        if cached is not None:
            return cached
    cubin = _assemble(ptx, chip)
    if entry is not None:
        _write(entry, cubin)
    return cubin


def _assemble(ptx: str, chip: str) -> bytes:
    from cuda.core import Program, ProgramOptions

    try:
        return Program(ptx, "ptx", ProgramOptions(arch=chip)).compile("cubin").code
    except Exception as error:  # nvJitLink reports through exceptions whose text holds the ptxas log
        raise CompileError(f"PTX -> cubin for {chip} failed: {str(error).strip(chr(0)).strip()}") from None


def _read(entry: Path) -> bytes | None:
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    return data if data.startswith(ELF_MAGIC) else None  # anything else is not ours: assemble again


def _write(entry: Path, cubin: bytes) -> None:
    """Atomically (a reader never sees half a file); a cache that cannot be written is no cache, not an error."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".partial")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(cubin)
        os.replace(temporary, entry)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
