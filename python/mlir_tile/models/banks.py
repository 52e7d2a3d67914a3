"""Shared-memory wavefronts of a transfer's instructions: the bank-conflict model (pure Python, no MLIR).

Shared memory serves 128 bytes a clock: 32 banks of 4 bytes. An ldmatrix/stmatrix moves each 8x8 matrix as 8
rows of 16 bytes, and a row occupies a quad of banks: 16-byte chunk `c` of the address space sits in quad
`c % 8`. The rows of one matrix that fall in the same quad at different addresses are served one after the
other, so a matrix costs as many wavefronts as the most crowded quad holds distinct rows (identical addresses
are one read); an instruction costs the sum over its matrices, at least one wavefront per matrix, i.e. per 128
bytes. Conflict-free x4: 4; rows at a 32-byte pitch: 8; at 128 bytes: 32.

Which quad a row hits depends on where the buffer sits, but the count does not: moving every row of a matrix
by the same 16-byte multiple (the buffer's placement, a dynamic region start) only renames the quads. So the
model needs no more than the layout and the memref's static offset, and is exact.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir_tile.contract import ROW_BYTES, WORD_BYTES, Transfer

BANK_BYTES = 128  # a wavefront: 32 banks x 4 bytes
QUADS = BANK_BYTES // ROW_BYTES


@dataclass(frozen=True)
class Wavefronts:
    instructions: int  # warp instructions per warp of the transfer
    count: int  # matrices per instruction
    worst: int  # wavefronts of the transfer's most conflicted instruction
    minimum: int  # the ideal: one per matrix
    total: int  # wavefronts of all the transfer's instructions, every warp of its scope
    warps: int = 1  # of its scope

    @property
    def bandwidth_share(self) -> float:
        """The share of shared memory's 128 bytes a clock the transfer gets where shared memory is what limits
        (enough transfers in flight): one wavefront a matrix is 1, a 4-way conflict 0.25."""
        return self.minimum * self.instructions * self.warps / self.total

    def remark(self, instruction: str) -> str:
        verdict = "conflict-free" if self.worst == self.minimum else f"{self.worst / self.minimum:g}-way conflict"
        return (f"[banks] {self.instructions} x {instruction}.x{self.count}: {self.worst} wavefronts per "
                f"instruction, minimum {self.minimum} ({verdict})")


def matrix_wavefronts(row_bytes: list[int]) -> int:
    """Wavefronts of one 8x8 matrix whose rows start at these byte addresses."""
    quads: dict[int, set[int]] = {}
    for address in row_bytes:
        quads.setdefault((address // ROW_BYTES) % QUADS, set()).add(address)
    return max(len(rows) for rows in quads.values())


def transfer_wavefronts(transfer: Transfer) -> Wavefronts:
    """Wavefronts per instruction of a checked transfer: the worst instruction over every warp and repeat."""
    count = transfer.opcode.count
    costs = []
    for warp in range(transfer.scope.warps):
        for repeat in transfer.repeats():
            rows = [[WORD_BYTES * transfer.shared_offset(warp, repeat, matrix, row) for row in range(8)]
                    for matrix in range(count)]
            costs.append(sum(matrix_wavefronts(matrix) for matrix in rows))
    warps = transfer.scope.warps
    return Wavefronts(len(costs) // warps, count, max(costs), count, sum(costs), warps)
