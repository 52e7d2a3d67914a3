#rows = #tile.layout<"(4,8,4):(32,4,1)"> gpu.module @first [#nvvm.target<chip = "sm_90">] { memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64} gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} { %sm = memref.get_global @sm : memref<512xi32, 3> %r = memref.alloca() : memref<4xi32, 5> "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #rows} : (memref<4xi32, 5>, memref<512xi32, 3>) -> () gpu.return } } gpu.module @second {}
// Several top-level ops (and an attribute alias before them) get an implicit builtin.module, as in mlir-opt:
// the parser's locations name this file, and columns on line 1 are the file's own (they were 8 more when
// the driver wrapped the text in "module {", which also failed on an alias before the first op).
// RUN: tile-opt %s --tile-analyze-bank-conflicts 2>&1 >/dev/null | filecheck %s --check-prefix=REMARK
// RUN: tile-opt %s --mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// The output is byte for byte mlir-opt's.
// RUN: tile-opt %s --mlir-print-debuginfo > %t.tile-opt.mlir
// RUN: mlir-opt --irdl-file=%irdl %s --mlir-print-debuginfo > %t.mlir-opt.mlir
// RUN: diff %t.tile-opt.mlir %t.mlir-opt.mlir

// REMARK: several-top-level-ops.mlir:1:330: remark: [banks] 1 x ldmatrix.x4: 4 wavefronts per instruction, minimum 4 (conflict-free)

// LOC: module {
// LOC:   gpu.module @first
// LOC:       "tile.matrix_transfer"{{.*}} loc([[TRANSFER:#loc[0-9]+]])
// LOC-NEXT:   gpu.return
// LOC-NEXT:   } loc(
// LOC-NEXT: } loc([[FIRST:#loc[0-9]+]])
// LOC:   gpu.module @second {
// LOC-NEXT:   } loc([[SECOND:#loc[0-9]+]])
// LOC-NEXT: } loc([[MODULE:#loc[0-9]*]])
// LOC-DAG: [[MODULE]] = loc("{{.*}}several-top-level-ops.mlir":0:0)
// LOC-DAG: [[FIRST]] = loc("{{.*}}several-top-level-ops.mlir":1:42)
// LOC-DAG: [[TRANSFER]] = loc("{{.*}}several-top-level-ops.mlir":1:330)
// LOC-DAG: [[SECOND]] = loc("{{.*}}several-top-level-ops.mlir":1:574)
