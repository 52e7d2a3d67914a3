// Rule 6: shared rows, alignment, store races, bounds.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @gap_inside_row [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[shared-row] src_layout (4,8,4):(64,8,2): the word axis has stride 2, so a row's words are at offsets 0, 2, 4, 6: a gap inside a 16-byte row}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(64,8,2)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @thread_stride_on_shared [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[shared-row] src_layout (4,8,4):(32,4@laneid,1) axis 1 has thread stride 4@laneid; the shared layout gives memory strides only}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4@laneid,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @misaligned_row_stride [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src_layout (4,8,4):(48,6,1): shared row (matrix=0, row=1, word=0) starts at byte 24 (element 6), not a multiple of 16}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(48,6,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @misaligned_matrix_stride [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src_layout (4,8,4):(34,4,1): shared row (matrix=1, row=0, word=0) starts at byte 136 (element 34), not a multiple of 16}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(34,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @misaligned_static_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %sm = memref.subview %g[2] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: 2>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src_layout (4,8,4):(32,4,1): shared row (matrix=0, row=0, word=0) starts at byte 8 (element 2, memref offset 2 included), not a multiple of 16}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: 2>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @unaligned_global [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3>
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src: the IR proves only 4-byte alignment for the shared buffer, but every row must start 16-byte aligned; declare it with memref.global ... {alignment = 16 : i64}}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @eight_byte_global [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 8 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src: the IR proves only 8-byte alignment for the shared buffer}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @unproven_dynamic_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %o = gpu.block_id x
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src has a dynamic offset and the IR proves a multiple of 1 elements about it, but every row must start 16-byte aligned; make the offset a multiple of 4 words}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @dynamic_offset_times_two [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c2 = arith.constant 2 : index
    %o = arith.muli %b, %c2 : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[row-alignment] src has a dynamic offset and the IR proves a multiple of 2 elements about it}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @store_rows_overlap [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[store-race] dst_layout (4,8,4):(32,0,1): stmatrix rows (matrix=0, row=0, word=0) and (matrix=0, row=1, word=0) both write elements 0..3 in one instruction; destination rows must not overlap}}
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
    // expected-error@+1 {{[store-race] dst_layout (4,4,8,4):(0,32,4,1): stmatrix rows (warp=0, matrix=0, row=0, word=0) and (warp=1, matrix=0, row=0, word=0) both write elements 0..3 from different warps}}
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(0,32,4,1)">, src_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shared_out_of_bounds [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<400xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<400xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[bounds] src_layout (4,8,4):(128,4,1): shared row (matrix=3, row=4, word=0) covers elements 400..403, outside src's 400 elements}}
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
    // expected-error@+1 {{[bounds] src has a dynamic shape; the contract needs a static shape to prove every offset in bounds}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<?xi32, 3>) -> ()
    gpu.return
  }
}
