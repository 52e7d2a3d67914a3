// A gpu.module inside a nested builtin.module is not compiled (only top-level ones are): an error at it,
// with its file:line:col, not a module "without gpu.module" at no location.
// RUN: not tile-translate --mlir-to-ptx %s 2>&1 | filecheck %s
// CHECK: nested-gpu-module.mlir:9:5: error: gpu.module @m is inside a 'builtin.module', not at the top level of the module: only top-level gpu.modules are compiled; move it out
// CHECK-NOT: internal error
module {
  gpu.module @top [#nvvm.target<chip = "sm_90">] {}
  module {
    gpu.module @m [#nvvm.target<chip = "sm_90">] {
      gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
        gpu.return
      }
    }
  }
}
