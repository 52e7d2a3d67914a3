gpu.module @kernels [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<256xi32, #gpu.address_space<workgroup>> {alignment = 16 : i64}
  gpu.func @load(%out: memref<32x12xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<256xi32, #gpu.address_space<workgroup>>
    %regs = memref.alloca() : memref<12xi32, #gpu.address_space<private>>
    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"(2,2,8,4):(128,8,6,1)">}
      : (memref<12xi32, #gpu.address_space<private>>, memref<256xi32, #gpu.address_space<workgroup>>) -> ()
    %lane = gpu.lane_id
    %c0 = arith.constant 0 : index
    %c10 = arith.constant 10 : index
    %first = memref.load %regs[%c0] : memref<12xi32, #gpu.address_space<private>>
    %last = memref.load %regs[%c10] : memref<12xi32, #gpu.address_space<private>>
    memref.store %first, %out[%lane, %c0] : memref<32x12xi32>
    memref.store %last, %out[%lane, %c10] : memref<32x12xi32>
    gpu.return
  }
}
