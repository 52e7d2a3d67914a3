// A subview of a subview placed at a run-time offset (what the builder's `subview` of a `planned` view makes):
// expand-strided-metadata composes the two offsets with an affine.apply, which the pipeline lowers again
// (it once reached the translation to LLVM unconverted, after the builder had accepted the kernel). The
// element written is the warp's 64-element row, plus 4, plus 33: 74 bytes past the row's start.
// RUN: tile-translate --mlir-to-ptx %s | filecheck %s
// CHECK: .visible .entry k(
// CHECK: %tid.x;
// CHECK: st.shared.b16 [{{%rd[0-9]+}}+74], {{%rs[0-9]+}};
// CHECK: bar.sync 0;
// CHECK: ld.shared.b16
gpu.module @kernels [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @tile : memref<4096xf16, #gpu.address_space<workgroup>> {alignment = 128 : i64}
  gpu.func @k(%in: memref<1xf16>, %out: memref<128xf16>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    %tile = memref.get_global @tile : memref<4096xf16, #gpu.address_space<workgroup>>
    %tid = gpu.thread_id x
    %c32 = arith.constant 32 : index
    %warp = arith.divui %tid, %c32 : index
    %c64 = arith.constant 64 : index
    %row = arith.muli %warp, %c64 : index
    %placed = memref.subview %tile[%row] [257] [1] : memref<4096xf16, #gpu.address_space<workgroup>> to memref<257xf16, strided<[1], offset: ?>, #gpu.address_space<workgroup>>
    %inner = memref.subview %placed[4] [64] [1] : memref<257xf16, strided<[1], offset: ?>, #gpu.address_space<workgroup>> to memref<64xf16, strided<[1], offset: ?>, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    %value = memref.load %in[%c0] : memref<1xf16>
    %c33 = arith.constant 33 : index
    memref.store %value, %inner[%c33] : memref<64xf16, strided<[1], offset: ?>, #gpu.address_space<workgroup>>
    gpu.barrier
    %seen = memref.load %tile[%tid] : memref<4096xf16, #gpu.address_space<workgroup>>
    memref.store %seen, %out[%tid] : memref<128xf16>
    gpu.return
  }
}
