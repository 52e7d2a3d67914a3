gpu.module @mma_a_operand [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @tile : memref<576xi32, 3> {alignment = 16 : i64}
  gpu.func @mma_a_operand(%out: memref<32x4xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @tile : memref<576xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"((2,2),8,4):((288,4),36,1)">} : (memref<4xi32, 5>, memref<576xi32, 3>) -> ()
    %lane = gpu.lane_id
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %v0 = memref.load %r[%c0] : memref<4xi32, 5>
    %v1 = memref.load %r[%c1] : memref<4xi32, 5>
    %v2 = memref.load %r[%c2] : memref<4xi32, 5>
    %v3 = memref.load %r[%c3] : memref<4xi32, 5>
    memref.store %v0, %out[%lane, %c0] : memref<32x4xi32>
    memref.store %v1, %out[%lane, %c1] : memref<32x4xi32>
    memref.store %v2, %out[%lane, %c2] : memref<32x4xi32>
    memref.store %v3, %out[%lane, %c3] : memref<32x4xi32>
    gpu.return
  }
}

