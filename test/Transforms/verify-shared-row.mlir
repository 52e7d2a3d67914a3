// [shared-row] a shared row is 4 consecutive words (word stride 1); shared layouts have no thread strides.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @gap_inside_row [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[shared-row]{{.*}}the word axis has stride 2}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(64,8,2)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @thread_stride_on_shared [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[shared-row]{{.*}}axis 1 has thread stride 4@laneid}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4@laneid,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Nested and swizzled layouts: every row's words are checked one by one. The CuTe DSL's Swizzle<3,2,3> written over
// b16 elements is Sw<3,1,3> over words: on the right half of a 128-byte-row tile it swaps the word pairs inside
// 16-byte rows, where the CuTe DSL emits a silently wrong ldmatrix.
gpu.module @cute_dsl_swizzle_over_b16_elements [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 512 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    // expected-error-re@+1 {{[shared-row]{{.*}}shared row (repeat=(1), matrix=0, row=0, word=0) has its words at offsets 18, 19, 16, 17 (after the swizzle), not 4 consecutive words}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,1,3> o (2,(2,2),8,4):(16,(256,4),32,1)">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @nested_word_mode_with_a_gap [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 128 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    // expected-error-re@+1 {{[shared-row]{{.*}}shared row (matrix=0, row=0, word=0) has its words at offsets 0, 1, 4, 5}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,(2,2)):(64,8,(1,4))">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}
