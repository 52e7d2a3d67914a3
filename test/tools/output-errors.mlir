// The tools report their own I/O failures as plain errors naming the output and why (never "internal
// error"), with exit status 1: an output that is a folder, a full device, an empty name, a path in no
// folder, a closed standard output, a crash reproducer that cannot be written.
// RUN: not tile-opt %s -o %S 2>&1 | filecheck %s --check-prefix=FOLDER
// RUN: not tile-opt %s -o /dev/full 2>&1 | filecheck %s --check-prefix=FULL
// RUN: not tile-opt %s -o "" 2>&1 | filecheck %s --check-prefix=EMPTY
// RUN: not tile-opt %s -o %t.missing/out.mlir 2>&1 | filecheck %s --check-prefix=NOFOLDER
// RUN: not bash -c 'tile-opt %s 2>&1 >&-' | filecheck %s --check-prefix=CLOSED
// RUN: not bash -c 'tile-translate --mlir-to-ptx %s 2>&1 >&-' | filecheck %s --check-prefix=CLOSED-TRANSLATE
// RUN: not tile-translate --mlir-to-ptx %s -o /dev/full 2>&1 | filecheck %s --check-prefix=FULL-TRANSLATE
// RUN: not tile-translate --mlir-to-ptx %s --output-dir /dev/full/ptx 2>&1 | filecheck %s --check-prefix=DIR-TRANSLATE
// RUN: not tile-opt %S/Inputs/misaligned-row.mlir --canonicalize --tile-verify-matrix-transfer --mlir-pass-pipeline-crash-reproducer=%t.missing/r.mlir 2>&1 | filecheck %s --check-prefix=REPRODUCER

// FOLDER: tile-opt: error: cannot write '{{.*}}': Is a directory
// FULL: tile-opt: error: cannot write '/dev/full': No space left on device
// EMPTY: tile-opt: error: cannot write '': No such file or directory
// NOFOLDER: tile-opt: error: cannot write '{{.*}}.missing/out.mlir': No such file or directory
// CLOSED: tile-opt: error: cannot write standard output: it is closed
// CLOSED-TRANSLATE: tile-translate: error: cannot write standard output: it is closed
// FULL-TRANSLATE: tile-translate: error: cannot write '/dev/full': No space left on device
// DIR-TRANSLATE: tile-translate: error: cannot make the folder '/dev/full/ptx': Not a directory
// REPRODUCER: error: 'tile.matrix_transfer' op [row-alignment]
// REPRODUCER: tile-opt: pass 'tile-verify-matrix-transfer' failed; error: cannot write the reproducer '{{.*}}.missing/r.mlir': No such file or directory
// CHECK-NOT: internal error
gpu.module @m [#nvvm.target<chip = "sm_90">] {
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    gpu.return
  }
}
