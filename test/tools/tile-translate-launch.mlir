// A transfer in a gpu.launch body reaches the PTX: tile-to-ptx outlines launches into kernels first; the
// body's workgroup attribution is the shared buffer (its alignment from memref.assume_alignment).
// RUN: tile-translate --mlir-to-ptx %s | filecheck %s
// RUN: %if ptxas %{ tile-translate --mlir-to-ptx %s -o %t.ptx && ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

// CHECK: .target sm_90
// CHECK-LABEL: .entry host_kernel(
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-NOT: .local
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
