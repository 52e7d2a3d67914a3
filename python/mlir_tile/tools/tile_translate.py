"""tile-translate: translations out of MLIR.

    tile-translate --mlir-to-ptx [--chip=sm_90] [--split-input-file] [FILE|-] [-o OUT | --output-dir DIR]
    tile-translate --mlir-to-cubin [--chip=sm_90] [--split-input-file] [FILE|-] (-o OUT | --output-dir DIR)

--mlir-to-ptx runs tile-to-ptx{chip=...} on the module and writes the PTX of every gpu.module for each of its
NVVM targets (as gpu-module-to-binary makes them); --mlir-to-cubin assembles each for its chip with nvJitLink.
One text is written as it is. Several go to --output-dir as <module>.<chip>.ptx (or .cubin), or, as PTX to
one output, each after a `// gpu.module @<module> for <chip>` line, separated by `// -----` lines (the
split marker of MLIR's tools: split the output there). Errors are MLIR diagnostics on stderr, at the line
of the input that they concern, with the failed pass; exit status 1.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mlir_tile.isa import targets
from mlir_tile.tools.cli import OutputError, quiet_on_closed_pipe, write_output
from mlir_tile.compiler.compile import PipelineError, PtxText, compile_to_ptx_texts
from mlir_tile.compiler.diagnostics import PipelineFailure
from mlir_tile.runtime.ptx import CompileError, cubin_of_ptx
from mlir_tile.tools.driver import InputError, Session, read_input, split_buffer

SEPARATOR = "// -----\n"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tile-translate", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    translation = parser.add_mutually_exclusive_group(required=True)
    translation.add_argument("--mlir-to-ptx", dest="translation", action="store_const", const="ptx",
                             help="write the PTX of every gpu.module, for each of its NVVM targets")
    translation.add_argument("--mlir-to-cubin", dest="translation", action="store_const", const="cubin",
                             help="write each PTX assembled for its chip by nvJitLink (needs -o or --output-dir)")
    parser.add_argument("--chip", type=_chip, help=f"the chip for gpu.modules that name none (default "
                                                   f"{targets.DEFAULT_CHIP}); one that names another chip is an error")
    parser.add_argument("--split-input-file", action="store_true",
                        help="split the input at '// -----' and translate each part on its own")
    parser.add_argument("--mlir-pass-pipeline-crash-reproducer", dest="reproducer", metavar="FILE",
                        help="when a pass fails, write the IR it received to FILE")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-o", dest="output", default="-", help="output file (default: standard output)")
    output.add_argument("--output-dir", type=Path, help="write each text to DIR/<module>.<chip>.ptx (or .cubin)")
    parser.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    return parser


def _chip(text: str) -> str:
    try:
        return targets.require_chip(text)
    except targets.TargetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if options.translation == "cubin" and options.output == "-" and options.output_dir is None:
        parser.error("--mlir-to-cubin writes binary files: give -o OUT or --output-dir DIR")
    status, texts = 0, []
    try:
        text, source_name = read_input(options.input)
        for chunk, first_line in split_buffer(text, options.split_input_file):
            try:
                with Session() as session:
                    texts += compile_to_ptx_texts(session.parse(chunk, source_name), options.chip,
                                                  source_name=source_name)
            except (PipelineFailure, PipelineError) as error:
                failure = error.failure if isinstance(error, PipelineError) else error
                print(failure.shifted(first_line, source_name).report(source_name, options.reproducer), file=sys.stderr)
                status = 1
            except CompileError as error:
                print(error, file=sys.stderr)
                status = 1
        if texts:
            _write(texts, options)
    except InputError as error:
        print(f"tile-translate: {error}", file=sys.stderr)
        return 1
    except (CompileError, OutputError) as error:
        print(f"tile-translate: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # a bug in tile-translate itself: one line, not a traceback
        if os.environ.get("TILE_DEBUG"):
            raise
        print(f"tile-translate: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return status


def _write(texts: list[PtxText], options) -> None:
    cubin = options.translation == "cubin"
    results = [(text, cubin_of_ptx(text.text, text.chip) if cubin else text.text) for text in texts]
    if options.output_dir is not None:
        try:
            options.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(f"cannot make the folder '{options.output_dir}': {error.strerror or error}") from None
        for text, result in results:
            path = options.output_dir / f"{text.module}.{text.chip}.{'cubin' if cubin else 'ptx'}"
            write_output(str(path), result if cubin else result.encode())
        return
    if cubin and len(results) > 1:
        names = ", ".join(f"@{text.module} ({text.chip})" for text, _ in results)
        raise CompileError(f"the input makes {len(results)} cubins ({names}) and -o names one file: use --output-dir")
    if cubin:
        write_output(options.output, results[0][1])
        return
    written = results[0][1] if len(results) == 1 else SEPARATOR.join(
        f"// gpu.module @{text.module} for {text.chip}\n{result}" for text, result in results)
    write_output(options.output, written.encode())


if __name__ == "__main__":
    sys.exit(main())
