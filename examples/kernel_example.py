"""The command line the kernel examples share (mma_tile.py, mma_s8.py, dynamic_shared.py): build the PTX here,
run it on a GPU host (which has no MLIR), or check the transfers on the reference model (no GPU, no MLIR)."""
from __future__ import annotations

import argparse
import re
from typing import Callable


def main(doc: str, build_module: Callable, run_and_check: Callable[[str], tuple[bool, str]],
         emulate: Callable[[], str] | None = None, shown: str = r"(ldmatrix|stmatrix|mma)\.") -> int:
    """--emulate: `emulate()`, printing the line it returns; --ptx-out FILE: the kernel's PTX (needs MLIR);
    --demo: the PTX's lines matching `shown`, then the GPU run where there is a GPU; --run-ptx FILE: the GPU
    run of FILE. `run_and_check(ptx)` runs the kernel and returns (whether its output is right, a line
    saying so). Exit status 1 when a GPU run is wrong."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true", help="the kernel's transfers in the PTX; the GPU run if any")
    parser.add_argument("--ptx-out", help="write the PTX here (needs MLIR)")
    parser.add_argument("--run-ptx", help="run this PTX on the GPU (no MLIR needed)")
    if emulate is not None:
        parser.add_argument("--emulate", action="store_true", help="the transfers on the reference model (no GPU)")
    arguments = parser.parse_args()
    if getattr(arguments, "emulate", False):
        print(emulate())
    ptx = None
    if arguments.demo or arguments.ptx_out:
        from mlir_tile.compile import compile_to_ptx

        ptx = compile_to_ptx(build_module())
        if arguments.ptx_out:
            with open(arguments.ptx_out, "w") as stream:
                stream.write(ptx)
        if arguments.demo:
            for line in ptx.splitlines():
                if re.search(shown, line):
                    print(line.strip())
            from mlir_tile.runtime import gpu_available

            if not gpu_available()[0]:
                ptx = None
    if arguments.run_ptx:
        with open(arguments.run_ptx) as stream:
            ptx = stream.read()
    if ptx is not None and (arguments.demo or arguments.run_ptx):
        passed, line = run_and_check(ptx)
        print(line)
        return 0 if passed else 1
    return 0
