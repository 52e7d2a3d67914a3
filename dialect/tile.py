"""The Python side of the IRDL-defined `tile` dialect: `tile.matrix_transfer`'s op class, with its builder and
typed accessors (as upstream keeps op class and builder together in the generated `_nvvm_ops_gen.py`).

The MLIR bindings import `<search prefix>.tile` the first time they meet a `tile` op; `mlir_tile.dialect`
registers itself as a search prefix, so this module is found (without it the bindings retry a failing
import for every op they wrap).

The builder here builds; it does not judge. `mlir_tile.builder.transfer` builds and then asks the one
adapter (`mlir_tile.analysis.adapter`) for the contract's verdict, as the verifier pass does.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects._ods_common import _cext

from mlir_tile.contract import ATTRIBUTES, parse_opcode
from mlir_tile.dialect import layout_attr, layout_text
from mlir_tile.algebra.layout import Layout


@_cext.register_dialect
class TileDialect(ir.Dialect):
    DIALECT_NAMESPACE = "tile"


@_cext.register_operation(TileDialect)
class MatrixTransferOp(ir.OpView):
    """`"tile.matrix_transfer"(%dst, %src) {opcode, scope, dst_layout, src_layout}`."""

    OPERATION_NAME = "tile.matrix_transfer"
    _ODS_REGIONS = (0, True)

    def __init__(
        self,
        opcode: str,
        dst: ir.Value,
        src: ir.Value,
        *,
        dst_layout: Layout | str,
        src_layout: Layout | str,
        scope: str = "warp",
        loc: ir.Location | None = None,
        ip: ir.InsertionPoint | None = None,
    ):
        attributes = {
            "opcode": ir.StringAttr.get(opcode),
            "scope": ir.StringAttr.get(scope),
            "dst_layout": layout_attr(dst_layout),
            "src_layout": layout_attr(src_layout),
        }
        super().__init__(
            ir.Operation.create(self.OPERATION_NAME, operands=[dst, src], attributes=attributes, loc=loc, ip=ip)
        )

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
    def dst_layout_text(self) -> str:
        return layout_text(self.operation.attributes["dst_layout"])

    @property
    def src_layout_text(self) -> str:
        return layout_text(self.operation.attributes["src_layout"])

    @property
    def dst_layout(self) -> Layout:
        return Layout.parse(self.dst_layout_text)

    @property
    def src_layout(self) -> Layout:
        return Layout.parse(self.src_layout_text)

    @property
    def extra_attributes(self) -> list[str]:
        """Attributes beyond the four the op defines (IRDL allows discardable ones; the contract does not)."""
        names = (named if isinstance(named, str) else named.name for named in self.operation.attributes)
        return [name for name in names if name not in ATTRIBUTES]

    @property
    def registers(self) -> ir.Value:
        """The register-storage operand: dst of an ldmatrix, src of an stmatrix (ContractError for an
        opcode that is neither)."""
        return parse_opcode(self.opcode).registers_and_shared(self.dst, self.src)[0]

    @property
    def shared(self) -> ir.Value:
        return parse_opcode(self.opcode).registers_and_shared(self.dst, self.src)[1]


def matrix_transfer(opcode: str, dst: ir.Value, src: ir.Value, **kwargs) -> MatrixTransferOp:
    """`MatrixTransferOp(...)`, in the lower-case function form the generated upstream builders also have."""
    return MatrixTransferOp(opcode, dst, src, **kwargs)
