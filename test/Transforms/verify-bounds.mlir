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

// -----

// Buffers the chip cannot hold (which also keeps every address in 32-bit arithmetic).
gpu.module @shared_larger_than_the_chip_allows [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @big : memref<60000xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @big : memref<60000xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+2 {{[bounds]{{.*}}reaches 240000 bytes into its shared buffer, more than the 232448 bytes a block can have on sm_90}}
    // expected-error-re@+1 {{[bounds]{{.*}}declares 240000 bytes of static shared memory}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<60000xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @static_shared_over_48_kib_in_two_globals [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @a : memref<8192xi32, 3> {alignment = 16 : i64}
  memref.global "private" @b : memref<8192xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @a : memref<8192xi32, 3>
    %other = memref.get_global @b : memref<8192xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}declares 65536 bytes of static shared memory}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<8192xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @register_storage_beyond_local_memory [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<200000xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}has 200000 words, more than the 524288 bytes of local memory}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<200000xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A stride of 2^30 words: addresses that 32-bit arithmetic cannot hold are outside any block's shared memory.
gpu.module @stride_of_two_to_the_30 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<1073741856xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<1073741856xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+2 {{[bounds]{{.*}}reaches 4294967424 bytes into its shared buffer, more than the 232448 bytes}}
    // expected-error-re@+1 {{[bounds]{{.*}}declares 4294967424 bytes of static shared memory}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,8,4):(1073741824,4,1)">} : (memref<8xi32, 5>, memref<1073741856xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Dynamic shared memory: no more than the chip has.
gpu.module @dynamic_shared_beyond_the_chip [#nvvm.target<chip = "sm_90">] {
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %c0 = arith.constant 0 : index
    %raw = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %sm = memref.view %raw[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<65536xi32, #gpu.address_space<workgroup>>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[bounds]{{.*}}reaches 262144 bytes into its shared buffer, more than the 232448 bytes a block can have on sm_90}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<65536xi32, #gpu.address_space<workgroup>>) -> ()
    gpu.return
  }
}
