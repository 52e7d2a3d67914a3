// tile-check-nvptx: what the NVPTX backend would stop the process on, or ptxas reject, is a diagnostic at the
// op, in every gpu.module, with or without tile ops.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-check-nvptx
// RUN: not tile-translate --mlir-to-ptx %s 2>&1 | filecheck %s

// CHECK: check-nvptx.mlir:{{[0-9]+}}:{{[0-9]+}}: error: [target] this gpu.module's #nvvm.target: features +ptx60
// CHECK-NOT: LLVM ERROR

// expected-error-re@+1 {{[target] {{.*}}features +ptx60 asks for PTX 6.0, but sm_90 needs PTX 7.8 or later}}
gpu.module @ptx_too_old [#nvvm.target<chip = "sm_90", features = "+ptx60">] {
  gpu.func @k() kernel { gpu.return }
}

// -----

// expected-error-re@+1 {{[target] {{.*}}features +ptx999 asks for PTX 99.9, but the newest PTX version LLVM knows is 9.0}}
gpu.module @ptx_unknown [#nvvm.target<chip = "sm_90", features = "+ptx999">] {
}

// -----

// expected-error-re@+1 {{[target] {{.*}}chip 'sm_99' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know}}
gpu.module @unknown_chip [#nvvm.target<chip = "sm_99">] {
}

// -----

gpu.module @names [#nvvm.target<chip = "sm_90">] {
  // expected-error-re@+1 {{[target] 'a b' is not a PTX identifier}}
  gpu.func @"a b"() kernel { gpu.return }
  // expected-error-re@+1 {{[target] 'üml' is not a PTX identifier}}
  memref.global "private" @"üml" : memref<4xi32, 3>
  // expected-error-re@+1 {{[target] '1st' is not a PTX identifier}}
  func.func private @"1st"()
  gpu.func @"$fine_name"() kernel { gpu.return }
}

// -----

gpu.module @blocks [#nvvm.target<chip = "sm_90">] {
  // expected-error-re@+1 {{[participation] known_block_size (-32, 1, 1) is not three positive extents}}
  gpu.func @negative() kernel attributes {known_block_size = array<i32: -32, 1, 1>} { gpu.return }
  // expected-error-re@+1 {{[participation] known_block_size (64, 32, 1) has 2048 threads}}
  gpu.func @too_many() kernel attributes {known_block_size = array<i32: 64, 32, 1>} { gpu.return }
  gpu.func @fine() kernel attributes {known_block_size = array<i32: 1024, 1, 1>} { gpu.return }
}

// -----

gpu.module @static_shared [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @a : memref<8192xi32, 3>
  memref.global "private" @b : memref<8192xi32, 3>
  // expected-error-re@+1 {{[bounds] the kernel declares 65536 bytes of static shared memory}}
  gpu.func @k() kernel {
    %a = memref.get_global @a : memref<8192xi32, 3>
    %b = memref.get_global @b : memref<8192xi32, 3>
    gpu.return
  }
}

// -----

// A second gpu.module without tile ops is checked too.
gpu.module @first [#nvvm.target<chip = "sm_90">] {
}
// expected-error-re@+1 {{[target] {{.*}}features +ptx60}}
gpu.module @second [#nvvm.target<chip = "sm_90", features = "+ptx60">] {
}

// -----

gpu.module @alignment [#nvvm.target<chip = "sm_90">] {
  // expected-error-re@+1 {{[operands] alignment 4294967296, above the 262144 bytes any buffer can need (more slows ptxas)}}
  memref.global "private" @a : memref<4xi32, 3> {alignment = 4294967296 : i64}
  memref.global "private" @b : memref<4xi32, 3> {alignment = 262144 : i64}
  // expected-error-re@+1 {{[operands] alignment 524288, above the 262144 bytes}}
  memref.global "private" @d : memref<4xi32, 3> {alignment = 524288 : i64}
  // expected-error-re@+1 {{[operands] alignment 4294967296, above the 262144 bytes any buffer can need}}
  llvm.mlir.global internal @c() {addr_space = 3 : i32, alignment = 4294967296 : i64} : !llvm.array<4 x i32>
}

// -----

// A feature without + or - made LLVM assert; only one +ptxNN goes to LLVM.
// expected-error-re@+1 {{[target] {{.*}}features "cta" is not one +ptxNN}}
gpu.module @odd_feature [#nvvm.target<chip = "sm_90", features = "cta">] {
}

// -----

// expected-error-re@+1 {{[target] {{.*}}chip 'sm_70' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know}}
gpu.module @older_than_ptxas_knows [#nvvm.target<chip = "sm_70">] {
}

// -----

// gpu ops that convert-gpu-to-nvvm leaves illegal are a diagnostic here, with what to write instead, not a
// legalization failure in the lowering.
gpu.module @no_nvvm_lowering [#nvvm.target<chip = "sm_90">] {
  gpu.func @k(%out: memref<32xindex>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    // expected-error@+1 {{[target] gpu.subgroup_id has no lowering to NVVM (upstream's convert-gpu-to-nvvm leaves it illegal); a warp's index is gpu.thread_id x divided by 32}}
    %s = gpu.subgroup_id : index
    // expected-error@+1 {{[target] gpu.subgroup_size has no lowering to NVVM}}
    %z = gpu.subgroup_size : index
    %c0 = arith.constant 0 : index
    memref.store %s, %out[%c0] : memref<32xindex>
    memref.store %z, %out[%c0] : memref<32xindex>
    gpu.return
  }
}
