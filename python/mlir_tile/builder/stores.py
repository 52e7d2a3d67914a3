"""The Hopper epilogue's stmatrix half (CUTLASS's and FlashAttention-3's): one warpgroup's m64nN wgmma
accumulators, each pair rounded to 16 bits, written by stmatrix as a 64-row band of a tile in shared memory,
which TMA stores then read. Both Hopper kernels write their C and O tiles through it.

    band = AccumulatorBand(k, layouts["c_band"], "bf16")
    packed = band.registers()
    band.pack(packed, accumulators, lambda slot, value: value * scale)   # value(slot, x): the epilogue
    band.write(packed, shared, byte_offset)                                # one warpgroup's stmatrix
"""
from __future__ import annotations

from typing import Callable

from mlir import ir

from mlir_tile.algebra.layout import Layout
from mlir_tile.builder.compute import transfer
from mlir_tile.tiling.tiled import packed_slot, tiled_store_c


class AccumulatorBand:
    """A warpgroup's 64 rows of a 16-bit tile whose 32-bit words lie as `band_layout` (`kernels.common.
    stored_tile`'s "c_band": every band's layout, proven), written from an m64nN wgmma's accumulators by
    stmatrix (`tiled_store_c` over the warpgroup's four warps); `element` the tile's (f16 or bf16)."""

    def __init__(self, kernel, band_layout: Layout, element: str):
        self.k, self.layout, self.element = kernel, band_layout, element
        self.stores = tiled_store_c(4, band_layout)

    def registers(self) -> ir.Value:
        """Registers for the band's packed pairs, in stmatrix's order."""
        return self.k.registers(self.stores.whole.slots)

    def pack(self, registers: ir.Value, accumulators: ir.Value, columns: int, value: Callable) -> None:
        """Each pair of accumulator slots (c0 c1 of row l / 4 of an n8 block, c2 c3 eight rows down) as
        value(slot, x) of each rounded and packed into `registers` (`packed_slot`): `columns` the accumulators'
        N."""
        k = self.k
        for block in range(columns // 8):
            for half in range(2):
                values = [value(slot, k.load(accumulators, [slot])) for slot in (4 * block + 2 * half,
                                                                              4 * block + 2 * half + 1)]
                k.store(k.pack_f16(*values, self.element), registers, [packed_slot(block, half)])

    def write(self, registers: ir.Value, shared: ir.Value, at) -> None:
        """The packed pairs into the band whose first byte is `at` of `shared` (one warpgroup's stmatrix)."""
        view = self.k.view(shared, (self.layout.cosize,), "i32", at)
        transfer(self.stores.whole.opcode, view, registers, dst_layout=self.stores.whole.shared,
                 src_layout=self.stores.whole.registers, scope="warpgroup")
