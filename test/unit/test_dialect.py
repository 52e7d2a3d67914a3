"""The dialect's one definition (dialect/tile.irdl.mlir) and the Python side agree: the op's attributes are
the contract's ATTRIBUTES, and MatrixTransferOp builds and reads them back."""
import re

from mlir import ir

from mlir_tile.contract import ATTRIBUTES
from mlir_tile.dialect import IRDL_FILE, make_context
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.algebra.layout import S, laneid


def test_irdl_attributes_are_the_contracts():
    operation = re.search(r"irdl\.operation @matrix_transfer \{(.*?)\n  \}", IRDL_FILE.read_text(), re.S).group(1)
    attributes = re.search(r"irdl\.attributes \{(.*?)\}", operation, re.S).group(1)
    assert tuple(re.findall(r'"(\w+)" =', attributes)) == ATTRIBUTES


def test_op_class_builds_and_reads_back():
    context = make_context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(
            "func.func @f(%r: memref<4xi32, 5>, %s: memref<128xi32, 3>) { return }")
        function = module.body.operations[0]
        registers, shared = function.regions[0].blocks[0].arguments
        with ir.InsertionPoint.at_block_begin(function.regions[0].blocks[0]):
            op = MatrixTransferOp("stmatrix.sync.aligned.m8n8.x4.shared.b16", shared, registers,
                                  dst_layout="(4,8,4):(32,4,1)", src_layout=S[(4, 8, 4):(1, 4 @ laneid, 1 @ laneid)])
        assert op.registers == registers and op.shared == shared
        assert op.src_layout == S[(4, 8, 4):(1, 4 @ laneid, 1 @ laneid)] and op.dst_layout_text == "(4,8,4):(32,4,1)"
        assert op.extra_attributes == []
        op.operation.attributes["pred"] = ir.UnitAttr.get()
        assert op.extra_attributes == ["pred"]
        module.operation.verify()
