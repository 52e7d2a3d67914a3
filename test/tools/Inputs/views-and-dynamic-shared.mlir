gpu.module @m [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @bytes : memref<4096xi8, 3> {alignment = 16 : i64}
  gpu.func @k(%out: memref<32x4xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %c0 = arith.constant 0 : index
    %c512 = arith.constant 512 : index
    %raw = memref.get_global @bytes : memref<4096xi8, 3>
    %halves = memref.view %raw[%c0][] : memref<4096xi8, 3> to memref<16x128xf16, 3>
    %words = memref.view %raw[%c512][] : memref<4096xi8, 3> to memref<512xi32, 3>
    %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %dwords = memref.view %dyn[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16384xi32, #gpu.address_space<workgroup>>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %words) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    "tile.matrix_transfer"(%r, %dwords) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<16384xi32, #gpu.address_space<workgroup>>) -> ()
    gpu.return
  }
}
