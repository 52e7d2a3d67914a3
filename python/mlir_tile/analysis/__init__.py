"""What the builder and the passes both read from IR, one layer below both: `ir_facts` (operand memory,
offsets, proven alignment and bounds, block sizes, targets), `uniformity` (which values all lanes and warps
agree on) and `adapter` (the one path from a tile.matrix_transfer op to the contract's verdict). The builder
imports these, never `mlir_tile.passes`."""
