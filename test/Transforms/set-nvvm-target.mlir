// tile-set-nvvm-target: the IR's target decides; the chip option fills in where the IR names none.
// RUN: tile-opt %s '--tile-set-nvvm-target{chip=sm_80}' | filecheck %s
// RUN: tile-opt %s --tile-set-nvvm-target | filecheck %s --check-prefix=DEFAULT

// CHECK-LABEL: gpu.module @no_target [#nvvm.target<chip = "sm_80">]
// DEFAULT-LABEL: gpu.module @no_target [#nvvm.target<chip = "sm_90">]
gpu.module @no_target {
}

// The same chip as asked: kept. Without the option, any chip the IR names is kept.
// CHECK-LABEL: gpu.module @same_chip [#nvvm.target<chip = "sm_80">]
// DEFAULT-LABEL: gpu.module @same_chip [#nvvm.target<chip = "sm_80">]
gpu.module @same_chip [#nvvm.target<chip = "sm_80">] {
}

// CHECK-LABEL: gpu.module @options_kept [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx80">]
// DEFAULT-LABEL: gpu.module @options_kept [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">]
gpu.module @options_kept [#nvvm.target<O = 3, features = "+ptx80">] {
}

// CHECK-LABEL: gpu.module @bare [#nvvm.target<chip = "sm_80">]
gpu.module @bare [#nvvm.target] {
}

// CHECK-LABEL: gpu.module @beside_rocdl [#rocdl.target<chip = "gfx90a">, #nvvm.target<chip = "sm_80">]
gpu.module @beside_rocdl [#rocdl.target<chip = "gfx90a">] {
}
