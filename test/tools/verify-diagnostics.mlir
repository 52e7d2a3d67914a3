// --verify-diagnostics fails, with a report, on an unexpected diagnostic and on an expectation that no
// diagnostic met; @+N, @below and @above name lines relative to the comment; expected-error-re matches the
// `{{...}}` parts of its text as regular expressions, as mlir-opt does.
// RUN: not tile-opt %S/Inputs/wrong-expectations.mlir --verify-diagnostics --tile-verify-matrix-transfer 2>&1 | filecheck %s
// RUN: tile-opt %s --verify-diagnostics --split-input-file --tile-verify-matrix-transfer

// CHECK-DAG: wrong-expectations.mlir:7:5: error: unexpected error: 'tile.matrix_transfer' op [scope] scope "thread"
// CHECK-DAG: wrong-expectations.mlir:6:8: error: expected error "this text is not in any diagnostic" was not produced
// CHECK-DAG: wrong-expectations.mlir:10:8: error: expected warning "nothing warns here" was not produced
// CHECK-DAG: wrong-expectations.mlir:24:5: error: unexpected error: 'tile.matrix_transfer' op [row-alignment] {{.*}}(matrix=0, row=1, word=0)
// CHECK-DAG: wrong-expectations.mlir:22:8: error: expected error "[row-alignment]{{[{][{]}}.*{{[}][}]}}(matrix=0, row=2, word=0)" was not produced
// CHECK-DAG: wrong-expectations.mlir:23:8: error: expected error "[row-alignment]{{[{][{]}}({{[}][}]}}" was not produced

gpu.module @m [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error@below {{[scope] scope "thread"}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "thread",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">}
      : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @m [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,2)">}
      : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    // expected-error-re@-3 {{[shared-row] src_layout (4,8,4):(32,{{[0-9]+}},2): the word axis has stride 2}}
    gpu.return
  }
}

// -----

gpu.module @m [#nvvm.target<chip = "sm_80">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    // expected-error@above {{[target] stmatrix needs sm_90 or newer}}
    gpu.return
  }
}
