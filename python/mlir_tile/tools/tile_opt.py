"""tile-opt: an mlir-opt for the tile dialect.

With no pass it parses, verifies and prints. Passes come as flags in the order given (`--canonicalize`,
`--tile-to-nvvm`, `--pass{opt=val}`, `--pass=opt=val`, single-dash spellings too) or as one
`--pass-pipeline='builtin.module(...)'`; both mix tile passes, the named pipelines tile-to-nvvm / tile-to-ptx
and any upstream pass. Errors are MLIR diagnostics on stderr (file:line:col) and exit status 1.
"""
from __future__ import annotations

import argparse
import os
import re
import sys


from mlir_tile.passes import PASSES, PIPELINES
from mlir_tile.compiler.diagnostics import Diag, PipelineFailure
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.compiler.pipeline_text import split_elements
from mlir_tile.tools.cli import OutputError, quiet_on_closed_pipe, write_output
from mlir_tile.tools.driver import InputError, Session, read_input, split_buffer
from mlir_tile.tools.upstream import upstream_passes

VERSION = "tile-opt (mlir-tile 0.1.0, MLIR 22)"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tile-opt", description=__doc__.split("\n\n")[1], allow_abbrev=False, add_help=False,
        usage="tile-opt [FILE|-] [-o OUT] [--<pass>[{opts}] ... | --pass-pipeline=PIPELINE] [options]",
        epilog="The passes follow (also: tile-opt --list-passes).")
    parser.add_argument("-h", "--help", action="store_true", help="show this help and the passes, then exit")
    parser.add_argument("input", nargs="?", default="-", help="input file, or - for standard input (default)")
    parser.add_argument("-o", dest="output", default="-", help="output file (default: standard output)")
    parser.add_argument("--pass-pipeline", action="append", default=[], metavar="PIPELINE",
                        help="a textual pass pipeline, builtin.module(...)")
    parser.add_argument("--mlir-pass-pipeline-crash-reproducer", dest="reproducer", metavar="FILE",
                        help="when a pass fails, write the IR it received to FILE (to run that pass alone on it)")
    flags = {
        "--split-input-file": "split the input at '// -----' and process each part on its own",
        "--verify-diagnostics": "check the diagnostics against expected-* comments",
        "--mlir-print-ir-before-all": "print the IR before every pass",
        "--mlir-print-ir-after-all": "print the IR after every pass",
        "--mlir-print-op-generic": "print ops in the generic form",
        "--mlir-print-debuginfo": "print locations",
        "--mlir-timing": "report the time of each pass",
        "--mlir-disable-threading": "run single-threaded (Python passes always do)",
        "--dump-pass-pipeline": "print the pass pipeline before running it",
        "--emit-bytecode": "write MLIR bytecode instead of text",
        "--allow-unregistered-dialect": "accept ops of dialects that are not registered",
        "--list-passes": "list the tile passes and pipelines, and the upstream passes",
    }
    for flag, text in flags.items():
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--version", action="version", version=VERSION)
    return parser


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """Options, with `pipeline`: the pass flags (argparse leaves them over) and --pass-pipeline's elements."""
    parser = argument_parser()
    # mlir-opt takes every long option with one dash too (-split-input-file, -canonicalize)
    argv = ["-" + a if re.match(r"-[A-Za-z][\w.-]+", a) and a != "-o" else a for a in argv]
    options, rest = parser.parse_known_args(argv)
    passes = []
    for argument in rest:
        match = re.fullmatch(r"--([\w.-]+)(?:=(.*)|(\{.*\}))?", argument, re.S)
        if not match:
            parser.error(f"unrecognized argument '{argument}'")
        name, value, braces = match.groups()
        passes.append(name + (braces or (f"{{{value}}}" if value else "")))
    if passes and options.pass_pipeline:
        parser.error("--pass-pipeline cannot be used with individual pass flags")
    if options.emit_bytecode and options.split_input_file:
        parser.error("--emit-bytecode writes one module: it cannot be used with --split-input-file")
    try:
        options.pipeline = passes + [e for text in options.pass_pipeline for e in split_elements(text)]
    except ValueError as error:
        parser.error(str(error))
    return options


# As in mlir-opt: `expected-error@+1 {{text}}` matches text as a substring; `expected-error-re@+1 {{a {{re}} b}}`
# matches the literal parts as written and the `{{...}}` parts as regular expressions.
_EXPECTED = re.compile(
    r"expected-(?P<kind>error|warning|note|remark)(?P<regex>-re)?\s*(?:@(?P<where>above|below|unknown|[+-]\d+))?"
    r"\s*\{\{(?P<text>.*)\}\}"
)
_REGEX_PART = re.compile(r"\{\{(.*?)\}\}")


def _matcher(text: str, is_regex: bool):
    if not is_regex:
        return lambda message: text in message
    pieces, position = [], 0
    for part in _REGEX_PART.finditer(text):
        pieces += [re.escape(text[position : part.start()]), f"(?:{part.group(1)})"]
        position = part.end()
    try:
        pattern = re.compile("".join(pieces) + re.escape(text[position:]), re.S)
    except re.error:  # reported as an expectation that was not produced
        return lambda message: False
    return lambda message: pattern.search(message) is not None


def expected_diagnostics(chunk_text: str) -> list[dict]:
    expectations = []
    for number, line in enumerate(chunk_text.split("\n"), start=1):
        for match in _EXPECTED.finditer(line):
            where = match["where"]
            target = {None: number, "above": number - 1, "below": number + 1, "unknown": None}.get(where)
            if target is None and where not in (None, "unknown"):
                target = number + int(where)
            expectations.append({"kind": match["kind"], "line": target, "text": match["text"], "at": number,
                                 "column": match.start() + 1,
                                 "matches": _matcher(match["text"], match["regex"] is not None)})
    return expectations


