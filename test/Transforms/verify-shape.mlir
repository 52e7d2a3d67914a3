// [shape] both layouts have one shape ending in (N,8,4) for .xN; at most 255 words per thread.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @x2_with_x4_atom [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+2 {{[shape]{{.*}}(4,8,4):(1,4@laneid,1@laneid) must end in (matrix,row,word) = (2,8,4)}}
    // expected-error-re@+1 {{[shape]{{.*}}(4,8,4):(32,4,1) must end in (matrix,row,word) = (2,8,4)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @rows_of_eight_words [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+2 {{[shape]{{.*}}(4,8,8):(1,4@laneid,1@laneid) must end in (matrix,row,word) = (4,8,4)}}
    // expected-error-re@+1 {{[shape]{{.*}}(4,8,8):(64,8,1) must end in}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,8):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,8):(64,8,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @more_words_than_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<8192xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<8192xi32, 3>
    %r = memref.alloca() : memref<256xi32, 5>
    // expected-error-re@+1 {{[shape]{{.*}}256 words per thread}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(64,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(64,4,8,4):(128,32,4,1)">} : (memref<256xi32, 5>, memref<8192xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @million_repeats [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[shape]{{.*}}4000000 words per thread}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(1000000,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(1000000,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @different_repeats [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[shape]{{.*}}(2,4,8,4) (registers) vs (3,4,8,4) (shared)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(3,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
