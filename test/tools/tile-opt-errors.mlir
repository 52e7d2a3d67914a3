// tile-opt reports errors as MLIR diagnostics with file:line:col and exit status 1, names the pass that
// failed with a command that reproduces it, and never prints a Python traceback.
// RUN: not tile-opt %s --canonicalize --tile-verify-matrix-transfer 2>&1 | filecheck %s
// A reproducer is written only when asked for, and replays the failure:
// RUN: not tile-opt %s --canonicalize --tile-verify-matrix-transfer --mlir-pass-pipeline-crash-reproducer=%t.repro.mlir 2>&1 | filecheck %s --check-prefix=REPRO
// RUN: not tile-opt %t.repro.mlir --pass-pipeline='builtin.module(tile-verify-matrix-transfer)' 2>&1 | filecheck %s --check-prefix=REPLAY
// RUN: not tile-opt %s --no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not tile-opt %s '--tile-set-nvvm-target{chip=sm_80 speed=11}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not tile-opt %s '--tile-to-ptx{bogus=3}' 2>&1 | filecheck %s --check-prefix=PIPELINE-OPTION
// RUN: not tile-opt %S/Inputs/bad-return.mlir 2>&1 | filecheck %s --check-prefix=PARSE
// RUN: not tile-opt %t.missing.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not tile-opt %S/Inputs/not-utf8.mlir 2>&1 | filecheck %s --check-prefix=BYTES
// RUN: not tile-translate --mlir-to-ptx %S/Inputs/not-utf8.mlir 2>&1 | filecheck %s --check-prefix=BYTES

// CHECK: tile-opt-errors.mlir:{{[0-9]+}}:5: error:
// CHECK-SAME: 'tile.matrix_transfer' op [row-alignment] src_layout (4,8,4):(32,6,1): shared row (matrix=0, row=1, word=0) starts at byte 24 (element 6), not a multiple of 16
// CHECK-NEXT: tile-opt: pass 'tile-verify-matrix-transfer' failed; --mlir-pass-pipeline-crash-reproducer=FILE writes the IR it received to FILE, to reproduce with tile-opt FILE --pass-pipeline='builtin.module(tile-verify-matrix-transfer)'
// REPRO: tile-opt: pass 'tile-verify-matrix-transfer' failed; reproduce with: tile-opt {{.*}}.repro.mlir --pass-pipeline='builtin.module(tile-verify-matrix-transfer)'
// REPLAY: error: 'tile.matrix_transfer' op [row-alignment]
// CHECK-NOT: Traceback
gpu.module @m [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,6,1)">}
      : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// UNKNOWN: error: invalid pass pipeline: {{.*}}'no-such-pass' does not refer to a registered pass or pass pipeline
// UNKNOWN-NOT: Traceback
// PIPELINE-OPTION: <pass pipeline>: error: invalid pass pipeline: 'tile-to-ptx' has no option bogus; options: chip
// OPTION: <pass pipeline>: error: invalid pass pipeline: 'tile-set-nvvm-target' has no option speed; options: chip
// PARSE: bad-return.mlir:3:3: error: 'func.return' op has 1 operands, but enclosing function (@f) returns 0
// PARSE-NOT: Traceback
// MISSING: tile-opt: cannot read input: [Errno 2] No such file or directory
// BYTES: cannot read input: {{.*}}not-utf8.mlir is not UTF-8 text (byte 0xff at offset 8)
// BYTES-NOT: Traceback
