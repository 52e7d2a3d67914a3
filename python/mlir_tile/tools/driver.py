"""What `tile-opt` and `tile-translate` share: splitting the input, parsing each part into a module with
file locations the way mlir-opt does, and collecting the diagnostics that are not errors."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from mlir import ir

from mlir_tile.isa import targets
from mlir_tile.dialect import make_context
from mlir_tile.compiler.diagnostics import Diag, PipelineFailure

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.M)
MAX_NESTING = 1000  # brackets inside brackets; the MLIR parser recurses per level and overflows its stack near 4,000
# A string literal, unrolled: a run of plain characters is one step, so a 20 MB literal is matched in constant
# memory (the form with an alternation per character kept a backtracking frame per character: 2.5 GB).
_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_BRACKETS = re.compile(_STRING + r'|//[^\n]*|[{(\[]|[})\]]')


_TARGET_ATTRIBUTE = re.compile(r"#(nvvm|rocdl|xevm)\s*\.\s*target\s*<([^>]*)>")
_PARAMETER = re.compile(r'(\w+)\s*=\s*(' + _STRING + r'|-?\d+)')
_STRING_OR_COMMENT = re.compile(_STRING + r'|//[^\n]*')


def _without_comments(text: str) -> str:
    """`text` with every comment and NUL character blanked out (same length, so positions stay), as MLIR's lexer
    skips them (it reads a NUL inside the buffer as white space: `#rocdl.<NUL>target` is `#rocdl.target`)."""
    blanked = _STRING_OR_COMMENT.sub(lambda m: m.group() if m.group().startswith('"') else " " * len(m.group()), text)
    return blanked.replace("\x00", " ")
_ESCAPE = re.compile(r"\\(?:[0-9a-fA-F]{2}|.)")


def target_text_problem(text: str) -> tuple[str, int, int] | None:
    """(message, line, column) for a GPU target attribute whose parameters upstream MLIR aborts the process on
    while parsing (its verifier asserts instead of reporting): an #nvvm.target chip of one or two characters
    (StringRef::drop_front), an empty chip or triple, an optimization level outside 0-3 or an unknown ABI in
    #rocdl.target / #xevm.target. Found in the text, before the parser sees it."""
    text = _without_comments(text)
    for attribute in _TARGET_ATTRIBUTE.finditer(text):
        kind = attribute.group(1)
        for parameter in _PARAMETER.finditer(attribute.group(2)):
            name, value = parameter.group(1), parameter.group(2)
            length = len(_ESCAPE.sub("x", value[1:-1])) if value.startswith('"') else None
            problem = None
            if kind == "nvvm" and name == "chip" and length in (1, 2):
                problem = f"chip {value} is not a chip; use one of {targets.known_chips()}"
            elif kind != "nvvm" and name in ("chip", "triple") and length == 0:
                problem = f"the {name} cannot be empty"
            elif kind != "nvvm" and name == "O" and value not in ("0", "1", "2", "3"):
                problem = "the optimization level O is 0, 1, 2 or 3"
            elif kind == "rocdl" and name == "abi" and value not in ('"400"', '"500"', '"600"'):
                problem = 'the abi is "400", "500" or "600"'
            if problem:
                position = attribute.start(2) + parameter.start()
                line = text.count("\n", 0, position) + 1
                return f"#{kind}.target: {problem}", line, position - text.rfind("\n", 0, position)
    return None


_MMA_SHAPE = re.compile(r"#nvvm\s*\.\s*shape\s*<([^>]*)>")


MAX_MMA_EXTENT = 256  # the largest extent of any mma.sync shape (m16n8k256)


def mma_shape_text_problem(text: str) -> tuple[str, int, int] | None:
    """(message, line, column) for an #nvvm.shape extent outside 1..256: upstream's nvvm.mma.sync verifier
    sizes a vector by it, aborting the process on a negative one ("SmallVector unable to grow") and taking
    gigabytes and seconds on a huge one. Found in the text, before the parser sees it; other wrong shapes get
    the verifier's own error."""
    text = _without_comments(text)
    for attribute in _MMA_SHAPE.finditer(text):
        for parameter in _PARAMETER.finditer(attribute.group(1)):
            value = parameter.group(2)
            if value.startswith('"') or 1 <= int(value) <= MAX_MMA_EXTENT:
                continue
            position = attribute.start(1) + parameter.start()
            line = text.count("\n", 0, position) + 1
            return (f"#nvvm.shape: {parameter.group(1)} = {value} is not an extent of an mma.sync shape (1 to "
                    f"{MAX_MMA_EXTENT}: m8n8k4, m16n8k16, ..., m16n8k256)"), line, position - text.rfind("\n", 0, position)
    return None


_STRING_OR_QUOTE = re.compile(_STRING + r'|//[^\n]*|"')


def unterminated_string_problem(text: str) -> tuple[str, int, int] | None:
    """(message, line, column) of a string literal that its line does not close, the lexer's own error, found
    in the text: after some ops (an 8-bit nvvm.ldmatrix), upstream's parser reports it and then stops the
    process ("unhandled captured errors") instead of returning the error."""
    for token in _STRING_OR_QUOTE.finditer(text):
        if token.group() == '"':
            line = text.count("\n", 0, token.start()) + 1
            return "expected '\"' in string literal", line, token.start() - text.rfind("\n", 0, token.start())
    return None


