"""`python -m mlir_tile.tools.synthesize ROWS COLUMNS`: the conflict-free layout `tiling.synthesize` picks for a tile,
and what its transfers cost (pure Python: imports no MLIR)."""
from __future__ import annotations

from mlir_tile.tiling.synthesize import Tile, block_wavefronts, synthesize, writer_wavefronts
from mlir_tile.tools.cli import quiet_on_closed_pipe


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    """`python -m mlir_tile.tools.synthesize ROWS COLUMNS [--bits 8] [--no-writer]`: the layout, what it costs, and the
    shared layout of the tile's x4 block transfers."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mlir_tile.tools.synthesize", description=main.__doc__.split(": ")[0])
    parser.add_argument("rows", type=int)
    parser.add_argument("columns", type=int, help="elements a row")
    parser.add_argument("--bits", type=int, default=16, choices=(8, 16), help="element bits (16: f16/bf16, 8: s8/u8)")
    parser.add_argument("--no-writer", action="store_true", help="leave out the 16-byte-vector writer")
    parser.add_argument("--k-block-major", action="store_true", help="each 8-word column block contiguous")
    arguments = parser.parse_args(argv)
    tile = Tile(arguments.rows, arguments.columns, arguments.bits)
    try:
        choice = synthesize(tile, writer=not arguments.no_writer, k_block_major=arguments.k_block_major)
    except ValueError as error:
        parser.error(str(error))
    blocks, block_minimum = block_wavefronts(tile, choice)
    print(f"{tile.rows}x{tile.columns} {tile.element_bits}-bit tile: {choice.describe(tile)}")
    kinds = "ldmatrix, .trans, stmatrix" if tile.element_bits == 16 else "ldmatrix, stmatrix"
    print(f"  x4 block transfers ({kinds}): {blocks} wavefronts, minimum {block_minimum}")
    if not arguments.no_writer:
        written, written_minimum = writer_wavefronts(tile, choice)
        print(f"  16-byte-vector writer: {written} wavefronts, minimum {written_minimum}")
    print(f"  every block as one x4 in mma order: {choice.block_layout(tile)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
