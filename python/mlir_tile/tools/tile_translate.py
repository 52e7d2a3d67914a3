"""tile-translate: translations out of MLIR.

    tile-translate --mlir-to-ptx [--chip=sm_90] [FILE|-] [-o OUT]
    tile-translate --mlir-to-cubin [--chip=sm_90] [FILE|-] -o OUT

--mlir-to-ptx runs tile-to-ptx{chip=...} on the module and prints the PTX of its gpu.module(s);
--mlir-to-cubin assembles that PTX for the chip with nvJitLink and writes the cubin (binary: -o needed).
Errors are MLIR diagnostics on stderr, with the failed pass and a tile-opt command that reproduces it;
exit status 1.
"""
from __future__ import annotations

import os
import sys

from mlir_tile import targets
from mlir_tile.compile import CompileError, compile_to_ptx, cubin_of_ptx
from mlir_tile.pipeline import PipelineFailure
from mlir_tile.tools.driver import InputError, Session, read_input

USAGE = "usage: tile-translate (--mlir-to-ptx [-o OUT] | --mlir-to-cubin -o OUT) [--chip=sm_90] [FILE|-]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    translation, chip, source, output = None, targets.DEFAULT_CHIP, "-", "-"
    arguments = iter(argv)
    for argument in arguments:
        if argument in ("--mlir-to-ptx", "--mlir-to-cubin"):
            translation = argument
        elif argument.startswith("--chip="):
            chip = argument.split("=", 1)[1]
        elif argument == "-o":
            output = next(arguments, "-")
        elif argument in ("-h", "--help"):
            print(__doc__)
            return 0
        elif argument.startswith("-") and argument != "-":
            print(f"tile-translate: unknown option '{argument}'\n{USAGE}", file=sys.stderr)
            return 1
        else:
            source = argument
    if translation is None:
        print(f"tile-translate: no translation selected\n{USAGE}", file=sys.stderr)
        return 1
    if translation == "--mlir-to-cubin" and output == "-":
        print(f"tile-translate: --mlir-to-cubin writes a binary file: give -o OUT\n{USAGE}", file=sys.stderr)
        return 1
    try:
        text, source_name = read_input(source)
        module = Session().parse(text, source_name)
        ptx = compile_to_ptx(module, chip, source_name=source_name)
        result = cubin_of_ptx(ptx, chip) if translation == "--mlir-to-cubin" else ptx
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
