// [participation] all 32 lanes execute the transfer: no thread-dependent control flow around it; known_block_size a multiple of the scope's threads.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @if_on_thread_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c16 = arith.constant 16 : index
    %p = arith.cmpi ult, %t, %c16 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @loop_bound_from_lane [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %n = arith.andi %l, %c3 : index
    scf.for %i = %c0 to %n step %c1 {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.for (at}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @if_on_value_from_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %c0 = arith.constant 0 : index
    %v = memref.load %r[%c0] : memref<8xi32, 5>
    %z = arith.constant 0 : i32
    %p = arith.cmpi ne, %v, %z : i32
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @while_on_thread_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c1 = arith.constant 1 : index
    %w = scf.while (%i = %t) : (index) -> index {
      %c = arith.cmpi ult, %i, %c1 : index
      scf.condition(%c) %i : index
    } do {
    ^bb0(%j: index):
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.while (at}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      %n = arith.addi %j, %c1 : index
      scf.yield %n : index
    }
    gpu.return
  }
}

// -----

gpu.module @cond_br_on_lane [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %c8 = arith.constant 8 : index
    %p = arith.cmpi ult, %l, %c8 : index
    cf.cond_br %p, ^bb1, ^bb2
  ^bb1:
    // expected-error-re@+1 {{[participation]{{.*}}reached through a branch (at}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    cf.br ^bb2
  ^bb2:
    gpu.return
  }
}

// -----

gpu.module @block_not_multiple_of_warp [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 48, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}(48, 1, 1) has 48 threads, not a multiple of 32}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @warpgroup_block_96 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 96, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}(96, 1, 1) has 96 threads, not a multiple of 128}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Sound for every region-holding op: what the analysis cannot prove uniform is rejected.
gpu.module @index_switch_on_lane [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    scf.index_switch %l
    case 0 {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.index_switch (at {{.*}}) whose selector depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      scf.yield
    }
    default {
    }
    gpu.return
  }
}

// -----

gpu.module @execute_region_with_divergent_branch [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %c4 = arith.constant 4 : index
    %p = arith.cmpi ult, %l, %c4 : index
    scf.execute_region {
      cf.cond_br %p, ^bb1, ^bb2
    ^bb1:
      // expected-error-re@+1 {{[participation]{{.*}}its block can be reached through a branch (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      cf.br ^bb2
    ^bb2:
      scf.yield
    }
    gpu.return
  }
}

// -----

gpu.module @affine_if_on_thread_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    affine.if affine_set<(d0) : (d0 - 16 >= 0)>(%t) {
      // expected-error-re@+1 {{[participation]{{.*}}inside an affine.if (at {{.*}}) whose condition operands depend on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @unknown_region_op [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.parallel (%i) = (%c0) to (%c1) step (%c1) {
      // expected-error-re@+1 {{[participation]{{.*}}inside 'scf.parallel' (at {{.*}}), which the uniformity analysis does not know}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      scf.reduce
    }
    gpu.return
  }
}

// -----

