"""Loads the IRDL definition of the `tile` dialect into an MLIR context, and converts its attributes.

`tile.irdl.mlir` beside this file is the only definition of the dialect; `mlir-opt --irdl-file` reads the
same file.
"""
from __future__ import annotations

import re
from pathlib import Path

from mlir import ir
from mlir.dialects import irdl
from mlir.dialects._ods_common import _cext

from mlir_tile.algebra.layout import Layout, as_layout

# The bindings find the Python module of dialect `tile` as `mlir_tile.dialect.tile` (MatrixTransferOp).
_cext.globals.append_dialect_search_prefix(__name__)

IRDL_FILE = Path(__file__).with_name("tile.irdl.mlir")
OP_NAME = "tile.matrix_transfer"
# a gpu.module's attribute: the alignment its dynamic shared memory is declared with in the PTX (the builder's
# dynamic_shared sets it, tile-extern-dynamic-shared writes it)
ALIGNMENT_ATTRIBUTE = "tile.dynamic_shared_alignment"

_LAYOUT_ATTR = re.compile(r'^#tile\.layout<"(.*)">$', re.S)


def load_dialect(context: ir.Context) -> None:
    """Registers `tile` in `context` (once per context)."""
    with context, ir.Location.unknown():
        if not is_loaded(context):
            irdl.load_dialects(ir.Module.parse(IRDL_FILE.read_text()))


def is_loaded(context: ir.Context) -> bool:
    with context:
        try:
            ir.Attribute.parse('#tile.layout<"">')
            return True
        except ir.MLIRError:
            return False


def make_context() -> ir.Context:
    """A context with the upstream dialects the bindings register and `tile`, single-threaded: MLIR's worker
    threads (verifying several functions at once) would call Python's diagnostic handlers without the GIL."""
    context = ir.Context()
    context.enable_multithreading(False)
    load_dialect(context)
    return context


def layout_attr(layout: Layout | str) -> ir.Attribute:
    """`#tile.layout<"...">` of a Layout, or of layout text (canonical when it parses; kept as written when
    it does not, for the verifier to reject with its reason)."""
    try:
        text = str(as_layout(layout))
    except ValueError:
        text = layout
    return ir.Attribute.parse('#tile.layout<"' + text.replace("\\", "\\\\").replace('"', '\\"') + '">')


def layout_text(attr: ir.Attribute) -> str | None:
    """The text of a `#tile.layout`, or None when the attribute is something else."""
    match = _LAYOUT_ATTR.match(str(attr))
    return match.group(1) if match else None

