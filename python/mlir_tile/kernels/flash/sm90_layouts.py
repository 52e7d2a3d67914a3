"""Hopper attention's shared tiles as layouts (Q's and O's bands, K/V stages, fp8 V's staging and its
transposition) and the TMA boxes they prove, from a configuration: what the kernel (`sm90`) and its launch
(`launch`: the tensor maps' boxes) share, apart from the kernel; and the wgmma accumulator slots' rows and
columns, proven for every thread."""
from __future__ import annotations

import functools

from mlir_tile.isa.tma import boxes_at
from mlir_tile.kernels.common import boxed_tile, stored_tile, transposed
from mlir_tile.kernels.flash.sm90_tiles import HopperAttentionConfig, ROW_BYTES

O_BOX_COLUMNS = 64  # O's boxes: 64 columns of 16-bit elements (128 bytes), 64 rows (a consumer's)


def _swizzle(config: HopperAttentionConfig):
    """The 128-byte swizzle on elements of the config's type (TMA's and wgmma's)."""
    from mlir_tile.isa.tma import Box

    return Box(8, config.box_columns, 8 * config.element_bytes, ROW_BYTES).layout.swizzle


def _boxed(rows: int, config: HopperAttentionConfig):
    """A rows x d tile of the config's elements as TMA writes it (`common.boxed_tile`)."""
    return boxed_tile(rows, config.head_dim, 8 * config.element_bytes)


@functools.lru_cache(maxsize=None)
def tiles(config: HopperAttentionConfig) -> dict:
    """The shared tiles' layouts in elements: Q (rows x d) and K (keys x d) as TMA writes them, K-major for
    wgmma; V as wgmma's B of P V, (d, keys): 16-bit, of K's [keys, d] boxes, MN-major; fp8 (K-major only), V^T
    as the producer writes it from the staged V tile ("v_staged", K's layout), each key k at column
    key_order(k) of its row, the order in which P's registers hold the keys (`atoms.a_key_order`), so that
    wgmma reads it through that order K-major."""
    from mlir_tile.isa.atoms import a_key_order, wgmma
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.operations import composition

    kv, q = _boxed(config.keys, config), _boxed(config.rows, config)
    layouts = {"q": q, "q_band": consumer_band(q), "k": kv, **_o_tiles(config)}
    if config.page_rows:  # (a page's box of K's or V's tile: its first rows; the box j further, j x its bytes)
        layouts["k_page"] = consumer_band(kv, config.page_rows)
    if not config.fp8:
        return {**layouts, "v": transposed(kv)}
    order = a_key_order(wgmma(config.keys, config.element), wgmma(config.head_dim, config.element))
    v_t = Layout((config.head_dim, config.keys), (config.keys, 1), _swizzle(config))
    return {**layouts, "v_staged": kv, "v_t": v_t, "v": composition(v_t, (None, order)), "key_order": order}


def _o_tiles(config: HopperAttentionConfig) -> dict:
    """O's tile (rows x d, 16-bit, `common.stored_tile`): a consumer's 64 rows of it ("o", the TMA stores'
    boxes) and of its words from its first ("o_band", what its stmatrix writes)."""
    
    tile = stored_tile(config.rows, config.head_dim, O_BOX_COLUMNS)
    return {"o": consumer_band(tile["c"]), "o_band": tile["c_band"]}


def consumer_band(tile, rows: int = 64):
    """A consumer's 64 rows (or `rows`) of a (rows, columns) tile: the first's; consumer c's `BAND_BYTES` c
    further."""
    from mlir_tile.algebra.layout import Layout

    return Layout((rows, tile.shape[1]), (tile.stride[0], tile.stride[1]), tile.swizzle)


@functools.lru_cache(maxsize=None)
def transposition(config: HopperAttentionConfig):
    """fp8: the staged V tile (keys x d bytes) rewritten as V^T in P's key order (`byte_transpose`), each word
    layout proven to hold its tile's bytes."""
    from mlir_tile.tiling.byte_transpose import byte_transpose
    from mlir_tile.algebra.words import words_of

    layouts = tiles(config)
    return byte_transpose(words_of(layouts["v_staged"], 4), words_of(layouts["v_t"], 4), layouts["key_order"])


def o_stores(config: HopperAttentionConfig) -> list:
    """A consumer's TMA stores of O: per box, (its first element in the band, its first column of O, the box)."""
    return boxes_at(tiles(config)["o"], 16, O_BOX_COLUMNS)


@functools.lru_cache(maxsize=None)
def boxes(config: HopperAttentionConfig) -> dict:
    """The TMA box of each tensor map (Q's and O's: a consumer's 64 rows; K's and V's: a key tile's): the first
    of its tile's boxes (paged K/V: a page's rows of it)."""
    layouts, kv = tiles(config), "k_page" if config.page_rows else "k"
    return {**{name: boxes_at(layouts[tile], 8 * config.element_bytes, config.box_columns)[0][2]
               for name, tile in (("q", "q_band"), ("k", kv), ("v", kv))}, "o": o_stores(config)[0][2]}


def slot_steps(atom, layout, what: str) -> list[int]:
    """Per accumulator slot, its coordinate in `layout` (the atom's accumulator rows or columns) less slot 0's,
    proven the same for every thread of the warpgroup; ValueError naming `what` otherwise."""
    steps = []
    for slot in range(atom.shape[1] // 2):
        offsets = {layout.offset(thread, slot) - layout.offset(thread, 0) for thread in range(128)}
        if len(offsets) != 1:
            raise ValueError(f"hopper attention: accumulator slot {slot} of {atom.name} is not {what}")
        steps.append(offsets.pop())
    return steps


def row_halves(atom) -> list[int]:
    """Per accumulator slot, which of a thread's two rows it holds (0: its row, 1: eight further), proven on
    the atom's accumulator layout for every thread; ValueError otherwise."""
    steps = slot_steps(atom, atom.c.rows, "one of a thread's two rows")
    if not set(steps) <= {0, 8}:
        raise ValueError(f"hopper attention: an accumulator slot of {atom.name} is not one of a thread's two rows")
    return [step // 8 for step in steps]


def column_steps(atom) -> list[int]:
    """Per accumulator slot, its column less slot 0's, the same for every thread (proven on the atom's
    accumulator layout); ValueError otherwise."""
    return slot_steps(atom, atom.c.columns, "a column step of every thread's")
