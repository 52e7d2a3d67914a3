// Rules 1-3 and 9: opcode form, no extra attributes, scope, layout syntax.
// RUN: tile-opt %s --split-input-file --verify-diagnostics --tile-verify-matrix-transfer

gpu.module @x3 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[opcode] unsupported opcode 'ldmatrix.sync.aligned.m8n8.x3.shared.b16' (the matrix count is .x1, .x2 or .x4); supported forms: ldmatrix|stmatrix .sync.aligned.m8n8.x{1,2,4}[.trans].shared[::cta].b16}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x3.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @typo [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[opcode] unsupported opcode 'ldmatrx.sync.aligned.m8n8.x4.shared.b16'}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrx.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @shape_m16n8 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{(only the m8n8 shape with .b16 elements is supported)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @b8 [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{(the element type is .b16; 32-bit containers hold two b16 elements)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b8", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @pred [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[attributes] unexpected attribute 'pred': instruction parameters are only opcode, scope, dst_layout, src_layout}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", pred = true,
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @cache_hint [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[attributes] unexpected attribute 'cache'}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp", cache = "L1",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @thread_scope [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[scope] scope "thread" (the specification's default) cannot issue ldmatrix/stmatrix: they are warp-collective; use scope "warp"}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "thread",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @unknown_scope [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[scope] unknown scope 'cluster'; use one of: warp, warpgroup, cta}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cluster",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @warpgroup_without_group_axis [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[scope] scope "warpgroup" has 4 warps, so both layouts need a leading group axis of extent 4 (register stride 1@warpid); got shape (4,8,4)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warpgroup",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @cta_wrong_group_extent [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[scope] scope "cta" has 2 warps, so both layouts need a leading group axis of extent 2}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "cta",
        dst_layout = #tile.layout<"(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(4,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @warpid_in_warp_scope [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[register-owner] dst_layout (2,4,8,4):(1@warpid,1,4@laneid,1@laneid) axis 0 has stride 1@warpid, but scope "warp" has no group axis}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(2,4,8,4):(1@warpid,1,4@laneid,1@laneid)">, src_layout = #tile.layout<"(2,4,8,4):(128,32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @bad_layout_text [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[layout-syntax] dst_layout: malformed layout '(4,8,4):(1,4@laneid)' at column 9: 3 extents but 2 strides}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}

// -----

gpu.module @unknown_thread_axis [#nvvm.target<chip = "sm_90">] {
  memref.global "private" @sm : memref<512xi32, 3> {alignment = 16 : i64}
  gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    %sm = memref.get_global @sm : memref<512xi32, 3>
    %r = memref.alloca() : memref<8xi32, 5>
    // expected-error@+1 {{[layout-syntax] dst_layout: malformed layout '(4,8,4):(1,4@lane,1@laneid)' at column 14: unknown thread axis 'lane' (known: laneid, warpid)}}
    "tile.matrix_transfer"(%r, %sm) {opcode = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", scope = "warp",
        dst_layout = #tile.layout<"(4,8,4):(1,4@lane,1@laneid)">, src_layout = #tile.layout<"(4,8,4):(32,4,1)">} : (memref<8xi32, 5>, memref<512xi32, 3>) -> ()
    gpu.return
  }
}