gpu.module @condition_from_a_shuffle [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %c1 = arith.constant 1 : i32
    %c32 = arith.constant 32 : i32
    %s, %valid = gpu.shuffle xor %c1, %c1, %c32 : i32
    %z = arith.constant 0 : i32
    %p = arith.cmpi eq, %s, %z : i32
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @condition_from_a_call [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  func.func private @opaque() -> i1
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %v = func.call @opaque() : () -> i1
    scf.if %v {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @loop_carried_thread_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %n = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %c0) -> (index) {
      %b = arith.addi %a, %t : index
      scf.yield %b : index
    }
    scf.for %j = %c0 to %n step %c1 {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.for (at {{.*}}) whose bounds or step depend on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @result_of_an_if_on_the_lane [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %p = arith.cmpi ult, %l, %c4 : index
    %n = scf.if %p -> (index) {
      scf.yield %c1 : index
    } else {
      scf.yield %c4 : index
    }
    scf.for %j = %c0 to %n step %c1 {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.for (at {{.*}}) whose bounds or step depend on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @device_function [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @helper() {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}in @helper, which is not a kernel}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

module attributes {gpu.container_module} {
  func.func @host() {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) workgroup(%w : memref<512xi32, 3>) {
      %sm = memref.assume_alignment %w, 16 : memref<512xi32, 3>
      %r = memref.alloca() : memref<8xi32, 5>
      %c16 = arith.constant 16 : index
      %p = arith.cmpi ult, %tx, %c16 : index
      scf.if %p {
        // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
      }
      gpu.terminator
    }
    return
  }
}

// -----

// Blocks that cannot be launched.
gpu.module @block_of_zero [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 0, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}is not three positive extents}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @block_of_2048 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 2048, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}exceeds the largest block}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @block_of_negative_threads [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: -32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}is not three positive extents}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @block_of_1088_threads [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 34, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error-re@+1 {{[participation]{{.*}}has 1088 threads, more than the 1024}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A warp's transfer under a branch on the warp index (thread_id x / 32, whole warps in x): every lane of
// the warps that take it runs it. Accepted (warp specialization).
gpu.module @warp_scope_under_warp_index [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 2, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %w = arith.divui %t, %c32 : index
    %p = arith.cmpi eq, %w, %c0 : index
    scf.if %p {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    %c5 = arith.constant 5 : index
    %n = arith.shrui %t, %c5 : index
    scf.for %i = %c0 to %n step %c1 {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// The CTA's transfer needs every warp: the same branch leaves warp 1's part undone.
gpu.module @cta_scope_under_warp_index [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c32 = arith.constant 32 : index
    %w = arith.divui %t, %c32 : index
    %p = arith.cmpi eq, %w, %c0 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition differs between warps}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cta",
          dst_layout = #tile.layout<"(2,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// gpu.subgroup_id differs between warps too.
gpu.module @cta_scope_under_subgroup_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %w = gpu.subgroup_id : index
    scf.for %i = %c0 to %w step %c1 {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.for (at {{.*}}) whose bounds or step differ between warps}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cta",
          dst_layout = #tile.layout<"(2,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// thread_id x / 16 splits a warp in two.
gpu.module @warp_scope_under_half_warp_index [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c16 = arith.constant 16 : index
    %w = arith.divui %t, %c16 : index
    %p = arith.cmpi eq, %w, %c0 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// With 16 threads in x a warp spans two y rows, and thread_id x / 32 (always 0 here) proves nothing about
// them: the analysis keeps it divergent. So it does without a known x extent.
gpu.module @warp_index_when_x_splits_warps [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 16, 4, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %t = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %c32 = arith.constant 32 : index
    %w = arith.divui %t, %c32 : index
    %p = arith.cmpi eq, %w, %c0 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// A warpgroup's transfer may sit under a branch on the warpgroup's index (warp specialization: the consumers'
// epilogue), which the same in a warpgroup's 128 threads.
gpu.module @warpgroup_scope_under_warpgroup_branch [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %c128 = arith.constant 128 : index
    %c1 = arith.constant 1 : index
    %g = arith.divui %t, %c128 : index
    %p = arith.cmpi eq, %g, %c1 : index
    scf.if %p {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
          dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @cta_scope_under_warpgroup_branch [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<1024xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<1024xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %c7 = arith.constant 7 : index
    %c0 = arith.constant 0 : index
    %g = arith.shrui %t, %c7 : index
    %p = arith.cmpi eq, %g, %c0 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition differs between warpgroups (the warpgroup's index), and the transfer's scope spans the block}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cta",
          dst_layout = #tile.layout<"(8,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(8,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<1024xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

gpu.module @warpgroup_scope_under_warp_branch [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %c32 = arith.constant 32 : index
    %c1 = arith.constant 1 : index
    %w = arith.divui %t, %c32 : index
    %p = arith.cmpi eq, %w, %c1 : index
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition differs between warps (the warp's index), and the transfer's scope spans warps}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
          dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// A broadcast (a shuffle idx of the whole warp from a constant lane) gives every lane lane 0's value: a branch
// on a broadcast lane id is the same in the warp's 32 lanes.
gpu.module @warp_scope_under_broadcast_lane [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %l32 = arith.index_cast %l : index to i32
    %c0 = arith.constant 0 : i32
    %c32 = arith.constant 32 : i32
    %b, %valid = gpu.shuffle idx %l32, %c0, %c32 : i32
    %p = arith.cmpi eq, %b, %c0 : i32
    scf.if %p {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// ... but lane 0's value may differ from warp to warp: not enough for a warpgroup's transfer.
gpu.module @warpgroup_scope_under_broadcast_thread_id [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %t32 = arith.index_cast %t : index to i32
    %c0 = arith.constant 0 : i32
    %c32 = arith.constant 32 : i32
    %b, %valid = gpu.shuffle idx %t32, %c0, %c32 : i32
    %p = arith.cmpi eq, %b, %c0 : i32
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition differs between warps (the warp's index), and the transfer's scope spans warps}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
          dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// A broadcast warpgroup index (CUTLASS's canonical_warp_group_idx) keeps its level: the same in a warpgroup.
gpu.module @warpgroup_scope_under_broadcast_warpgroup_index [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    %t = gpu.thread_id x
    %c128 = arith.constant 128 : index
    %g = arith.divui %t, %c128 : index
    %g32 = arith.index_cast %g : index to i32
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c32 = arith.constant 32 : i32
    %b, %valid = gpu.shuffle idx %g32, %c0, %c32 : i32
    %p = arith.cmpi eq, %b, %c1 : i32
    scf.if %p {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
          dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}

// -----

// A shuffle idx over 16 lanes gives each half warp its own lane's value: not a broadcast.
gpu.module @condition_from_a_half_warp_shuffle [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    %l = gpu.lane_id
    %l32 = arith.index_cast %l : index to i32
    %c0 = arith.constant 0 : i32
    %c16 = arith.constant 16 : i32
    %b, %valid = gpu.shuffle idx %l32, %c0, %c16 : i32
    %p = arith.cmpi eq, %b, %c0 : i32
    scf.if %p {
      // expected-error-re@+1 {{[participation]{{.*}}inside an scf.if (at {{.*}}) whose condition depends on the thread id}}
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    }
    gpu.return
  }
}
