// The `tile` dialect: the single source of truth for both the Python bindings (`mlir_tile.dialect`)
// and upstream tools (`mlir-opt --irdl-file=dialect/tile.irdl.mlir`). IRDL checks only the structure
// (two memref operands, four attributes of the right kinds); the legality contract of the specification
// is the pass `tile-verify-matrix-transfer`, because it needs the layouts' meaning, the enclosing kernel
// and the memref's provenance, none of which IRDL can express.
//
// Each constraint value is used once: IRDL unifies uses of one value, which would force the two
// operands (or the two layouts) to be equal.
irdl.dialect @tile {
  // A layout in the specification's notation, `(2,2,8,4):(8,2,4@laneid,1@laneid)`, kept as text.
  irdl.attribute @layout {
    %text = irdl.base "#builtin.string"
    irdl.parameters(text: %text)
  }

  // "tile.matrix_transfer"(%dst, %src) {opcode, scope, dst_layout, src_layout}
  // ldmatrix: dst = registers (private memory), src = shared memory (workgroup memory).
  // stmatrix: dst = shared memory, src = registers.
  irdl.operation @matrix_transfer {
    %dst = irdl.base "!builtin.memref"
    %src = irdl.base "!builtin.memref"
    irdl.operands(dst: %dst, src: %src)
    %opcode = irdl.base "#builtin.string"
    %scope = irdl.base "#builtin.string"
    %dst_layout = irdl.base @tile::@layout
    %src_layout = irdl.base @tile::@layout
    irdl.attributes {
      "opcode" = %opcode,
      "scope" = %scope,
      "dst_layout" = %dst_layout,
      "src_layout" = %src_layout
    }
  }
}
