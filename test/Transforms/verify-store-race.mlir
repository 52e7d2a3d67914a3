// [store-race] stmatrix rows of one instruction, or of different warps, do not overlap.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @store_rows_overlap [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[store-race]{{.*}}(matrix=0, row=0, word=0){{.*}}(matrix=0, row=1, word=0)}}
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32,0,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<8xi32, 5>) -> ()
    gpu.return
  }
}

// -----

gpu.module @store_warps_overlap [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[store-race]{{.*}}(warp=0, matrix=0, row=0, word=0){{.*}}(warp=1, matrix=0, row=0, word=0)}}
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(0,32,4,1)">, src_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}
