// Rules 4-5: operand roles, memory spaces, element types, shapes.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @swapped_operands [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+2 {{[operands] ldmatrix reads shared memory into registers, so dst must be register storage (a memref in #gpu.address_space<private>), but it is in shared memory; operand order is (dst = registers, src = shared)}}
    // expected-error@+1 {{[operands] ldmatrix reads shared memory into registers, so src must be shared memory (a memref in #gpu.address_space<workgroup>), but it is in private memory}}
    "tile.matrix_transfer"(%sm, %r) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<8xi32, 5>) -> ()
    gpu.return
  }
}

// -----

gpu.module @global_source [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.alloc() {alignment = 16 : i64} : memref<512xi32>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{but it is in global memory (ldmatrix/stmatrix cannot address global memory; stage the tile in shared memory)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @store_into_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+2 {{[operands] stmatrix writes registers to shared memory, so src must be register storage}}
    // expected-error@+1 {{[operands] stmatrix writes registers to shared memory, so dst must be shared memory}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @f16_storage [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<1024xf16, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<1024xf16, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[operands] src has element type f16; both operands use 32-bit containers (i32 or f32), each holding two b16 elements; expose packed 16-bit storage as b32 words}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<1024xf16, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @i64_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi64, 5>
    // expected-error@+1 {{[operands] dst has element type i64; both operands use 32-bit containers}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi64, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @x2_with_x4_atom [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+2 {{[shape] dst_layout (4,8,4):(1,4@laneid,1@laneid) must end in (matrix,row,word) = (2,8,4) for ldmatrix.sync.aligned.m8n8.x2.shared.b16 (.x2)}}
    // expected-error@+1 {{[shape] src_layout (4,8,4):(32,4,1) must end in (matrix,row,word) = (2,8,4)}}
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
    // expected-error@+2 {{[shape] dst_layout (4,8,8):(1,4@laneid,1@laneid) must end in (matrix,row,word) = (4,8,4)}}
    // expected-error@+1 {{[shape] src_layout (4,8,8):(64,8,1) must end in}}
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
    // expected-error@+1 {{[shape] the transfer moves 256 words per thread (64 repeats x 4 matrices), but a thread has at most 255 registers, so they would spill to local memory}}
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
    // expected-error@+1 {{[shape] the transfer moves 4000000 words per thread (1000000 repeats x 4 matrices)}}
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
    // expected-error@+1 {{[shape] dst_layout and src_layout have different shapes: (2,4,8,4) (registers) vs (3,4,8,4) (shared)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(3,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