def nesting_problem(text: str) -> str | None:
    """Why `text` nests too deeply to parse safely (None when it does not), found in one linear scan."""
    depth = deepest = line = 0
    for token in _BRACKETS.finditer(text):
        bracket = token.group()
        if bracket in "{([":
            depth += 1
            if depth > deepest:
                deepest, line = depth, token.start()
        elif bracket in "})]":
            depth -= 1
        if deepest > MAX_NESTING:
            return (f"brackets nest more than {MAX_NESTING} deep (at line {text.count(chr(10), 0, line) + 1}), "
                    f"deeper than mlir-tile parses safely (the MLIR parser recurses per level); flatten the input")
    return None


def split_buffer(text: str | bytes, split: bool) -> list[tuple[str | bytes, int]]:
    """The input, or its `// -----` parts, each with the number of lines before it in the whole input (a
    part's diagnostics are shifted by it, so they point into the file the user wrote; padding each part with
    that many newlines instead cost memory quadratic in the number of parts). Bytecode is never split."""
    if not split or isinstance(text, bytes):
        return [(text, 0)]
    chunks, start, line = [], 0, 0
    for match in list(SPLIT_MARKER.finditer(text)) + [None]:
        end = match.start() if match else len(text)
        chunks.append((text[start:end], line))
        if match:
            line += text.count("\n", start, match.end())
            start = match.end()
    return chunks


def _collector(collected: list):
    """A diagnostic handler that appends to `collected`. It must not refer to the Session: the bindings'
    handler objects are invisible to Python's cycle collector, so a handler -> session -> context cycle kept
    every context alive (2 MiB per in-process call of a driver's main)."""
    def collect(diagnostic) -> bool:
        collected.extend(Diag.from_mlir(diagnostic))
        return True
    return collect


class Session:
    """One context (with `tile` loaded) and a collector for diagnostics that are not errors."""

    def __init__(self, allow_unregistered: bool = False):
        self.context = make_context()
        self.context.allow_unregistered_dialects = allow_unregistered
        self.collected: list[Diag] = []
        self._owned_modules: list[ir.Module] = []
        self._handler = self.context.attach_diagnostic_handler(_collector(self.collected))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._handler.detach()
        self._owned_modules.clear()

    def parse(self, text: str | bytes, source_name: str) -> ir.Operation:
        """Parse like mlir-opt: one top-level builtin.module is the module; other ops get an implicit one.
        Returns the builtin.module operation."""
        if not isinstance(text, bytes):
            problem = nesting_problem(text)
            if problem:
                raise PipelineFailure(None, [Diag("error", source_name, None, None, problem)])
            for problem in (target_text_problem(text), mma_shape_text_problem(text), unterminated_string_problem(text)):
                if problem:
                    raise PipelineFailure(None, [Diag("error", source_name, problem[1], problem[2], problem[0])])
        with self.context:
            if isinstance(text, bytes):  # bytecode: always one builtin.module
                try:
                    module = ir.Module.parse(text)
                except ir.MLIRError as error:
                    raise PipelineFailure(None, Diag.from_error(error)) from None
                self._owned_modules.append(module)
                return module.operation
            try:
                op = ir.Operation.parse(text, source_name=source_name)
            except ir.MLIRError as error:
                if "source must contain a single top-level operation" not in str(error):
                    raise PipelineFailure(None, Diag.from_error(error)) from None
                return self._parse_several(text, source_name)
            if op.operation.name == "builtin.module":
                return op.operation
            module = ir.Module.create(loc=ir.Location.file(source_name, 1, 1))
            module.body.append(op.operation)
            self._owned_modules.append(module)  # the Module object owns the IR its operation points into
            return module.operation

    def _parse_several(self, text: str, source_name: str) -> ir.Operation:
        """Several top-level ops: the implicit builtin.module mlir-opt makes (at line 0, column 0), which
        ir.Module.parse makes too, naming its buffer "-": the parser's locations get the file's name back.
        (Text wrapped in "module {" would move every column of the first line.)"""
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as error:
            diagnostics = [Diag(d.severity, source_name if d.file == _MODULE_PARSE_BUFFER else d.file, d.line,
                                d.column, d.message) for d in Diag.from_error(error)]
            raise PipelineFailure(None, diagnostics) from None
        if source_name != _MODULE_PARSE_BUFFER:
            _rename_buffer(module.operation, source_name)
        self._owned_modules.append(module)
        return module.operation


_MODULE_PARSE_BUFFER = "-"


def _rename_buffer(root: ir.Operation, source_name: str) -> None:
    """Every location the parser gave (a file location in ir.Module.parse's buffer) renamed to `source_name`,
    on ops and block arguments; locations written in the text (`loc(...)`) of other kinds are left alone."""
    def renamed(location: ir.Location) -> ir.Location | None:
        if not location.is_a_file() or location.filename != _MODULE_PARSE_BUFFER:
            return None
        return ir.Location.file(source_name, location.start_line, location.start_col, location.end_line,
                                location.end_col)

    def visit(op: ir.Operation) -> ir.WalkResult:
        new = renamed(op.location)
        if new is not None:
            op.location = new
        for region in op.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    new = renamed(argument.location)
                    if new is not None:
                        argument.set_location(new)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)


class InputError(Exception):
    """The input cannot be read as MLIR text; the message says why."""


BYTECODE_MAGIC = b"ML\xefR"


def read_input(path: str) -> tuple[str | bytes, str]:
    """(text, or MLIR bytecode as bytes; name for locations) of a file, or of standard input for '-'."""
    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise InputError(f"cannot read input: {error}") from None
    if data.startswith(BYTECODE_MAGIC):
        return data, name
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as error:
        raise InputError(f"cannot read input: {name} is not UTF-8 text (byte 0x{data[error.start]:02x} at "
                         f"offset {error.start})") from None
