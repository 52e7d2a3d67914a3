// Structural errors are the IRDL definition's: the same file rejects them in tile-opt and mlir-opt.
// RUN: tile-opt %s --split-input-file --verify-diagnostics
// RUN: mlir-opt --irdl-file=%irdl %s --split-input-file --verify-diagnostics

func.func @missing_layout(%regs: memref<4xi32, 5>, %sm: memref<128xi32, 3>) {
  // expected-error@+1 {{attribute "src_layout" is expected but not provided}}
  "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<4xi32, 5>, memref<128xi32, 3>) -> ()
  return
}

// -----

func.func @layout_as_plain_string(%regs: memref<4xi32, 5>, %sm: memref<128xi32, 3>) {
  // expected-error@+1 {{expected base attribute 'tile.layout' but got 'builtin.string'}}
  "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = "(4,8,4):(32,4,1)"}
    : (memref<4xi32, 5>, memref<128xi32, 3>) -> ()
  return
}

// -----

func.func @one_operand(%regs: memref<4xi32, 5>) {
  // expected-error@+1 {{op expects exactly 2 operands, but got 1}}
  "tile.matrix_transfer"(%regs) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">}
    : (memref<4xi32, 5>) -> ()
  return
}

// -----

func.func @vector_operand(%regs: memref<4xi32, 5>, %v: vector<4xi32>) {
  // expected-error@+1 {{expected base type 'builtin.memref' but got 'builtin.vector'}}
  "tile.matrix_transfer"(%regs, %v) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
      dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">}
    : (memref<4xi32, 5>, vector<4xi32>) -> ()
  return
}
