// A kernel argument marked `tile.tensor_maps` (as the builder marks its TensorMap parameters) is passed by
// value: tile-to-nvvm makes it `llvm.byval` 128 bytes on 64 with `nvvm.grid_constant` (the mark itself gone), the
// PTX declares it `.param .align 64 .b8 [128]` and the TMA instruction reads it where it is (`cvta.param`);
// the pointer argument beside it is untouched. An unmarked kernel keeps its pointer parameters.
// RUN: tile-opt %s --tile-to-nvvm | filecheck %s --check-prefix=NVVM
// RUN: tile-translate --mlir-to-ptx %s | filecheck %s
// RUN: %if ptxas %{ tile-translate --mlir-to-ptx %s -o %t.ptx && ptxas -arch=sm_90a %t.ptx -o %t.cubin %}

// NVVM: llvm.func @k(%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, %{{.*}}: !llvm.ptr {llvm.align = 16 : i64})
// NVVM-NOT: tile.tensor_maps
// CHECK: .param .align 64 .b8 k_param_0[128],
// CHECK-NEXT: .param .u64 .ptr .align 16 k_param_1
// CHECK: mov.b64 [[PARAM:%rd[0-9]+]], k_param_0;
// CHECK: cvta.param.u64 [[MAP:%rd[0-9]+]], [[PARAM]];
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [[[MAP]], {{{.*}}}]
gpu.module @m [#nvvm.target<chip = "sm_90a">] {
  gpu.func @k(%map: !llvm.ptr, %out: memref<32xi32> {llvm.align = 16 : i64}) kernel attributes {known_block_size = array<i32: 32, 1, 1>, tile.tensor_maps = array<i64: 0>} {
    %c0 = arith.constant 0 : i32
    %raw = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %base = memref.extract_aligned_pointer_as_index %raw : memref<?xi8, #gpu.address_space<workgroup>> -> index
    %address = arith.index_cast %base : index to i64
    %tile = llvm.inttoptr %address : i64 to !llvm.ptr<3>
    nvvm.cp.async.bulk.tensor.global.shared.cta %map, %tile, box[%c0, %c0] : !llvm.ptr, !llvm.ptr<3>
    gpu.return
  }
}
