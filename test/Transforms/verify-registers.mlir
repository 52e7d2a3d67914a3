// Rule 7: register owners, distinct loaded slots, register bounds.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @row_word_swapped [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (4,8,4):(1,1@laneid,4@laneid): register word (matrix=0, row=0, word=1) is mapped to lane 4, but the instruction delivers it to lane 4*row+word = 1; give the row axis stride 4@laneid and the word axis 1@laneid}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,1@laneid,4@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @row_stride_eight [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (4,8,4):(1,8@laneid,1@laneid): register word (matrix=0, row=1, word=0) is mapped to lane 8, but the instruction delivers it to lane 4*row+word = 4}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,8@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @word_in_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (4,8,4):(4,4@laneid,1): register word (matrix=0, row=0, word=1) is mapped to lane 0, but the instruction delivers it to lane 4*row+word = 1}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(4,4@laneid,1)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<16xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @matrix_on_lanes [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (4,8,4):(32@laneid,4@laneid,1@laneid) axis 0 has stride 32@laneid; lanes are fixed by the instruction}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32@laneid,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @group_axis_not_warpid [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (4,4,8,4):(4,1,4@laneid,1@laneid): the group axis must have stride 1@warpid (warp g of the warpgroup holds the registers of group coordinate g), got 4}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<16xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @overlapping_matrices [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-overlap] dst_layout (4,8,4):(0,4@laneid,1@laneid): loaded register slot 0 is written by both (matrix=0) and (matrix=1); loaded slots must be distinct}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(0,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @overlapping_repeats [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-overlap] dst_layout (2,2,8,4):(1,1,4@laneid,1@laneid): loaded register slot 1 is written by both (repeat=(0), matrix=1) and (repeat=(1), matrix=0)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(1,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,2,8,4):(64,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @register_out_of_bounds [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<6xi32, 5>
    // expected-error@+1 {{[bounds] dst_layout (2,4,8,4):(4,1,4@laneid,1@laneid): register slot 6 of (repeat=(1), matrix=2) is outside dst, which has 6 slots per thread}}
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
    // expected-error@+1 {{[bounds] dst_layout (4,8,4):(-1,4@laneid,1@laneid): register slot -1 of (matrix=1) is outside dst, which has 8 slots per thread}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(-1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
