"""The attention backward kernel's configuration (`BackwardConfig`), its shared tiles' layouts and its TMA boxes
(`sm90_backward` builds the kernel over them; `sm90_backward_emulation` runs them on the reference model).

Two ways to split a CTA's work between its two consumer warpgroups (`BackwardConfig.split_columns`):
- d 64 and 128: the CTA takes 128 keys, each consumer 64 of them over every column of d: S^T and dP^T of its keys
  and the whole query block, P^T and dS^T kept in registers as the A of dV and dK (the RS form);
- d 256: a consumer's dK and dV over every column would take 256 registers a thread, so the CTA takes 64 keys,
  and consumer c computes S^T and dP^T of all of them and the block's rows 32c .. 32c + 31, writes P^T and dS^T
  into shared memory (each consumer's 32 rows one 64-byte swizzled box of a [keys, rows] tile), and multiplies
  dV, dK and dQ over columns 128c .. 128c + 127 of d, both operands from shared memory (FlashAttention-3's
  d 256 backward also passes P and dS through shared memory).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from mlir_tile.kernels.common import boxed_tile, check_shared, raised_registers, stored_tile, transposed
from mlir_tile.kernels.flash.sm90_layouts import consumer_band

KERNEL = "attention_backward"
BACKWARD_HEAD_DIMS = (64, 128, 256)
BOX_COLUMNS, FLOAT_BOX_COLUMNS = 64, 32  # 128 bytes of 16-bit and of fp32 elements
PRODUCER_REGISTERS = 24
SCORES_SWIZZLE = 64  # the bytes of a consumer's 32 rows of P^T or dS^T where the consumers split d's columns


@dataclass(frozen=True)
class BackwardConfig:
    head_dim: int = 128
    causal: bool = False
    element: str = "bf16"
    rows: int = 64  # query rows a step
    stages: int | None = None  # query blocks (their Q and dO) in flight; None: 2 (d 256: 1, all that fits)
    varlen: bool = False  # packed sequences (`sm90_varlen`): a CTA a (sequence, K/V head, block of keys), its
    # sequence's query blocks at padded rows of dQaccum and the statistics, dK and dV stored by rows
    deterministic: bool = False  # dQ's additions into a block's rows in the order of the key blocks (`add_dq`)

    def __post_init__(self) -> None:
        if self.head_dim not in BACKWARD_HEAD_DIMS or self.element not in ("f16", "bf16"):
            raise ValueError(f"attention backward: head dims {', '.join(map(str, BACKWARD_HEAD_DIMS))}, f16 or bf16; "
                             f"got {self.head_dim}, {self.element}")
        if self.stages is None:
            object.__setattr__(self, "stages", 1 if self.split_columns else 2)
        if self.rows != 64 or self.stages < 1:
            raise ValueError(f"attention backward: 64 query rows a step, 1 stage or more; got {self.rows}, {self.stages}")
        check_shared("attention backward", self, self.shared_bytes, "fewer stages")

    consumers = 2

    @property
    def split_columns(self) -> bool:
        """Whether the consumers split d's columns (d 256) rather than the CTA's keys (the module's text)."""
        return self.head_dim > 128

    @property
    def keys(self) -> int:  # a CTA's
        return 64 if self.split_columns else 128

    @property
    def score_rows(self) -> int:
        """The query rows of a block in a consumer's S^T and dP^T (their wgmma's N)."""
        return self.rows // self.consumers if self.split_columns else self.rows

    @property
    def kv_columns(self) -> int:
        """The columns of dK and dV in a consumer's accumulators."""
        return self.head_dim // self.consumers if self.split_columns else self.head_dim

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def consumer_registers(self) -> int:
        return min(240, raised_registers(self.threads, PRODUCER_REGISTERS, self.consumers))

    @property
    def dq_columns(self) -> int:
        """dQ's columns a consumer multiplies: half of d where a half is whole boxes (d 128 and 256), else all
        (d 64: consumer 0 alone)."""
        half = self.head_dim // self.consumers
        return half if half % BOX_COLUMNS == 0 else self.head_dim

    @property
    def kv_bytes(self) -> int:  # K's tile, then V's
        return self.keys * self.head_dim * 2

    @property
    def block_bytes(self) -> int:  # a query block's Q or dO tile
        return self.rows * self.head_dim * 2

    @property
    def scores_bytes(self) -> int:  # a [keys, rows] 16-bit tile: dS^T's (and, splitting columns, P^T's)
        return self.keys * self.rows * 2

    @property
    def p_offset(self) -> int:  # P^T's tile where the consumers split columns, after K, V and the stages
        return 2 * self.kv_bytes + 2 * self.stages * self.block_bytes

    @property
    def ds_offset(self) -> int:  # dS^T's [keys, rows] tile
        return self.p_offset + (self.scores_bytes if self.split_columns else 0)

    @property
    def dq_offset(self) -> int:  # dQ's fp32 [rows, d] tile
        return self.ds_offset + self.scores_bytes

    @property
    def statistics_offset(self) -> int:  # the stages' LSE log2(e) and D rows (fp32), after dQ's tile
        return self.dq_offset + self.rows * self.head_dim * 4

    @property
    def shared_bytes(self) -> int:
        return self.statistics_offset + self.stages * 2 * self.rows * 4

    def grid(self, batch_kv_heads: int, seq: int) -> int:
        """CTAs to launch: one a (K/V head, block of `keys` keys)."""
        return -(-seq // self.keys) * batch_kv_heads

    def padded(self, seq: int) -> int:
        """dQaccum's rows a head: seq rounded up to the query block."""
        return -(-seq // self.rows) * self.rows

    def __str__(self) -> str:
        return (f"attention_backward_d{self.head_dim}_{self.element}{'_causal' if self.causal else ''}_s{self.stages}"
                f"{'_varlen' if self.varlen else ''}{'_deterministic' if self.deterministic else ''}_sm90a")

    @property
    def adders(self) -> int:
        """The consumers that add a share of dQ's columns into a query block's rows."""
        return self.head_dim // self.dq_columns

    def flags(self, heads: int, padded: int) -> int:
        """The deterministic mode's u32 flags (zeroed by the caller): one a (query head, block of rows, adder)."""
        return heads * padded // self.rows * self.adders


@functools.lru_cache(maxsize=None)
def tiles(config: BackwardConfig) -> dict:
    """The shared tiles' layouts in elements: K and V ([keys, d], A of S^T and dP^T), Q and dO ([rows, d]; "q_band"
    a consumer's `score_rows` of them, N x K of S^T and dP^T; "q_mn" the MN-major K x N of dK and dV over a
    consumer's `kv_columns`), dS^T ([keys, rows] as stmatrix writes C, `stored_tile`: "ds_band" a consumer's
    band of it, "ds_a" the A [K, M] of dQ over it, "scores_a" the A [M, K] of dK and dV over it and P^T's tile
    where the consumers split columns), "k_dq" K's dq_columns as dQ's MN-major B, dQ's fp32 part of a consumer
    ("dq", [rows, dq_columns]), dK's and dV's bands ("out", "out_band": `stored_tile`)."""
    from mlir_tile.algebra.layout import Layout

    d, rows, keys = config.head_dim, config.rows, config.keys
    kv, block = boxed_tile(keys, d), boxed_tile(rows, d)
    if config.split_columns:  # (consumer c's band: the box of rows 32c .. 32c + 31, whole)
        ds = stored_tile(keys, rows, config.score_rows, SCORES_SWIZZLE)
        band = stored_tile(keys, config.score_rows, config.score_rows, SCORES_SWIZZLE)["c_band"]
    else:  # (consumer c's band: keys 64c .. 64c + 63)
        ds = stored_tile(keys, rows, BOX_COLUMNS)
        band = ds["c_band"]
    out = stored_tile(keys, config.kv_columns, BOX_COLUMNS)
    return {"kv": kv, "q": block, "q_band": Layout((config.score_rows, block.shape[1]), block.stride, block.swizzle),
            "q_mn": transposed(boxed_tile(rows, config.kv_columns)), "ds_band": band, "ds_a": transposed(ds["c"]),
            "scores_a": ds["c"], "k_dq": transposed(boxed_tile(keys, config.dq_columns)),
            "dq": boxed_tile(rows, config.dq_columns, 32), "out": consumer_band(out["c"]), "out_band": out["c_band"],
            "statistic": Layout((1, rows), (rows, 1))}


def band_steps(config: BackwardConfig) -> dict:
    """Bytes from consumer 0's part of each shared tile to consumer 1's: of Q's and dO's rows ("q_band"), of their
    columns ("q_mn"), of dS^T's (and P^T's) band, of K's and V's tiles (dK's and dV's band in the epilogue, and
    K's dq_columns as dQ's B: "k_dq")."""
    layouts, split = tiles(config), config.split_columns
    kv, block, scores = layouts["kv"], layouts["q"], layouts["scores_a"]
    return {"q_band": 2 * block.offset(config.score_rows, 0) if split else 0,
            "q_mn": 2 * block.offset(0, config.kv_columns) if split else 0,
            "ds_band": 2 * (scores.offset(0, config.score_rows) if split else scores.offset(64, 0)),
            "out_band": 2 * (kv.offset(0, config.kv_columns) if split else kv.offset(64, 0)),
            "k_dq": config.keys * config.dq_columns * 2}


@functools.lru_cache(maxsize=None)
def boxes(config: BackwardConfig) -> dict:
    """The TMA box of each tensor map: Q's and dO's a query block's, K's and V's the CTA's keys, dQaccum's a box
    of the fp32 tile, dK's and dV's a consumer's band."""
    from mlir_tile.isa.tma import Box, boxes_at

    layouts = tiles(config)
    first = {name: boxes_at(layouts[tile], bits, columns)[0][2] for name, tile, bits, columns in (
        ("q", "q", 16, BOX_COLUMNS), ("k", "kv", 16, BOX_COLUMNS), ("dq", "dq", 32, FLOAT_BOX_COLUMNS),
        ("dk", "out", 16, BOX_COLUMNS))}
    statistic = Box(1, config.rows, 32, 0)
    return {"q": first["q"], "do": first["q"], "k": first["k"], "v": first["k"], "dq": first["dq"],
            "dk": first["dk"], "dv": first["dk"], "lse": statistic, "delta": statistic}