def check_diagnostics(diagnostics: list[Diag], chunk: str, source_name: str, first_line: int = 0) -> list[str]:
    """mlir-opt's --verify-diagnostics: every diagnostic expected, every expectation produced. Lines are the
    chunk's own; the report names them in the whole input (`first_line` lines before the chunk)."""
    expectations = expected_diagnostics(chunk)
    problems = []
    # mlir-opt turns off printing the op on diagnostics in this mode; the bindings cannot, so drop the note.
    diagnostics = [d for d in diagnostics if not (d.severity == "note" and d.message.startswith("see current operation"))]
    for diagnostic in diagnostics:
        for expectation in expectations:
            if (
                not expectation.get("matched")
                and expectation["kind"] == diagnostic.severity
                and expectation["line"] == (diagnostic.line if diagnostic.file == source_name else None)
                and expectation["matches"](diagnostic.message)
            ):
                expectation["matched"] = True
                break
        else:
            shifted = diagnostic.shifted(first_line, source_name)
            problems.append(str(Diag("error", shifted.file or source_name, shifted.line, shifted.column,
                                     f"unexpected {shifted.severity}: {shifted.message}")))
    for expectation in expectations:
        if not expectation.get("matched"):
            problems.append(f"{source_name}:{expectation['at'] + first_line}:{expectation['column']}: error: expected {expectation['kind']} "
                            f"\"{expectation['text']}\" was not produced")
    return problems


def print_passes() -> None:
    print("\nTile passes and pipelines:")
    for name, definition in {**PASSES, **PIPELINES}.items():
        print(f"  --{name:40} {definition.summary}")
        for option in definition.options:
            print(f"      {option.name + '=<value>':36} {option.help}")
    print("\nUpstream passes and pipelines (those of mlir-opt; options as in mlir-opt --help):")
    for name, summary in upstream_passes():
        print(f"  --{name:40} {summary}")


def instrumentation(options: argparse.Namespace):
    """What the flags turn on in the pass manager: IR printing, timing."""
    def instrument(manager):
        if options.mlir_print_ir_before_all or options.mlir_print_ir_after_all:
            manager.enable_ir_printing(print_before_all=options.mlir_print_ir_before_all,
                                       print_after_all=options.mlir_print_ir_after_all,
                                       enable_debug_info=options.mlir_print_debuginfo,
                                       print_generic_op_form=options.mlir_print_op_generic)
        if options.mlir_timing:
            manager.enable_timing()
    return instrument


def run_chunk(session: Session, chunk: str, source_name: str, options) -> tuple[object, list[Diag], str | None]:
    """Returns (the processed module or None, diagnostics, reproducer hint)."""
    session.collected.clear()
    try:
        module = session.parse(chunk, source_name)
        reported = run_pipeline(module, options.pipeline, instrument=instrumentation(options))
    except PipelineFailure as failure:
        hint = failure.hint(source_name, options.reproducer)
        return None, session.collected + failure.diagnostics, f"tile-opt: {hint}" if hint else None
    return module, list(session.collected) + reported, None


def render(module, options) -> bytes:
    if options.emit_bytecode:
        import io

        stream = io.BytesIO()
        module.write_bytecode(stream)
        return stream.getvalue()
    text = module.get_asm(print_generic_op_form=options.mlir_print_op_generic,
                          enable_debug_info=options.mlir_print_debuginfo)
    return (text.rstrip("\n") + "\n\n").encode()  # mlir-opt ends each module with an empty line


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    options = parse_arguments(sys.argv[1:] if argv is None else argv)
    if options.help:
        argument_parser().print_help()
    if options.help or options.list_passes:
        print_passes()
        return 0
    if options.dump_pass_pipeline:
        print(f"Pass Manager with {len(options.pipeline)} passes:\nbuiltin.module({', '.join(options.pipeline)})",
              file=sys.stderr)
    try:
        text, source_name = read_input(options.input)
    except InputError as error:
        print(f"tile-opt: {error}", file=sys.stderr)
        return 1
    try:
        with Session(options.allow_unregistered_dialect) as session:
            return _process(session, text, source_name, options)
    except OutputError as error:
        print(f"tile-opt: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # a bug in tile-opt itself: one line, not a traceback
        if os.environ.get("TILE_DEBUG"):
            raise
        print(f"tile-opt: internal error: {type(error).__name__}: {error} (set TILE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


def _process(session: Session, text, source_name: str, options) -> int:
    """Each part of the input through the pipeline; the output written; the exit status."""
    outputs, status = [], 0
    for chunk, first_line in split_buffer(text, options.split_input_file):
        module, diagnostics, hint = run_chunk(session, chunk, source_name, options)
        if options.verify_diagnostics:
            problems = check_diagnostics(diagnostics, chunk, source_name, first_line)
            for problem in problems:
                print(problem, file=sys.stderr)
            status |= 1 if problems else 0
        else:
            for diagnostic in diagnostics:
                print(diagnostic.shifted(first_line, source_name), file=sys.stderr)
            if hint:
                print(hint, file=sys.stderr)
            status |= 1 if module is None else 0
        if module is not None:
            outputs.append(render(module, options))
    write_output(options.output, b"// -----\n".join(outputs))
    return status


if __name__ == "__main__":
    sys.exit(main())
