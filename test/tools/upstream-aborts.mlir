// Inputs on which upstream MLIR's parser aborts the process (its attribute verifiers assert instead of
// reporting) are errors at the attribute, found before the parser sees the text; and input nested deeper
// than the parser's stack allows is refused.
// RUN: not tile-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: %python -c "print('gpu.module @m {\n' + 'scf.execute_region {\n' * 1200 + '}\n' * 1200 + '}')" > %t.deep.mlir
// RUN: not tile-opt %t.deep.mlir 2>&1 | filecheck %s --check-prefix=DEEP

// CHECK: upstream-aborts.mlir:9:46: error: #nvvm.target: chip "ab" is not a chip; use one of sm_75,
gpu.module @two_character_chip [#nvvm.target<chip = "ab">] {
}
// -----
// CHECK: upstream-aborts.mlir:13:45: error: #rocdl.target: the chip cannot be empty
gpu.module @empty_rocdl_chip [#rocdl.target<chip = "">] {
}
// -----
// CHECK: upstream-aborts.mlir:17:40: error: #rocdl.target: the optimization level O is 0, 1, 2 or 3
gpu.module @rocdl_level [#rocdl.target<O = 9>] {
}
// -----
// CHECK: upstream-aborts.mlir:21:38: error: #rocdl.target: the abi is "400", "500" or "600"
gpu.module @rocdl_abi [#rocdl.target<abi = "5">] {
}
// -----
// CHECK: upstream-aborts.mlir:25:39: error: #xevm.target: the triple cannot be empty
gpu.module @xevm_triple [#xevm.target<triple = "">] {
}
// -----
// A comment inside the attribute's name does not hide it.
// CHECK: upstream-aborts.mlir:31:8: error: #rocdl.target: the abi is "400", "500" or "600"
gpu.module @split_name [#rocdl. // a comment
target<abi = "5">] {
}
// -----
// CHECK: upstream-aborts.mlir:35:40: error: #rocdl.target: the abi is "400", "500" or "600"
gpu.module @split_value [#rocdl.target<abi = // a comment
"5">] {
}
// CHECK-NOT: Assertion
// DEEP: deep.mlir: error: brackets nest more than 1000 deep (at line 1001), deeper than mlir-tile parses safely
// -----
// An mma.sync shape extent out of range: the op's verifier sizes a vector by it (a negative one aborts, a huge
// one takes gigabytes and seconds).
// CHECK: upstream-aborts.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error: #nvvm.shape: n = -8 is not an extent of an mma.sync shape
gpu.module @negative_mma_shape [#nvvm.target<chip = "sm_90">] {
  gpu.func @k(%h: vector<2xf16>, %f: f32) kernel {
    %r = nvvm.mma.sync A[%h, %h] B[%h] C[%f, %f, %f, %f] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = -8, k = 8>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
    gpu.return
  }
}
// -----
// CHECK: upstream-aborts.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error: #nvvm.shape: k = 2147483647 is not an extent of an mma.sync shape (1 to 256
gpu.module @huge_mma_shape [#nvvm.target<chip = "sm_90">] {
  gpu.func @k(%h: vector<2xf16>, %f: f32) kernel {
    %r = nvvm.mma.sync A[%h, %h] B[%h] C[%f, %f, %f, %f] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 2147483647>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
    gpu.return
  }
}
// MLIR's lexer reads a NUL inside the text as white space, so the scan does too:
// RUN: %python -c "print('gpu.module @m [#rocdl.\0target<chip = \"\">] {\n}')" > %t.nul.mlir
// RUN: not tile-opt %t.nul.mlir 2>&1 | filecheck %s --check-prefix=NUL
// NUL: nul.mlir:1:31: error: #rocdl.target: the chip cannot be empty
