"""Attention's extension points: what a kernel computes beyond softmax(q k^T / sqrt(d)) v, as a GEMM's epilogue
is (`kernels.epilogues`). A `Variant` says

- `keys(query, seq, at) -> (first, end)`: the keys query row `query` sees, [first, end) (a mask). Both are
  non-decreasing in the query, 0 <= first < end <= seq: the launcher checks this on the host for each sequence
  length before it launches (a ValueError naming the first row that breaks it), as the kernel relies on it: a
  query tile visits the key tiles from its first row's first key to its last row's end, and masks only the
  tiles at either end where some row does not see every key. Default: [0, seq).
- `score(s, at) -> s`: the score step before the softmax, on each score s = q.k / sqrt(d) (an `F32`; fp8:
  times q's and k's descales), `at.query` and `at.key` its place. Default: none.
- `operands`: extra kernel arguments (`epilogues.Operand` of kind "scalar", fp32, or "integer", 64-bit), which
  `at.load(name)` reads and the caller passes in order (`attention(..., variant=..., operands=(...))`).

In `keys`, `query` and `seq` (and integer operands) are index values while the kernel is built
(`builder.integers.Int`) and numpy arrays on the host: write them with + - * and this module's `maximum` and
`minimum`, which take either.

    def window(query, seq, at):                     # a causal sliding window of 1024 keys
        return maximum(query - 1023, 0), minimum(query + 1, seq)

    local = Variant("local", keys=window)

The builder-side half (`Variant.key_interval`, `Variant.scores`) needs MLIR; defining variants does not.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlir_tile.kernels import epilogues
from mlir_tile.kernels.epilogues import F32, Operand

KINDS = ("scalar", "integer")  # a variant's operands: one fp32, one 64-bit integer


@dataclass(frozen=True)
class Variant:
    """The keys each query row sees (`keys`), the score step (`score`) and the operands they read (see the
    module's text); `name` and the code's fingerprint name the kernels built with it."""
    name: str
    keys: Callable | None = None
    score: Callable | None = None
    operands: tuple[Operand, ...] = ()

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(f"attention variant: the name is an identifier, got {self.name!r}")
        if self.keys is None and self.score is None:
            raise ValueError(f"attention variant {self.name!r}: give keys, score or both")
        if any(f is not None and not callable(f) for f in (self.keys, self.score)):
            raise ValueError(f"attention variant {self.name!r}: keys is a callable of (query, seq, at), score of "
                             f"(s, at)")
        names = [operand.name for operand in self.operands]
        if len(set(names)) != len(names) or any(operand.kind not in KINDS for operand in self.operands):
            raise ValueError(f"attention variant {self.name!r}: operands of distinct names, of kinds "
                             f"{', '.join(KINDS)}; got {self.operands}")

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of the name, the operands and the code of both functions (`epilogues.code_digest`)."""
        return epilogues.code_digest(repr((self.name, self.operands)), self.keys, self.score)

    @property
    def suffix(self) -> str:
        """What the kernels built with this variant add to their names."""
        return f"_{self.name}_{self.fingerprint}"

    def parameters(self) -> list:
        """The kernel parameters of the operands, after the kernel's own."""
        return ["f32" if operand.kind == "scalar" else "index" for operand in self.operands]

    # ----- on the host -----
    def check_keys(self, seq: int, numbers: tuple) -> None:
        """ValueError unless `keys` gives each row of a sequence of `seq` (the integer operands `numbers`, in
        order) the keys [first, end) with 0 <= first < end <= seq, both non-decreasing in the row."""
        if self.keys is not None:
            _checked_keys(self, seq, tuple(numbers))

    # ----- in the kernel -----
    def key_interval(self, k, query, seq, arguments) -> tuple:
        """(first, end) of query row `query` (index values), `arguments` the operands' kernel arguments; first
        None where it is 0 for every row (no `keys`)."""
        if self.keys is None:
            return None, k.as_index(seq)
        at = Site(k, query, None, dict(zip((o.name for o in self.operands), zip(self.operands, arguments))))
        first, end = self.keys(k.as_index(query), k.as_index(seq), at)
        return k.as_index(first), k.as_index(end)

    def scores(self, k, scores, scale, query, keys, arguments) -> list:
        """The score step on `scores` (fp32 products q.k) times `scale`, `query` their row and `keys` their
        keys (index values)."""
        operands = dict(zip((o.name for o in self.operands), zip(self.operands, arguments)))
        stepped = []
        for score, key in zip(scores, keys):
            result = self.score(F32(k, score) * F32(k, scale), Site(k, query, key, operands))
            if not isinstance(result, (F32, int, float)):
                raise ValueError(f"attention variant {self.name!r}: score returns an F32 (or a number), got {result!r}")
            stepped.append(result.value if isinstance(result, F32) else k.constant(float(result), "f32"))
        return stepped


@functools.lru_cache(maxsize=256)  # (a launcher asks on every call; a model's lengths repeat)
def _checked_keys(variant: Variant, seq: int, numbers: tuple) -> None:
    integers = [operand.name for operand in variant.operands if operand.kind == "integer"]
    if len(numbers) != len(integers):
        raise ValueError(f"attention variant {variant.name!r}: {len(integers)} integer operands, got {numbers}")
    values = dict(zip(integers, numbers))
    query = np.arange(seq, dtype=np.int64)
    first, end = (np.broadcast_to(np.asarray(x, dtype=np.int64), query.shape)
                  for x in variant.keys(query, seq, HostSite(values)))
    rules = (("0 <= first", first < 0), ("end <= seq", end > seq), ("first < end (a row sees a key)", first >= end),
             ("first non-decreasing", np.r_[False, first[1:] < first[:-1]]),
             ("end non-decreasing", np.r_[False, end[1:] < end[:-1]]))
    for rule, broken in rules:
        if broken.any():
            row = int(np.argmax(broken))
            raise ValueError(f"attention variant {variant.name!r}: keys(query, seq={seq}) must keep {rule}; at row "
                             f"{row} it gives [{first[row]}, {end[row]})")


def maximum(a, b):
    """The larger of two index values (signed), F32 values, or numbers and numpy arrays."""
    return _extreme(a, b, "maximum", epilogues.maximum, np.maximum)


def minimum(a, b):
    """The smaller of two index values (signed), F32 values, or numbers and numpy arrays."""
    return _extreme(a, b, "minimum", epilogues.minimum, np.minimum)


def _extreme(a, b, which: str, of_f32, of_numbers):
    if isinstance(a, F32) or isinstance(b, F32):
        return of_f32(a, b) if isinstance(a, F32) else of_f32(b, a)
    if all(isinstance(x, (int, np.integer, np.ndarray)) for x in (a, b)):  # (on the host: no MLIR there)
        return of_numbers(a, b)
    from mlir_tile.builder import integers  # (index values in the kernel: signed)

    return getattr(integers, which)(a, b, signed=True)


class Site:
    """Where a score lies in the kernel: `query`, `key` (index values; no key in `keys`) and `load(name)`, an
    operand's value (an F32 for a scalar, an index value for an integer)."""

    def __init__(self, k, query, key, operands: dict):
        self.k, self.query, self.key, self._operands = k, query, key, operands

    def load(self, name: str):
        if name not in self._operands:
            raise ValueError(f"attention variant: no operand {name!r}; it has {', '.join(self._operands) or 'none'}")
        operand, argument = self._operands[name]
        return F32(self.k, argument) if operand.kind == "scalar" else self.k.as_index(argument)


class HostSite:
    """`keys`' `at` on the host: `load(name)` an integer operand's number."""

    def __init__(self, numbers: dict):
        self._numbers = numbers

    def load(self, name: str):
        if name not in self._numbers:
            raise ValueError(f"attention variant: keys reads integer operands only on the host; {name!r} is not one "
                             f"(it has {', '.join(self._numbers) or 'none'})")
        return self._numbers[name]
