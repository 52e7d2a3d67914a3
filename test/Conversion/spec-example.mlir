// The specification's example through the lowering and down to PTX; exactly two ldmatrix.x2 (one per
// repeat), the lane part of the address computed once at the function's entry, the second repeat a
// constant offset, results stored straight into register slots 0, 2, 8 and 10; in the PTX, the second
// address is an immediate offset, the other slots keep the sentinel -777, and nothing goes through local
// memory.
// RUN: tile-opt %s --tile-verify-matrix-transfer --tile-lower-matrix-transfer | filecheck %s
// RUN: tile-translate --mlir-to-ptx --chip=sm_90 %s | filecheck %s --check-prefix=PTX

module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90">] {
    memref.global "private" @sm : memref<256xi32, #gpu.address_space<workgroup>> {alignment = 16 : i64}
    gpu.func @matrix_kernel(%out: memref<32x12xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %sm = memref.get_global @sm : memref<256xi32, #gpu.address_space<workgroup>>
      %raw = memref.alloca() : memref<12xi32, #gpu.address_space<private>>
      %sentinel = arith.constant -777 : i32
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c12 = arith.constant 12 : index
      scf.for %i = %c0 to %c12 step %c1 {
        memref.store %sentinel, %raw[%i] : memref<12xi32, #gpu.address_space<private>>
      }
      "tile.matrix_transfer"(%raw, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
          dst_layout = #tile.layout<"(2,2,8,4):(8,2,4@laneid,1@laneid)">,
          src_layout = #tile.layout<"(2,2,8,4):(128,8,16,1)">}
        : (memref<12xi32, #gpu.address_space<private>>, memref<256xi32, #gpu.address_space<workgroup>>) -> ()
      %lane = gpu.lane_id
      scf.for %i = %c0 to %c12 step %c1 {
        %v = memref.load %raw[%i] : memref<12xi32, #gpu.address_space<private>>
        memref.store %v, %out[%lane, %i] : memref<32x12xi32>
      }
      gpu.return
    }
  }
}

// CHECK-LABEL: gpu.func @matrix_kernel
// At the function's entry, once: the lane part (lane & 7) * 16 + ((lane >> 3) & 1) * 8 words, and the
// register-slot indices.
// CHECK-NEXT:  %[[LANE:.*]] = gpu.lane_id
// CHECK-NEXT:  %[[L:.*]] = arith.index_cast %[[LANE]] : index to i32
// CHECK-NEXT:  %[[C7:.*]] = arith.constant 7 : i32
// CHECK-NEXT:  %[[ROW:.*]] = arith.andi %[[L]], %[[C7]] : i32
// CHECK-NEXT:  %[[C4:.*]] = arith.constant 4 : i32
// CHECK-NEXT:  %[[ROWW:.*]] = arith.shli %[[ROW]], %[[C4]] : i32
// CHECK-NEXT:  %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[SH:.*]] = arith.shrui %[[L]], %[[C3]] : i32
// CHECK-NEXT:  %[[C1:.*]] = arith.constant 1 : i32
// CHECK-NEXT:  %[[MAT:.*]] = arith.andi %[[SH]], %[[C1]] : i32
// CHECK-NEXT:  %[[C3B:.*]] = arith.constant 3 : i32
// CHECK-NEXT:  %[[MATW:.*]] = arith.shli %[[MAT]], %[[C3B]] : i32
// CHECK-NEXT:  %[[OFF:.*]] = arith.addi %[[ROWW]], %[[MATW]] : i32
// CHECK-NEXT:  %[[S0:.*]] = arith.constant 0 : index
// CHECK-NEXT:  %[[S2:.*]] = arith.constant 2 : index
// CHECK-NEXT:  %[[S8:.*]] = arith.constant 8 : index
// CHECK-NEXT:  %[[S10:.*]] = arith.constant 10 : index
// The register storage at the entry's start too (LLVM keeps only entry-block allocas in registers).
// CHECK-NEXT:  %[[RAW:.*]] = memref.alloca() : memref<12xi32, #gpu.address_space<private>>
// CHECK-NEXT:  %[[SM:.*]] = memref.get_global @sm
// CHECK-NOT:   gpu.lane_id
// CHECK:       scf.for
// At the transfer: the shared base, then one ldmatrix per repeat.
// CHECK:       %[[DESC:.*]] = builtin.unrealized_conversion_cast %[[SM]] : memref<256xi32, #gpu.address_space<workgroup>> to !llvm.struct<(ptr<3>, ptr<3>, i64, array<1 x i64>, array<1 x i64>)>
// CHECK-NEXT:  %[[BASE:.*]] = llvm.extractvalue %[[DESC]][1]
// CHECK-NEXT:  %[[P0:.*]] = llvm.getelementptr %[[BASE]][%[[OFF]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
// Repeat 0: slots 0 and 2.
// CHECK-NEXT:  %[[R0:.*]] = nvvm.ldmatrix %[[P0]] {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 2 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>
// CHECK-NEXT:  %[[W0:.*]] = llvm.extractvalue %[[R0]][0]
// CHECK-NEXT:  memref.store %[[W0]], %[[RAW:.*]][%[[S0]]] : memref<12xi32, #gpu.address_space<private>>
// CHECK-NEXT:  %[[W1:.*]] = llvm.extractvalue %[[R0]][1]
// CHECK-NEXT:  memref.store %[[W1]], %[[RAW]][%[[S2]]]
// Repeat 1: 128 words (512 bytes) further, slots 8 and 10.
// CHECK-NEXT:  %[[P1:.*]] = llvm.getelementptr %[[P0]][128] : (!llvm.ptr<3>) -> !llvm.ptr<3>, i32
// CHECK-NEXT:  %[[R1:.*]] = nvvm.ldmatrix %[[P1]] {{{.*}}num = 2 : i32{{.*}}} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>
// CHECK-NEXT:  %[[W2:.*]] = llvm.extractvalue %[[R1]][0]
// CHECK-NEXT:  memref.store %[[W2]], %[[RAW]][%[[S8]]]
// CHECK-NEXT:  %[[W3:.*]] = llvm.extractvalue %[[R1]][1]
// CHECK-NEXT:  memref.store %[[W3]], %[[RAW]][%[[S10]]]
// CHECK-NOT:   nvvm.ldmatrix
// CHECK-NOT:   tile.matrix_transfer

// PTX-LABEL: .visible .entry matrix_kernel(
// PTX-NOT:   .local
// PTX:       mov.u32 %r[[LANE:[0-9]+]], %laneid;
// PTX:       ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r[[A:[0-9]+]], %r[[B:[0-9]+]]}, [%rd[[ADDR:[0-9]+]]];
// PTX-NEXT:  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r[[C:[0-9]+]], %r[[D:[0-9]+]]}, [%rd[[ADDR]]+512];
// PTX-NOT:   ldmatrix
// PTX:       st.global.b32 [%rd[[OUT:[0-9]+]]], %r[[A]];
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+4], -777;
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+8], %r[[B]];
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+12], -777;
// PTX-COUNT-4: -777;
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+32], %r[[C]];
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+36], -777;
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+40], %r[[D]];
// PTX-NEXT:  st.global.b32 [%rd[[OUT]]+44], -777;
// PTX-NOT:   .local
// PTX-NOT:   ldmatrix
