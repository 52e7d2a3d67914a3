// Pipelines mix tile passes, named pipelines and upstream passes; --split-input-file keeps chunks apart;
// --mlir-print-ir-after-all dumps after every step.
// RUN: tile-opt %s --split-input-file --pass-pipeline='builtin.module(tile-verify-matrix-transfer, canonicalize, tile-lower-matrix-transfer, cse)' | filecheck %s
// RUN: tile-opt %s --split-input-file --tile-to-nvvm | filecheck %s --check-prefix=NVVM
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --mlir-print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=DUMP
// RUN: tile-opt --list-passes | filecheck %s --check-prefix=LIST
// The spellings of mlir-opt: single-dash flags, --pass=options, -o, before-all printing, timing, bytecode.
// RUN: tile-opt %s -split-input-file -tile-set-nvvm-target=chip=sm_90 -o %t.single-dash.mlir && filecheck %s --check-prefix=SINGLE-DASH < %t.single-dash.mlir
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --mlir-print-ir-before-all 2>&1 >/dev/null | filecheck %s --check-prefix=BEFORE
// RUN: tile-opt %s --split-input-file --tile-verify-matrix-transfer --mlir-timing --dump-pass-pipeline 2>&1 >/dev/null | filecheck %s --check-prefix=TIMING
// RUN: tile-opt %S/Inputs/one-transfer.mlir --emit-bytecode -o %t.mlirbc && tile-opt %t.mlirbc --tile-lower-matrix-transfer | filecheck %s --check-prefix=BYTECODE
// RUN: not tile-opt %s --split-input-file --emit-bytecode 2>&1 | filecheck %s --check-prefix=BYTECODE-SPLIT
// RUN: tile-opt --version | filecheck %s --check-prefix=VERSION
// Nested pipelines with tile passes inside, and upstream passes nested implicitly under the op they run on.
// RUN: tile-opt %s --split-input-file --pass-pipeline='builtin.module(gpu.module(canonicalize, tile-verify-matrix-transfer, tile-lower-matrix-transfer, cse))' | filecheck %s
// RUN: tile-opt %s --split-input-file --pass-pipeline='builtin.module(gpu.module(gpu.func(tile-lower-matrix-transfer)))' | filecheck %s
// RUN: tile-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(tile-lower-matrix-transfer))' | filecheck %s --check-prefix=NOT-ANCHORED
// RUN: tile-opt %s --split-input-file --tile-lower-matrix-transfer --convert-gpu-to-nvvm | filecheck %s --check-prefix=IMPLICIT
// RUN: not tile-opt %s --pass-pipeline='builtin.module(gpu.module(tile-to-nvvm))' 2>&1 | filecheck %s --check-prefix=NESTED-PIPELINE
// RUN: tile-opt --help | filecheck %s --check-prefix=HELP
// RUN: mlir-opt --irdl-file=%irdl %s --split-input-file | filecheck %s --check-prefix=MLIR-OPT

// CHECK-LABEL: gpu.module @first
// CHECK: nvvm.ldmatrix %{{.*}} {{{.*}}num = 4 : i32{{.*}}}
// CHECK: // -----
// CHECK-LABEL: gpu.module @second
// CHECK: nvvm.stmatrix
// NVVM-LABEL: gpu.module @first
// NVVM: llvm.func @k() attributes {gpu.kernel, {{.*}}nvvm.kernel, nvvm.maxntid = array<i32: 32, 1, 1>}
// NVVM: nvvm.read.ptx.sreg.laneid
// NVVM: nvvm.ldmatrix
// NVVM-NOT: tile.matrix_transfer
// NVVM-NOT: unrealized_conversion_cast
// DUMP: // -----// IR Dump After tile-verify-matrix-transfer (tile-verify-matrix-transfer) //----- //
// DUMP: // -----// IR Dump After tile-verify-matrix-transfer (tile-verify-matrix-transfer) //----- //
// SINGLE-DASH-LABEL: gpu.module @first [#nvvm.target<chip = "sm_90">]
// SINGLE-DASH-LABEL: gpu.module @second [#nvvm.target<chip = "sm_90">]
// BEFORE: // -----// IR Dump Before tile-verify-matrix-transfer (tile-verify-matrix-transfer) //----- //
// TIMING: builtin.module(tile-verify-matrix-transfer)
// TIMING: Execution time report
// TIMING: tile-verify-matrix-transfer
// BYTECODE: nvvm.ldmatrix
// BYTECODE-SPLIT: error: --emit-bytecode writes one module: it cannot be used with --split-input-file
// VERSION: tile-opt (mlir-tile
// NOT-ANCHORED-COUNT-2: "tile.matrix_transfer"
// IMPLICIT-LABEL: gpu.module @first
// IMPLICIT: llvm.func @k()
// IMPLICIT: nvvm.ldmatrix
// NESTED-PIPELINE: error: invalid pass pipeline: 'tile-to-nvvm' is a pipeline over the builtin.module; it cannot be nested in gpu.module
// HELP: usage: tile-opt
// HELP: Tile passes and pipelines:
// HELP: --tile-verify-matrix-transfer
// HELP: Upstream passes and pipelines
// HELP-DAG: --canonicalize
// HELP-DAG: --convert-gpu-to-nvvm
// MLIR-OPT-LABEL: gpu.module @first
// MLIR-OPT: "tile.matrix_transfer"
// LIST-DAG: --tile-verify-matrix-transfer
// LIST-DAG: --tile-lower-matrix-transfer
// LIST-DAG: --tile-set-nvvm-target
// LIST-DAG: --tile-to-nvvm
// LIST-DAG: --tile-to-ptx
gpu.module @first [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">}
      : (memref<4xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @second [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(32,4,1)">, src_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">}
      : (memref<512xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}
