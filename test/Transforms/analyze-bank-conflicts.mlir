// tile-analyze-bank-conflicts: a remark at each transfer with its wavefronts per instruction and the minimum;
// the verifier's warn-bank-conflicts option warns at the conflicted ones.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-analyze-bank-conflicts
// RUN: tile-opt %S/../../examples/spec_example.mlir '--tile-verify-matrix-transfer=warn-bank-conflicts=1' 2>&1 >/dev/null | filecheck %s --check-prefix=WARN

// Where the contract allows a wider transfer, the remark says so (the same wavefronts in fewer instructions):
// RUN: tile-opt %s --split-input-file --tile-analyze-bank-conflicts 2>&1 >/dev/null | filecheck %s --check-prefix=HINT

// WARN: spec_example.mlir:6:5: warning: [banks] 2 x ldmatrix.x2: 8 wavefronts per instruction, minimum 2 (4-way conflict)

// HINT: remark: [banks] 1 x ldmatrix.x4: 4 wavefronts per instruction, minimum 4 (conflict-free){{$}}
// HINT: remark: [banks] 2 x ldmatrix.x2: 2 wavefronts per instruction, minimum 2 (conflict-free); tile-widen-matrix-transfer issues it as 1 x ldmatrix.x4{{$}}
// HINT: remark: [banks] 2 x stmatrix.x2: 2 wavefronts per instruction, minimum 2 (conflict-free){{$}}

gpu.module @pitches [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 1024 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-remark@+1 {{[banks] 1 x ldmatrix.x4: 4 wavefronts per instruction, minimum 4 (conflict-free)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
    // expected-remark@+1 {{[banks] 1 x ldmatrix.x4: 8 wavefronts per instruction, minimum 4 (2-way conflict)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(64,8,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
    // expected-remark@+1 {{[banks] 1 x ldmatrix.x4: 32 wavefronts per instruction, minimum 4 (8-way conflict)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(256,32,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
    // The same 128-byte rows, swizzled: conflict-free.
    // expected-remark@+1 {{[banks] 1 x ldmatrix.x4: 4 wavefronts per instruction, minimum 4 (conflict-free)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"Sw<3,2,3> o (4,8,4):(256,32,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// Where the buffer sits does not matter (a common shift only renames the bank quads): only 16-byte alignment
// is proven here, and rows 144 bytes apart fall in 8 different quads wherever it sits.
gpu.module @placement [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-remark@+1 {{[banks] 2 x ldmatrix.x2: 2 wavefronts per instruction, minimum 2 (conflict-free); tile-widen-matrix-transfer issues it as 1 x ldmatrix.x4}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(2,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,2,8,4):(4,288,36,1)">} : (memref<4xi32, 5>, memref<2048xi32, 3>) -> ()
    gpu.return
  }
}

// -----

// stmatrix repeats over the same rows overwrite in program order; one instruction would race: no hint.
gpu.module @no_wider_store [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<2048xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<2048xi32, 3>
    %r = memref.alloca() : memref<4xi32, 5>
    // expected-remark@+1 {{[banks] 2 x stmatrix.x2: 2 wavefronts per instruction, minimum 2 (conflict-free)}}
    "tile.matrix_transfer"(%sm, %r) {opcode = "stmatrix.sync.aligned.m8n8.x2.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,2,8,4):(0,32,4,1)">, src_layout = #tile.layout<"(2,2,8,4):(2,1,4@laneid,1@laneid)">} : (memref<2048xi32, 3>, memref<4xi32, 5>) -> ()
    gpu.return
  }
}
