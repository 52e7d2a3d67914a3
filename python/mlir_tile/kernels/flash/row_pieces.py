"""The geometry of the kernels that read rows of [rows, d] tensors, d / PIECE consecutive lanes a row (the
backward's passes over rows, `backward_rows`; split-KV's combine, `combine`): a row's lanes, a CTA's rows, the
head dims and elements they take."""
from __future__ import annotations

THREADS = 256
PIECE = 8  # elements of a row a lane reads: 16 bytes of 16-bit ones


class PieceRows:
    """A mixin of a frozen dataclass with `head_dim` and `element`: `lanes` a row, `grid` of a count of rows,
    `check_rows` of its fields."""

    threads = THREADS  # a CTA's

    @property
    def lanes(self) -> int:  # lanes a row
        return self.head_dim // PIECE

    def grid(self, rows: int) -> int:
        return -(-rows // (self.threads // self.lanes))

    def rows_refused(self) -> bool:
        """Whether the head dim is not a multiple of PIECE up to 32 x PIECE (a warp a row at most), or the
        element not f16 or bf16."""
        return bool(self.head_dim % PIECE or not PIECE <= self.head_dim <= 32 * PIECE
                    or self.element not in ("f16", "bf16"))
