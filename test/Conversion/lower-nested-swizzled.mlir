// Nested modes and swizzled shared memory.
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --tile-lower-matrix-transfer | filecheck %s
// RUN: %if ptxas %{ tile-translate --mlir-to-ptx %S/Inputs/mma-a-operand.mlir -o %t.ptx && ptxas -arch=sm_90 %t.ptx -o %t.cubin %}
// RUN: tile-translate --mlir-to-ptx %S/Inputs/mma-a-operand.mlir | filecheck %s --check-prefix=PTX

// The A operand of mma.sync.m16n8k16 from a row-major 16x16 b16 tile with a padded row pitch of 36 words: one
// .x4 whose matrix mode (2,2):(288,4) is (row half, column half): lane l's matrix i = (l >> 3) & 3 gives
// (i & 1) * 288 + (i >> 1) * 4.
// CHECK-LABEL: gpu.func @mma_a_operand
// CHECK:       %[[L:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-NEXT:  %[[C7:.*]] = arith.constant 7 : i32
// CHECK-NEXT:  %[[ROW:.*]] = arith.andi %[[L]], %[[C7]] : i32
// CHECK-NEXT:  %[[C36:.*]] = arith.constant 36 : i32
// CHECK-NEXT:  %[[ROWS:.*]] = arith.muli %[[ROW]], %[[C36]] : i32
// CHECK-NEXT:  %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[Q:.*]] = arith.shrui %[[L]], %[[C3]] : i32
// CHECK-NEXT:  %[[C3B:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[I:.*]] = arith.andi %[[Q]], %[[C3B]] : i32
// CHECK-NEXT:  %[[C1:.*]] = arith.constant 1 : i32
// CHECK-NEXT:  %[[HALF:.*]] = arith.andi %[[I]], %[[C1]] : i32
// CHECK-NEXT:  %[[C288:.*]] = arith.constant 288 : i32
// CHECK-NEXT:  %[[DOWN:.*]] = arith.muli %[[HALF]], %[[C288]] : i32
// CHECK-NEXT:  %[[C1B:.*]] = arith.constant 1 : i32
// CHECK-NEXT:  %[[KH:.*]] = arith.shrui %[[I]], %[[C1B]] : i32
// CHECK-NEXT:  %[[C2:.*]] = arith.constant 2 : i32
// CHECK-NEXT:  %[[RIGHT:.*]] = arith.shli %[[KH]], %[[C2]] : i32
// CHECK-NEXT:  %[[M:.*]] = arith.addi %[[DOWN]], %[[RIGHT]] : i32
// CHECK-NEXT:  %[[OFF:.*]] = arith.addi %[[ROWS]], %[[M]] : i32
// CHECK:       %[[P:.*]] = llvm.getelementptr %{{.*}}[%[[OFF]]]
// CHECK-NEXT:  nvvm.ldmatrix %[[P]] {{{.*}}num = 4 : i32{{.*}}}
// CHECK-NOT:   nvvm.ldmatrix
// PTX-COUNT-1: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-NOT:     ldmatrix
gpu.module @mma_a_operand [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @tile : memref<576xi32, 3> {alignment = 16 : i64}
  gpu.func @mma_a_operand() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @tile : memref<576xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"((2,2),8,4):((288,4),36,1)">} : (memref<4xi32, 5>, memref<576xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// A 64x64 b16 tile with 128-byte rows (64 rows x 32 words), swizzled Sw<3,2,3> (CuTe's 128-byte swizzle in
// word units), four 16x16 blocks of one row band as repeats: the lane part is swizzled once per function
// (shift, and, xor); the blocks' column offsets (8, 16, 24 words) share no bit with any lane's offset, so
// lane + c = lane ^ c and, the swizzle being linear over xor, each repeat is one xor with the swizzled
// constant, as hand-written code does.
// CHECK-LABEL: gpu.func @swizzled_row_band
// CHECK:       %[[MASK:.*]] = arith.constant 28 : i32
// CHECK-NEXT:  %[[BITS:.*]] = arith.andi %{{.*}}, %[[MASK]] : i32
// CHECK-NEXT:  %[[SW:.*]] = arith.xori %{{.*}}, %[[BITS]] : i32
// CHECK:       llvm.getelementptr %{{.*}}[%[[SW]]]
// CHECK-NEXT:  nvvm.ldmatrix
// CHECK:       %[[C8:.*]] = arith.constant 8 : i32
// CHECK-NEXT:  %[[R1:.*]] = arith.xori %[[SW]], %[[C8]] : i32
// CHECK-NEXT:  llvm.getelementptr %{{.*}}[%[[R1]]]
// CHECK-NEXT:  nvvm.ldmatrix
// CHECK:       %[[C16:.*]] = arith.constant 16 : i32
// CHECK-NEXT:  arith.xori %[[SW]], %[[C16]] : i32
// CHECK:       %[[C24:.*]] = arith.constant 24 : i32
// CHECK-NEXT:  arith.xori %[[SW]], %[[C24]] : i32
// CHECK-NEXT:  llvm.getelementptr
// CHECK-NEXT:  nvvm.ldmatrix
// CHECK-NOT:   nvvm.ldmatrix
gpu.module @swizzled [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @tile : memref<2048xi32, 3> {alignment = 1024 : i64}
  gpu.func @swizzled_row_band() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @tile : memref<2048xi32, 3>
    %r = memref.alloca() : memref<16xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,4,8,4):(4,1,4@laneid,1@laneid)">,
        src_layout = #tile.layout<"Sw<3,2,3> o (4,(2,2),8,4):(8,(256,4),32,1)">} : (memref<16xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}
