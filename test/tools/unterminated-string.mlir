// A string literal left open after an 8-bit nvvm.ldmatrix: upstream's parser reported the lexer's error and
// then stopped the process ("unhandled captured errors"); the text pre-check reports it, located.
// RUN: not tile-opt %s 2>&1 | filecheck %s
// RUN: not tile-translate --mlir-to-ptx %s 2>&1 | filecheck %s
// CHECK: unterminated-string.mlir:11:2: error: expected '"' in string literal
// CHECK-NOT: Assertion
gpu.module @m [#nvvm.target<chip = "sm_100a">] {
  gpu.func @k(%p: !llvm.ptr<3>) kernel {
    %r = nvvm.ldmatrix %p {num = 1 : i32, layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 16, n = 16>,
                           eltType = #nvvm.ld_st_matrix_elt_type<b8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>
 "
    gpu.return
  }
}
