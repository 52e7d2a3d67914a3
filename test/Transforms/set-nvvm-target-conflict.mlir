// A chip option that contradicts the IR's target is an error at the gpu.module, never a silent retarget.
// RUN: tile-opt %s --split-input-file --verify-diagnostics '--tile-set-nvvm-target{chip=sm_86}'
// RUN: not tile-opt %s --split-input-file '--tile-to-nvvm{chip=sm_86}' 2>&1 | filecheck %s

// CHECK: set-nvvm-target-conflict.mlir:9:1: error: [target] this gpu.module's #nvvm.target names chip sm_80, but the pipeline asks for chip=sm_86
// CHECK: set-nvvm-target-conflict.mlir:16:1: error: [target] this gpu.module's #nvvm.target names chip sm_90

// expected-error-re@+1 {{[target] {{.*}}names chip sm_80, but the pipeline asks for chip=sm_86}}
gpu.module @other_chip [#nvvm.target<chip = "sm_80">] {
}

// -----

// Options beside the chip do not change the verdict.
// expected-error-re@+1 {{[target] {{.*}}names chip sm_90, but the pipeline asks for chip=sm_86}}
gpu.module @other_chip_with_options [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">] {
}
