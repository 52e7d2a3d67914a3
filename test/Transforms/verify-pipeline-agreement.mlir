// The verifier gives the pipeline's verdict: each transfer below was once accepted by
// tile-verify-matrix-transfer and then failed (or aborted) in tile-to-ptx. Now both reject it, at the op.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer
// RUN: not tile-translate --split-input-file --mlir-to-ptx %s 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE-NOT: LLVM ERROR
// PIPELINE-NOT: LLVMTranslationDialectInterface

// Every target of the module is compiled, so the transfer must be legal for each (stmatrix on sm_80 aborted llc).
// PIPELINE: verify-pipeline-agreement.mlir:{{[0-9]+}}:5: error: 'tile.matrix_transfer' op [target] stmatrix needs sm_90 or newer, but the gpu.module targets sm_80
gpu.module @two_targets [#nvvm.target<chip = "sm_90">, #nvvm.target<chip = "sm_80">] {
  memref.global "private" @sm : memref<256xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<256xi32, 3>
    %regs = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[target] stmatrix needs sm_90 or newer, but the gpu.module targets sm_80}}
    "tile.matrix_transfer"(%sm, %regs) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, dst_layout = #tile.layout<"(4,8,4):(32,4,1)">}
      : (memref<256xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}

// -----

// PIPELINE: verify-pipeline-agreement.mlir:{{[0-9]+}}:1: error: [target] this gpu.module targets #rocdl.target<chip = "gfx90a">
gpu.module @amd [#rocdl.target<chip = "gfx90a">] {
  memref.global "private" @sm : memref<256xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<256xi32, 3>
    %regs = memref.alloca() : memref<4xi32, 5>
    // expected-error-re@+1 {{[target] the gpu.module also targets #rocdl.target<chip = "gfx90a">, but ldmatrix is an NVIDIA instruction}}
    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">}
      : (memref<4xi32, 5>, memref<256xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A register alloca of a layout other than the identity: the LLVM conversion cannot allocate it.
// PIPELINE: verify-pipeline-agreement.mlir:{{[0-9]+}}:5: error: 'tile.matrix_transfer' op [operands] dst (register storage) is allocated by a memref.alloca with layout strided<[0]>
gpu.module @zero_stride_registers [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<256xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<256xi32, 3>
    %regs = memref.alloca() : memref<1xi32, strided<[0]>, 5>
    // expected-error-re@+1 {{[operands] dst (register storage) is allocated by a memref.alloca with layout strided<[0]>}}
    "tile.matrix_transfer"(%regs, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x1.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(1,8,4):(0,4@laneid,1@laneid)">, src_layout = #tile.layout<"(1,8,4):(0,4,1)">}
      : (memref<1xi32, strided<[0]>, 5>, memref<256xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A gpu.launch body is judged as the kernel it becomes: register storage from outside is a kernel argument,
// the launch's constant block size is the kernel's known_block_size.
// PIPELINE: verify-pipeline-agreement.mlir:{{[0-9]+}}:7: error: 'tile.matrix_transfer' op [operands] dst (register storage) comes from argument
// PIPELINE: verify-pipeline-agreement.mlir:{{[0-9]+}}:7: error: 'tile.matrix_transfer' op [participation] known_block_size (32, 1, 1) has 32 threads, not a multiple of 128
module attributes {gpu.container_module} {
  func.func @registers_from_outside() {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %r = memref.alloca() : memref<4xi32, 5>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) workgroup(%sm : memref<512xi32, 3>) {
      %aligned = memref.assume_alignment %sm, 16 : memref<512xi32, 3>
      // expected-error-re@+1 {{[operands] dst (register storage) comes from argument outside the gpu.launch body}}
      "tile.matrix_transfer"(%r, %aligned) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
      gpu.terminator
    }
    return
  }
  func.func @warpgroup_in_one_warp() {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) workgroup(%sm : memref<2048xi32, 3>) {
      %aligned = memref.assume_alignment %sm, 16 : memref<2048xi32, 3>
      %r = memref.alloca() : memref<4xi32, 5>
      // expected-error-re@+1 {{[participation] known_block_size (32, 1, 1) has 32 threads, not a multiple of 128}}
      "tile.matrix_transfer"(%r, %aligned) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
          dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(512,32,4,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
      gpu.terminator
    }
    return
  }
}
