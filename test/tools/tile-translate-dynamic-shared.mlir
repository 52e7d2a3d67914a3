// Typed tiles and dynamic shared memory: one i8 buffer seen as f16 elements and as i32 words through
// memref.view (the alignment proof follows the view: its byte shift is a multiple of 16), and
// gpu.dynamic_shared_memory (16-byte aligned, as CUDA guarantees) seen as words. The PTX declares the dynamic
// array `.extern .shared` (upstream's pipeline made it a zero-sized internal global, and LLVM deleted every
// access through it: the plain load below compiled to an empty kernel).
// RUN: tile-translate --mlir-to-ptx %S/Inputs/views-and-dynamic-shared.mlir | filecheck %s
// RUN: tile-translate --mlir-to-ptx %s | filecheck %s --check-prefix=PLAIN
// RUN: %if ptxas %{ tile-translate --mlir-to-ptx %S/Inputs/views-and-dynamic-shared.mlir -o %t.ptx && ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

// CHECK: .extern .shared .align 16 .b8 __dynamic_shmem__0[];
// CHECK: .shared .align 16 .b8 bytes[4096];
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{.*}}+512];
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16

// PLAIN: .extern .shared .align 16 .b8 __dynamic_shmem__0[];
// PLAIN: ld.shared.b32
// PLAIN: st.global.b32
gpu.module @m [#nvvm.target<chip = "sm_90">] {
  gpu.func @k(%out: memref<32xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %c0 = arith.constant 0 : index
    %raw = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %sm = memref.view %raw[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<512xi32, #gpu.address_space<workgroup>>
    %lane = gpu.lane_id
    %v = memref.load %sm[%lane] : memref<512xi32, #gpu.address_space<workgroup>>
    memref.store %v, %out[%lane] : memref<32xi32>
    gpu.return
  }
}
