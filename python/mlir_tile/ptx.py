"""PTX -> cubin in-process with nvJitLink (the CUDA toolkit's ptxas as a library; no GPU needed), and the
error type of every compile step. Imports no MLIR, so GPU hosts can assemble PTX too."""
from __future__ import annotations

from mlir_tile.contract import CHIP


class CompileError(RuntimeError):
    """A compile step failed; the message holds the diagnostics (and, for a pass, a tile-opt command)."""


def cubin_of_ptx(ptx: str, chip: str = "sm_90") -> bytes:
    """`ptx` assembled for `chip`: a cubin that a GPU host of that chip loads without JIT-compiling anything."""
    from cuda.core import Program, ProgramOptions

    if not CHIP.fullmatch(chip):  # nvJitLink ends the process on some malformed names (sm_9)
        raise CompileError(f"chip '{chip}' is not of the form sm_XX (e.g. sm_90)")
    try:
        return Program(ptx, "ptx", ProgramOptions(arch=chip)).compile("cubin").code
    except Exception as error:  # nvJitLink reports through exceptions whose text holds the ptxas log
        raise CompileError(f"PTX -> cubin for {chip} failed: {str(error).strip(chr(0)).strip()}") from None
