// [bounds] static shapes; every shared row and register slot lies inside its memref.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @register_out_of_bounds [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<6xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}(repeat=(1), matrix=2)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<6xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @register_negative_stride [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}(matrix=1)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(-1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shared_out_of_bounds [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<400xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<400xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}(matrix=3, row=4, word=0)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(128,4,1)">} : (memref<8xi32, 5>, memref<400xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @dynamic_shared_shape [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %sm = memref.cast %g : memref<512xi32, 3> to memref<?xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}src has a dynamic shape}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<?xi32, 3>) -> ()
    gpu.return
  }
}
