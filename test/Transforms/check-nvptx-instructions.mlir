// tile-check-nvptx: an NVVM instruction that one of the gpu.module's chips cannot run (LLVM would stop the
// process: "Cannot select: intrinsic") is a diagnostic at the op, naming what it needs and what it got. Every
// target of the module is checked. The chips and PTX versions below are where LLVM 22 selects each form.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-check-nvptx
// RUN: not tile-translate --mlir-to-ptx %s 2>&1 | filecheck %s

// CHECK: check-nvptx-instructions.mlir:{{[0-9]+}}:{{[0-9]+}}: error: [target] nvvm.stmatrix: stmatrix.m8n8 needs sm_90 or newer, but the gpu.module targets sm_80
// CHECK-NOT: LLVM ERROR

gpu.module @stmatrix_second_target [#nvvm.target<chip = "sm_90">, #nvvm.target<chip = "sm_80">] {
  gpu.func @k(%p: !llvm.ptr<3>, %v: i32) kernel {
    // expected-error-re@+1 {{[target] nvvm.stmatrix: stmatrix.m8n8 needs sm_90 or newer, but the gpu.module targets sm_80}}
    nvvm.stmatrix %p, %v {layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>, eltType = #nvvm.ld_st_matrix_elt_type<b16>} : !llvm.ptr<3>, i32
    gpu.return
  }
}

// -----

gpu.module @ldmatrix_ptx [#nvvm.target<chip = "sm_75">] {
  gpu.func @k(%p: !llvm.ptr<3>) kernel {
    // expected-error-re@+1 {{[target] nvvm.ldmatrix: ldmatrix.m8n8 needs PTX 6.5, but the gpu.module's #nvvm.target names no PTX version, so LLVM uses sm_75's lowest, 6.3; add features = "+ptx65"}}
    %r = nvvm.ldmatrix %p {num = 1 : i32, layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>, eltType = #nvvm.ld_st_matrix_elt_type<b16>} : (!llvm.ptr<3>) -> i32
    gpu.return
  }
}

// -----

gpu.module @ldmatrix_ptx_given [#nvvm.target<chip = "sm_75", features = "+ptx65">] {
  gpu.func @k(%p: !llvm.ptr<3>) kernel {
    %r = nvvm.ldmatrix %p {num = 1 : i32, layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>, eltType = #nvvm.ld_st_matrix_elt_type<b16>} : (!llvm.ptr<3>) -> i32
    gpu.return
  }
}

// -----

gpu.module @eight_bit_forms [#nvvm.target<chip = "sm_100a">, #nvvm.target<chip = "sm_120">] {
  gpu.func @k(%p: !llvm.ptr<3>, %v: i32) kernel {
    // expected-error-re@+1 {{[target] nvvm.ldmatrix: ldmatrix.m16n16 needs an architecture-specific chip, sm_100a/f or newer ({{.*}}sm_100a{{.*}}), but the gpu.module targets sm_120}}
    %r = nvvm.ldmatrix %p {num = 1 : i32, layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 16, n = 16>, eltType = #nvvm.ld_st_matrix_elt_type<b8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>
    // expected-error-re@+1 {{[target] nvvm.stmatrix: stmatrix.m16n8 needs an architecture-specific chip{{.*}}targets sm_120}}
    nvvm.stmatrix %p, %v {layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 16, n = 8>, eltType = #nvvm.ld_st_matrix_elt_type<b8>} : !llvm.ptr<3>, i32
    gpu.return
  }
}

// -----

gpu.module @async_copies [#nvvm.target<chip = "sm_75", features = "+ptx78">] {
  gpu.func @k(%p: !llvm.ptr<3>, %g: !llvm.ptr<1>) kernel {
    // expected-error-re@+1 {{[target] nvvm.cp.async.shared.global: cp.async.shared.global needs sm_80 or newer, but the gpu.module targets sm_75}}
    nvvm.cp.async.shared.global %p, %g, 16, cache = cg : !llvm.ptr<3>, !llvm.ptr<1>
    // expected-error-re@+1 {{[target] nvvm.cp.async.commit.group: {{.*}}needs sm_80}}
    nvvm.cp.async.commit.group
    // expected-error-re@+1 {{[target] nvvm.cp.async.wait.group: {{.*}}needs sm_80}}
    nvvm.cp.async.wait.group 0
    gpu.return
  }
}

// -----

gpu.module @mma_forms [#nvvm.target<chip = "sm_75", features = "+ptx65">] {
  gpu.func @k(%g: !llvm.ptr<1>, %c: i32, %f: f32, %h: vector<2xf16>) kernel {
    // m16n8k8 f16 is an sm_75 form
    %a = nvvm.mma.sync A[%h, %h] B[%h] C[%f, %f, %f, %f] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 8>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
    // expected-error-re@+1 {{[target] nvvm.mma.sync: mma.sync.m16n8k16.f16 needs sm_80 or newer, but the gpu.module targets sm_75}}
    %b = nvvm.mma.sync A[%h, %h, %h, %h] B[%h, %h] C[%f, %f, %f, %f] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
    // expected-error-re@+1 {{[target] nvvm.mma.sync: mma.sync.m16n8k32.s8 needs sm_80 or newer}}
    %s = nvvm.mma.sync A[%c, %c, %c, %c] B[%c, %c] C[%c, %c, %c, %c] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 32>, multiplicandAPtxType = #nvvm.mma_type<s8>, multiplicandBPtxType = #nvvm.mma_type<s8>, intOverflowBehavior = #nvvm.mma_int_overflow<wrapped>} : (i32, i32, i32) -> !llvm.struct<(i32, i32, i32, i32)>
    gpu.return
  }
}

// -----

// expected-error-re@+1 {{[target] this gpu.module targets #rocdl.target<chip = "gfx90a">: mlir-tile compiles for NVIDIA GPUs (#nvvm.target) only}}
gpu.module @amd [#rocdl.target<chip = "gfx90a">] {
}

// -----

// An arrival on a cluster peer's mbarrier (scope cluster, shared::cluster) needs PTX 8.0.
gpu.module @remote_arrive_ptx [#nvvm.target<chip = "sm_90">] {
  gpu.func @k(%p: !llvm.ptr<7>) kernel {
    // expected-error-re@+1 {{[target] nvvm.mbarrier.arrive: mbarrier.arrive.shared::cluster needs PTX 8.0, but the gpu.module's #nvvm.target names no PTX version, so LLVM uses sm_90's lowest, 7.8; add features = "+ptx80"}}
    nvvm.mbarrier.arrive %p {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
    gpu.return
  }
}

// -----

gpu.module @setmaxnreg_on_sm_90 [#nvvm.target<chip = "sm_90", features = "+ptx80">] {
  gpu.func @k() kernel {
    // expected-error-re@+1 {{[target] nvvm.setmaxregister: setmaxnreg needs an architecture-specific chip, sm_90a/f or newer}}
    nvvm.setmaxregister increase 232
    gpu.return
  }
}

// -----

gpu.module @cluster_barrier_on_sm_80 [#nvvm.target<chip = "sm_80">] {
  gpu.func @k() kernel {
    // expected-error-re@+1 {{[target] nvvm.cluster.arrive: cluster.arrive needs sm_90 or newer, but the gpu.module targets sm_80}}
    nvvm.cluster.arrive
    gpu.return
  }
}
