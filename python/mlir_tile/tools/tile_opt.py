"""tile-opt: an mlir-opt for the tile dialect.

    tile-opt [FILE|-] [-o OUT] [--pass-pipeline='builtin.module(...)'] [--<pass or pipeline>[{opts}] ...]
             [--split-input-file] [--verify-diagnostics] [--mlir-print-ir-after-all]
             [--mlir-print-op-generic] [--allow-unregistered-dialect] [--list-passes]

With no pass it parses, verifies and prints. Pass flags and --pass-pipeline may mix tile passes, the
named pipelines tile-to-nvvm / tile-to-ptx and any upstream pass. Errors are MLIR diagnostics on stderr
(file:line:col) and exit status 1.
"""
from __future__ import annotations

import os
import re
import sys

from mlir_tile.pipeline import Diag, PipelineFailure, run_pipeline
from mlir_tile.tools.driver import InputError, Session, read_input, split_buffer
from mlir_tile.passes import PASSES, PIPELINES
from mlir_tile.pipeline_text import split_elements

USAGE = __doc__.split("\n\n")[1]
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


# Flags that switch an option on, as mlir-opt spells them.
SWITCHES = {
    "--split-input-file": "split",
    "--verify-diagnostics": "verify",
    "--mlir-print-ir-after-all": "print_after_all",
    "--mlir-print-op-generic": "generic",
    "--allow-unregistered-dialect": "allow_unregistered",
    "--list-passes": "list",
}


def parse_arguments(argv: list[str]):
    options = {"input": "-", "output": "-", "pipeline": [], **{name: False for name in SWITCHES.values()}}
    arguments = iter(argv)
    for argument in arguments:
        flag, _, value = argument.partition("=")
        if argument == "-o":
            options["output"] = next(arguments, "-")
        elif flag == "--pass-pipeline":
            options["pipeline"] += split_elements(value if value else next(arguments, ""))
        elif argument in SWITCHES:
            options[SWITCHES[argument]] = True
        elif argument in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        elif argument.startswith("--"):
            options["pipeline"].append(argument[2:])  # a pass or pipeline, with optional {options}
        elif argument.startswith("-") and argument != "-":
            raise SystemExit(f"tile-opt: unknown option '{argument}'\n{USAGE}")
        else:
            options["input"] = argument
    return options


def expected_diagnostics(chunk_text: str) -> list[dict]:
    expectations = []
    for number, line in enumerate(chunk_text.split("\n"), start=1):
        for match in _EXPECTED.finditer(line):
            where = match["where"]
            target = {None: number, "above": number - 1, "below": number + 1, "unknown": None}.get(where)
            if target is None and where not in (None, "unknown"):
                target = number + int(where)
            expectations.append({"kind": match["kind"], "line": target, "text": match["text"], "at": number,
                                 "matches": _matcher(match["text"], match["regex"] is not None)})
    return expectations


def check_diagnostics(diagnostics: list[Diag], chunk: str, source_name: str) -> list[str]:
    """mlir-opt's --verify-diagnostics: every diagnostic expected, every expectation produced."""
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
            problems.append(f"{diagnostic.file or source_name}:{diagnostic.line}:{diagnostic.column}: error: "
                            f"unexpected {diagnostic.severity}: {diagnostic.message}")
    for expectation in expectations:
        if not expectation.get("matched"):
            problems.append(f"{source_name}:{expectation['at']}: error: expected {expectation['kind']} "
                            f"\"{expectation['text']}\" was not produced")
    return problems


def run_chunk(session: Session, chunk: str, source_name: str, options) -> tuple[str | None, list[Diag], str | None]:
    """Returns (printed IR or None, diagnostics, reproducer hint)."""
    session.collected.clear()
    try:
        module = session.parse(chunk, source_name)
        run_pipeline(module, options["pipeline"], options["print_after_all"])
    except PipelineFailure as failure:
        hint = failure.hint(source_name)
        return None, session.collected + failure.diagnostics, f"tile-opt: {hint}" if hint else None
    return module.get_asm(print_generic_op_form=options["generic"]), list(session.collected), None


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_arguments(sys.argv[1:] if argv is None else argv)
        if options["list"]:
            descriptions = {name: definition.summary for name, definition in {**PASSES, **PIPELINES}.items()}
            for name, description in descriptions.items():
                print(f"  --{name:32} {description}")
            return 0
        text, source_name = read_input(options["input"])
    except InputError as error:
        print(f"tile-opt: {error}", file=sys.stderr)
        return 1
    try:
        session = Session(options["allow_unregistered"])
        outputs, status = [], 0
        for chunk in split_buffer(text, options["split"]):
            printed, diagnostics, hint = run_chunk(session, chunk, source_name, options)
            if options["verify"]:
                problems = check_diagnostics(diagnostics, chunk, source_name)
                for problem in problems:
                    print(problem, file=sys.stderr)
                status |= 1 if problems else 0
            else:
                for diagnostic in diagnostics:
                    print(diagnostic, file=sys.stderr)
                if hint:
                    print(hint, file=sys.stderr)
                status |= 1 if printed is None else 0
            if printed is not None:
                outputs.append(printed)
        result = "// -----\n".join(o if o.endswith("\n") else o + "\n" for o in outputs)
        if options["output"] == "-":
            sys.stdout.write(result)
        else:
            with open(options["output"], "w") as stream:
                stream.write(result)
        return status
    except Exception as error:  # a bug in tile-opt itself: one line, not a traceback
        if os.environ.get("TILE_DEBUG"):
            raise
        print(f"tile-opt: internal error: {type(error).__name__}: {error} (set TILE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
