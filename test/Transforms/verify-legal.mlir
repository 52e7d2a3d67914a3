// Legal transfers pass the verifier unchanged.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer | filecheck %s
// CHECK-COUNT-17: "tile.matrix_transfer"

// The specification's example: interleaved rows, register slots 0, 2, 8, 10.
gpu.module @spec_example [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<12xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">} : (memref<12xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @x4_contiguous [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Rows 48 bytes apart: gaps between rows are legal.
gpu.module @x1_gapped_rows [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x1.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(1,8,4):(0,4@laneid,1@laneid)">, src_layout = #tile.layout<"(1,8,4):(0,12,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Slots interleave across repeats.
gpu.module @register_gaps [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(1,2,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @two_repeat_axes [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<12xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,3,2,8,4):(6,2,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,3,2,8,4):(192,64,32,4,1)">} : (memref<12xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @trans [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shared_cta_space [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared::cta.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// stmatrix: dst = shared, src = registers.
gpu.module @store [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<8xi32, 5>) -> ()
    gpu.return
  }
}

// -----

gpu.module @store_trans_repeats [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(64,32,4,1)">, src_layout = #tile.layout<"(2,2,8,4):(2,1,4@laneid,1@laneid)">} : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}

// -----

gpu.module @f32_containers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xf32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xf32, 3>
    %r = memref.alloca() : memref<4xf32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xf32, 5>, memref<512xf32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @warpgroup [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Loads may read the same rows from every warp.
gpu.module @warpgroup_shared_rows [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(0,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @cta [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cta",
        dst_layout = #tile.layout<"(2,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A region starting 16 bytes into the buffer.
gpu.module @static_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %sm = memref.subview %g[4] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: 4>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: 4>, 3>) -> ()
    gpu.return
  }
}

// -----

// A dynamic stage offset proven a multiple of 4 words (128 * stage).
gpu.module @dynamic_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %g = memref.get_global @sm : memref<512xi32, 3>
    %stage = gpu.block_id x
    %c128 = arith.constant 128 : index
    %o = arith.muli %stage, %c128 : index
    %sm = memref.subview %g[%o] [128] [1] : memref<512xi32, 3> to memref<128xi32, strided<[1], offset: ?>, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<128xi32, strided<[1], offset: ?>, 3>) -> ()
    gpu.return
  }
}

// -----

// A branch on the block id is uniform across the warp.
gpu.module @uniform_cond_br [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %b = gpu.block_id x
    %c8 = arith.constant 8 : index
    %p = arith.cmpi ult, %b, %c8 : index
    cf.cond_br %p, ^bb1, ^bb2
  ^bb1:
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    cf.br ^bb2
  ^bb2:
    gpu.return
  }
}

// -----

// A uniform loop around the transfer is fine.
gpu.module @in_straight_line_after_branch_free_loop [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c4 step %c1 {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// Uniform control flow that the analysis proves: warp and block ids, kernel arguments, shared loads.
gpu.module @warp_uniform_branch_on_subgroup_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %w = gpu.subgroup_id : index
    %b = gpu.block_id x
    %c1 = arith.constant 1 : index
    %p = arith.cmpi ult, %w, %c1 : index
    %q = arith.cmpi ult, %b, %c1 : index
    %both = arith.andi %p, %q : i1
    scf.if %both {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @loop_bound_from_a_kernel_argument_and_shared_memory [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k(%arg0: index) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %v = memref.load %sm[%c0] : memref<512xi32, 3>
    %n = arith.index_cast %v : i32 to index
    scf.for %i = %c0 to %arg0 step %c1 {
      scf.for %j = %c0 to %n step %c1 {
        scf.execute_region {
          "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
          scf.yield
        }
      }
    }
    gpu.return
  }
}

// -----

gpu.module @uniform_index_switch_and_affine_for [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %b = gpu.block_id x
    scf.index_switch %b
    case 0 {
      affine.for %i = 0 to 4 {
        "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      }
      scf.yield
    }
    default {
    }
    gpu.return
  }
}

// -----

// Register storage at a static offset: slots count from the memref's first element.
gpu.module @register_storage_at_a_static_offset [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %a = memref.alloca() : memref<12xi32, 5>
    %r = memref.subview %a[4] [8] [1] : memref<12xi32, 5> to memref<8xi32, strided<[1], offset: 4>, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, strided<[1], offset: 4>, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @sm_75_with_ptx_65 [#nvvm.target<chip = "sm_75", features = "+ptx65">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Nested modes and swizzles: the mma A operand as one x4 from a padded row-major 16x16 b16 tile; a swizzled
// 64x64 b16 tile with 128-byte rows, by rows and with .trans (the B operand).
gpu.module @mma_a_operand_as_one_x4 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<576xi32, 3> {alignment = 128 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<576xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"((2,2),8,4):((288,4),36,1)">} : (memref<16xi32, 5>, memref<576xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @mma_a_operand_nested_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<576xi32, 3> {alignment = 128 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<576xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"((2,2),8,4):((1,2),4@laneid,1@laneid)">, src_layout = #tile.layout<"((2,2),8,4):((288,4),36,1)">} : (memref<16xi32, 5>, memref<576xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @swizzled_128_byte_rows [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 1024 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o (4,(2,2),8,4):(8,(256,4),32,1)">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @swizzled_trans_b_operand [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 1024 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,4,8,4):(4,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o (4,(2,2),8,4):(512,(8,256),32,1)">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}
