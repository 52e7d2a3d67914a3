// [row-alignment] every shared row starts 16-byte aligned: buffer alignment, memref offset and strides; a swizzled buffer is aligned to the swizzle's period and a swizzled view's dynamic offset is a multiple of it.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @misaligned_row_stride [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}(matrix=0, row=1, word=0)}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}(matrix=1, row=0, word=0)}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}(matrix=0, row=0, word=0)}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}only 4-byte alignment}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}only 8-byte alignment}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}dynamic offset{{.*}}a multiple of 1 elements}}
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
    // expected-error-re@+1 {{[row-alignment]{{.*}}dynamic offset{{.*}}a multiple of 2 elements}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

// The proofs of a dynamic offset's multiple through arith.andi / shli / addi / subi / muli / index_cast.
gpu.module @andi_minus_four_proves_four [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %m = arith.constant -4 : index
    %o = arith.andi %b, %m : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shli_by_two_proves_four [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c2 = arith.constant 2 : index
    %o = arith.shli %b, %c2 : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @addi_of_multiples_of_four_and_eight [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c2 = arith.constant 2 : index
    %c8 = arith.constant 8 : index
    %s = arith.shli %b, %c2 : index
    %t = arith.muli %b, %c8 : index
    %o = arith.addi %s, %t : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @subi_keeps_the_common_multiple [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c4 = arith.constant 4 : index
    %c12 = arith.constant 12 : index
    %s = arith.muli %b, %c4 : index
    %o = arith.subi %s, %c12 : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @index_cast_of_a_shifted_i32 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %i = arith.index_cast %b : index to i32
    %c3 = arith.constant 3 : i32
    %s = arith.shli %i, %c3 : i32
    %o = arith.index_cast %s : i32 to index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @addi_of_four_and_one_proves_one [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %s = arith.shli %b, %c2 : index
    %o = arith.addi %s, %c1 : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}dynamic offset{{.*}}a multiple of 1 elements}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @andi_minus_two_proves_two [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %m = arith.constant -2 : index
    %o = arith.andi %b, %m : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}dynamic offset{{.*}}a multiple of 2 elements}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shli_by_a_dynamic_amount_proves_only_the_shifted_multiple [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %b = gpu.block_id x
    %o = arith.shli %b, %b : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}dynamic offset{{.*}}a multiple of 1 elements}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

// A nested row mode: each row start is checked.
gpu.module @nested_row_mode_misaligned [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 128 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}shared row (matrix=0, row=1, word=0) starts at byte 136}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,(2,4),4):(256,(34,64),1)">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A memref.view caps the alignment at what its byte shift is a multiple of.
gpu.module @view_at_a_six_byte_shift [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @bytes : memref<4096xi8, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %c6 = arith.constant 6 : index
    %raw = memref.get_global @bytes : memref<4096xi8, 3>
    %sm = memref.view %raw[%c6][] : memref<4096xi8, 3> to memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}only 2-byte alignment}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// The swizzle applies to the offset from the buffer: a dynamic view offset (here proven a multiple of 4 words
// only) passes through Sw<3,2,3> only as a multiple of its period, 256 words.
gpu.module @swizzled_view_dynamic_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<4096xi32, 3> {alignment = 1024 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<4096xi32, 3>
    %b = gpu.block_id x
    %c4 = arith.constant 4 : index
    %o = arith.muli %b, %c4 : index
    %sm = memref.subview %g[%o] [1024] [1] : memref<4096xi32, 3> to memref<1024xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}proves a multiple of 4 elements about that offset, but only a multiple of the swizzle's period (256 words) passes through it}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)">} : (memref<4xi32, 5>, memref<1024xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

// A memref.view moves the base pointer itself: by 512 bytes, half of Sw<3,2,3>'s period of 1024 bytes.
gpu.module @swizzled_memref_view [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @bytes : memref<16384xi8, 3> {alignment = 1024 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @bytes : memref<16384xi8, 3>
    %shift = arith.constant 512 : index
    %sm = memref.view %g[%shift][] : memref<16384xi8, 3> to memref<1024xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+2 {{[row-alignment]{{.*}}a memref.view moved the buffer's base by an amount the IR proves a multiple of 512 bytes about{{.*}}period (1024 bytes)}}
    // expected-error-re@+1 {{[row-alignment]{{.*}}the swizzle repeats every 1024 bytes of the offset from the buffer, but the IR proves only 512-byte alignment}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)">} : (memref<4xi32, 5>, memref<1024xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// The swizzle is a function of the offset from the buffer: aligned to its period (1,024 bytes for Sw<3,2,3>),
// the swizzled offsets sit on the banks the swizzle was chosen for, and match TMA's swizzle of the address.
gpu.module @swizzled_buffer_underaligned [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<4096xi32, 3> {alignment = 128 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<4096xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[row-alignment]{{.*}}the swizzle repeats every 1024 bytes of the offset from the buffer, but the IR proves only 128-byte alignment for the buffer; declare it with {alignment = 1024 : i64}}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)">} : (memref<4xi32, 5>, memref<4096xi32, 3>) -> ()
    gpu.return
  }
}
