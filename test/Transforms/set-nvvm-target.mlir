// tile-set-nvvm-target: every gpu.module gets the chip; other target options and non-NVVM targets stay.
// RUN: tile-opt %s '--tile-set-nvvm-target{chip=sm_80}' | filecheck %s
// RUN: tile-opt %s --tile-set-nvvm-target | filecheck %s --check-prefix=DEFAULT

// CHECK-LABEL: gpu.module @no_target [#nvvm.target<chip = "sm_80">]
// DEFAULT-LABEL: gpu.module @no_target [#nvvm.target<chip = "sm_90">]
gpu.module @no_target {
}

// CHECK-LABEL: gpu.module @other_chip [#nvvm.target<chip = "sm_80">]
// DEFAULT-LABEL: gpu.module @other_chip [#nvvm.target<chip = "sm_90">]
gpu.module @other_chip [#nvvm.target<chip = "sm_75">] {
}

// CHECK-LABEL: gpu.module @options_kept [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx80">]
gpu.module @options_kept [#nvvm.target<O = 3, chip = "sm_70", features = "+ptx80">] {
}

// CHECK-LABEL: gpu.module @no_chip_option [#nvvm.target<O = 1, chip = "sm_80">]
gpu.module @no_chip_option [#nvvm.target<O = 1>] {
}

// CHECK-LABEL: gpu.module @bare [#nvvm.target<chip = "sm_80">]
gpu.module @bare [#nvvm.target] {
}

// CHECK-LABEL: gpu.module @beside_rocdl [#rocdl.target<chip = "gfx90a">, #nvvm.target<chip = "sm_80">]
gpu.module @beside_rocdl [#rocdl.target<chip = "gfx90a">] {
}
