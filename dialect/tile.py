"""The Python side of the IRDL-defined `tile` dialect: typed access to `tile.matrix_transfer`.

The MLIR bindings import `<search prefix>.tile` the first time they meet a `tile` op; `mlir_tile.dialect`
registers itself as a search prefix, so this module is found (without it the bindings retry a failing
import for every op they wrap).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects._ods_common import _cext

from mlir_tile.layout import Layout


@_cext.register_dialect
class TileDialect(ir.Dialect):
    DIALECT_NAMESPACE = "tile"


@_cext.register_operation(TileDialect)
class MatrixTransferOp(ir.OpView):
    """`"tile.matrix_transfer"(%dst, %src) {opcode, scope, dst_layout, src_layout}`."""

    OPERATION_NAME = "tile.matrix_transfer"
    _ODS_REGIONS = (0, True)

    @property
    def dst(self) -> ir.Value:
        return self.operation.operands[0]

    @property
    def src(self) -> ir.Value:
        return self.operation.operands[1]

    @property
    def opcode(self) -> str:
        return ir.StringAttr(self.operation.attributes["opcode"]).value

    @property
    def scope(self) -> str:
        return ir.StringAttr(self.operation.attributes["scope"]).value

    @property
    def dst_layout(self) -> Layout:
        return _layout(self.operation.attributes["dst_layout"])

    @property
    def src_layout(self) -> Layout:
        return _layout(self.operation.attributes["src_layout"])


def _layout(attr: ir.Attribute) -> Layout:
    from mlir_tile.dialect import layout_text

    return Layout.parse(layout_text(attr))
