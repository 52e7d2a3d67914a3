// [attributes] only opcode, scope, dst_layout, src_layout; no opcode-specific keyword (pred).
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @pred [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[attributes]{{.*}}'pred'}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", pred = true,
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @cache_hint [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[attributes]{{.*}}'cache'}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", cache = "L1",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
