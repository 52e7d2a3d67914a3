"""tile-translate: translations out of MLIR.

    tile-translate --mlir-to-ptx [--chip=sm_90] [FILE|-] [-o OUT]
    tile-translate --mlir-to-cubin [--chip=sm_90] [FILE|-] -o OUT

--mlir-to-ptx runs tile-to-ptx{chip=...} on the module and prints the PTX of its gpu.module(s);
--mlir-to-cubin assembles that PTX for the chip with nvJitLink and writes the cubin (binary: -o needed).
Errors are MLIR diagnostics on stderr, with the failed pass and a tile-opt command that reproduces it;
exit status 1.
"""
from __future__ import annotations

import argparse
import os
import sys

from mlir_tile import targets
from mlir_tile.compile import CompileError, compile_to_ptx, cubin_of_ptx, ptx_chip
from mlir_tile.diagnostics import PipelineFailure
from mlir_tile.cli import quiet_on_closed_pipe
from mlir_tile.tools.driver import InputError, Session, read_input

def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tile-translate", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    translation = parser.add_mutually_exclusive_group(required=True)
    translation.add_argument("--mlir-to-ptx", dest="translation", action="store_const", const="ptx",
                             help="print the PTX of the module's gpu.module(s)")
    translation.add_argument("--mlir-to-cubin", dest="translation", action="store_const", const="cubin",
                             help="write the PTX assembled for the chip by nvJitLink (needs -o)")
    parser.add_argument("--chip", help=f"the chip for gpu.modules that name none (default {targets.DEFAULT_CHIP}); "
                                       f"one that names another chip is an error")
    parser.add_argument("-o", dest="output", default="-", help="output file (default: standard output)")
    parser.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    return parser


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    translation, chip, source, output = options.translation, options.chip, options.input, options.output
    if translation == "cubin" and output == "-":
        parser.error("--mlir-to-cubin writes a binary file: give -o OUT")
    try:
        text, source_name = read_input(source)
        with Session() as session:
            ptx = compile_to_ptx(session.parse(text, source_name), chip, source_name=source_name)
        result = cubin_of_ptx(ptx, ptx_chip(ptx)) if translation == "cubin" else ptx
    except InputError as error:
        print(f"tile-translate: {error}", file=sys.stderr)
        return 1
    except PipelineFailure as failure:
        print(failure.report(source_name), file=sys.stderr)
        return 1
    except CompileError as error:
        print(error, file=sys.stderr)
        return 1
    except Exception as error:  # a bug in tile-translate itself: one line, not a traceback
        if os.environ.get("TILE_DEBUG"):
            raise
        print(f"tile-translate: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if output == "-":
        sys.stdout.write(result)
    else:
        with open(output, "wb" if isinstance(result, bytes) else "w") as stream:
            stream.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
