gpu.module @first [#nvvm.target<chip = "sm_90">] {
  gpu.func @a() kernel { gpu.return }
}
gpu.module @second [#nvvm.target<chip = "sm_80">] {
  gpu.func @b() kernel { gpu.return }
}
