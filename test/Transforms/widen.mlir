// tile-widen-matrix-transfer (opt-in): repeats folded into the matrix mode where the contract allows.
// RUN: tile-opt %s --split-input-file --tile-widen-matrix-transfer | filecheck %s
// RUN: tile-opt %S/../../examples/spec_example.mlir --pass-pipeline='builtin.module(tile-widen-matrix-transfer, tile-to-ptx)' | filecheck %s --check-prefix=PTX

// The specification's example: two x2 become one x4.
// CHECK-LABEL: gpu.module @spec_example
// CHECK: dst_layout = #tile.layout<"((2,2),8,4):((2,8),4@laneid,1@laneid)">, opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
// CHECK-SAME: src_layout = #tile.layout<"((2,2),8,4):((8,128),16,1)">
// PTX-COUNT-1: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-NOT: ldmatrix.sync.aligned.m8n8.x2
gpu.module @spec_example [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<256xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<256xi32, 3>
    %r = memref.alloca() : memref<12xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (memref<12xi32, 5>, memref<256xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Four x1 repeats: one x4.
// CHECK-LABEL: gpu.module @four_x1
// CHECK: dst_layout = #tile.layout<"((1,4),8,4):((1,1),4@laneid,1@laneid)">, opcode = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
gpu.module @four_x1 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,1,8,4):(1,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,1,8,4):(32,4,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// stmatrix repeats that write the same rows overwrite in program order; in one instruction they would race,
// so the contract rejects the wider one and the transfer stays as written.
// CHECK-LABEL: gpu.module @overlapping_stores
// CHECK: opcode = "stmatrix.sync.aligned.m8n8.x2.shared.b16"
gpu.module @overlapping_stores [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(0,32,4,1)">, src_layout = #tile.layout<"(2,2,8,4):(2,1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}
