// Values that are the same throughout a function are made once, at its entry: the lane part of the
// address per layout, and the register-slot indices. Transfers in loops and later in the function reuse
// them; another function, or a gpu.launch body, makes its own.
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --tile-lower-matrix-transfer | filecheck %s

// CHECK-LABEL: gpu.func @twice_and_in_a_loop
// CHECK:       %[[LANE:.*]] = gpu.lane_id
// CHECK:       %[[OFF4:.*]] = arith.addi %{{.*}}, %{{.*}} : i32
// CHECK-NEXT:  %[[I0:.*]] = arith.constant 0 : index
// CHECK-NEXT:  %[[I1:.*]] = arith.constant 1 : index
// CHECK-NEXT:  %[[I2:.*]] = arith.constant 2 : index
// CHECK-NEXT:  %[[I3:.*]] = arith.constant 3 : index
// The x2 transfer's lane part differs (one matrix-select bit), so it has its own; its slots reuse the indices.
// CHECK-NEXT:  %[[LANE2:.*]] = gpu.lane_id
// CHECK:       %[[OFF2:.*]] = arith.addi %{{.*}}, %{{.*}} : i32
// CHECK-NEXT:  memref.get_global @sm
// CHECK-NOT:   gpu.lane_id
// CHECK:       llvm.getelementptr %{{.*}}[%[[OFF4]]]
// CHECK:       memref.store %{{.*}}, %[[R:.*]][%[[I3]]] : memref<4xi32, 5>
// CHECK:       scf.for
// CHECK:       llvm.getelementptr %{{.*}}[%[[OFF4]]]
// CHECK:       memref.store %{{.*}}, %[[R]][%[[I3]]] : memref<4xi32, 5>
// CHECK:       llvm.getelementptr %{{.*}}[%[[OFF2]]]
// CHECK:       nvvm.ldmatrix %{{.*}} {{{.*}}num = 2 : i32
// CHECK:       memref.store %{{.*}}, %[[R]][%[[I1]]] : memref<4xi32, 5>
// CHECK-NOT:   arith.constant {{[0-9]+}} : index
// CHECK:       gpu.return

gpu.module @m [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @twice_and_in_a_loop() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    scf.for %i = %c0 to %c8 step %c1 {
      "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    }
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// CHECK-LABEL: gpu.func @first
// CHECK-NEXT:  gpu.lane_id
// CHECK:       nvvm.ldmatrix
// CHECK-LABEL: gpu.func @second
// CHECK-NEXT:  gpu.lane_id
// CHECK:       nvvm.ldmatrix

gpu.module @two_functions [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @first() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
  gpu.func @second() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// In a gpu.launch, the lane part goes to the launch body's entry, not to the host function's.
// CHECK-LABEL: func.func @host
// CHECK-NOT:   gpu.lane_id
// CHECK:       gpu.launch
// CHECK-NEXT:  %[[LANE:.*]] = gpu.lane_id
// CHECK:       memref.assume_alignment
// CHECK:       nvvm.ldmatrix

module attributes {gpu.container_module} {
  func.func @host() {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) workgroup(%sm : memref<512xi32, 3>) {
      %aligned = memref.assume_alignment %sm, 16 : memref<512xi32, 3>
      %r = memref.alloca() : memref<4xi32, 5>
      "tile.matrix_transfer"(%r, %aligned) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
      gpu.terminator
    }
    return
  }
}

// -----

// Register storage allocated after a loop moves to the entry's start: scf-to-cf turns the loop into blocks,
// and LLVM keeps only the allocas of the entry block in registers (else .local in the PTX).
// CHECK-LABEL: gpu.func @alloca_after_a_loop
// CHECK:       memref.alloca() : memref<4xi32, 5>
// CHECK-NEXT:  memref.get_global @sm
// CHECK:       scf.for
// CHECK-NOT:   memref.alloca
// CHECK:       nvvm.ldmatrix
gpu.module @hoist [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @alloca_after_a_loop() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %z = arith.constant 0 : i32
    scf.for %i = %c0 to %c4 step %c1 {
      memref.store %z, %sm[%i] : memref<512xi32, 3>
    }
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
