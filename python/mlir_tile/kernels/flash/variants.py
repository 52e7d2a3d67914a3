"""Attention's extension points: what a kernel computes beyond softmax(q k^T / sqrt(d)) v, as a GEMM's epilogue
is (`kernels.epilogues`). A `Variant` says

- `keys(query, seq, at) -> (first, end)`: the keys query row `query` sees, [first, end) (a mask). Both are
  non-decreasing in the query, 0 <= first < end <= seq: the launcher checks this on the host for each sequence
  length before it launches (a ValueError naming the first row that breaks it), as the kernel relies on it: a
  query tile visits the key tiles from its first row's first key to its last row's end, and masks only the
  tiles at either end where some row does not see every key. Default: [0, seq).
- `score(s, at) -> s`: the score step before the softmax, on each score s = q.k / sqrt(d) (an `F32`; fp8:
  times q's and k's descales), `at.query` and `at.key` its place, `at.distance` the key's position less the
  query's (an `F32`). Default: none.
- `score_gradient(stepped, at) -> d stepped / d s`: the step's derivative, from its result (an `F32`), or a
  number where it is constant (ALiBi's 1): with it the variant trains (the backward recomputes each score's step
  and multiplies dS by it). Default: none (a variant with a score step and no derivative has no backward).
- `sink(at) -> logit`: a row's attention sink (gpt-oss's learned sinks): a logit beside its scores in the
  softmax's sum, with no value, so that a row may attend to nothing; `at.query` its row. Or the name of a "head"
  operand, whose values are the sinks: then they train (the operator returns their gradient). Default: none.
- `operands`: extra kernel arguments (`epilogues.Operand` of kind "scalar", fp32, "integer", 64-bit, or "head",
  one fp32 per query head: a tensor [heads] or [batch, heads]), which `at.load(name)` reads (a "head" operand
  at the row's head) and the caller passes in order (`attention(..., variant=..., operands=(...))`).

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

KINDS = ("scalar", "integer", "head")  # a variant's operands: one fp32, one 64-bit integer, one fp32 a head


@dataclass(frozen=True)
class Variant:
    """The keys each query row sees (`keys`), the score step (`score`) and the operands they read (see the
    module's text); `name` and the code's fingerprint name the kernels built with it."""
    name: str
    keys: Callable | None = None
    score: Callable | None = None
    operands: tuple[Operand, ...] = ()
    sink: Callable | str | None = None
    score_gradient: Callable | float | None = None

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(f"attention variant: the name is an identifier, got {self.name!r}")
        if self.keys is None and self.score is None and self.sink is None:
            raise ValueError(f"attention variant {self.name!r}: give keys, score, sink or some of them")
        if any(f is not None and not callable(f) for f in (self.keys, self.score)) or not (
                self.score_gradient is None or callable(self.score_gradient) or self.constant_gradient) or not (
                self.sink is None or callable(self.sink) or self.sink_operand is not None):
            raise ValueError(f"attention variant {self.name!r}: keys is a callable of (query, seq, at), score of "
                             f"(s, at), score_gradient of (stepped, at) or a number, sink of (at) or the name of a "
                             f"head operand")
        if self.score_gradient is not None and self.score is None:
            raise ValueError(f"attention variant {self.name!r}: a score_gradient is its score step's")
        names = [operand.name for operand in self.operands]
        if len(set(names)) != len(names) or any(operand.kind not in KINDS for operand in self.operands):
            raise ValueError(f"attention variant {self.name!r}: operands of distinct names, of kinds "
                             f"{', '.join(KINDS)}; got {self.operands}")

    @property
    def sink_operand(self) -> str | None:
        """The "head" operand whose values are the sinks, where `sink` names one (they train)."""
        heads = [operand.name for operand in self.operands if operand.kind == "head"]
        return self.sink if isinstance(self.sink, str) and self.sink in heads else None

    @property
    def constant_gradient(self) -> bool:
        """Whether the score step's derivative is a number (ALiBi's 1), not a function of its result."""
        return isinstance(self.score_gradient, (int, float)) and not isinstance(self.score_gradient, bool)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of the name, the operands and the code of its functions (`epilogues.code_digest`)."""
        return epilogues.code_digest(repr((self.name, self.operands, self.score_gradient if self.constant_gradient
                                           else None)), self.keys, self.score, self.sink,
                                     None if self.constant_gradient else self.score_gradient)

    @property
    def suffix(self) -> str:
        """What the kernels built with this variant add to their names."""
        return f"_{self.name}_{self.fingerprint}"

    def described(self) -> str:
        """The operands as errors name them: "width (integer), cap (scalar)"."""
        return ", ".join(f"{operand.name} ({operand.kind})" for operand in self.operands) or "none"

    def parameters(self) -> list:
        """The kernel parameters of the operands, after the kernel's own."""
        from mlir_tile.builder import Global

        return [{"scalar": "f32", "integer": "index"}.get(operand.kind) or Global("f32") for operand in self.operands]

    # ----- on the host -----
    def check_keys(self, seq: int, numbers: tuple, shorter: bool = False) -> None:
        """ValueError unless `keys` gives each row of a sequence of `seq` (the integer operands `numbers`, in
        order) the keys [first, end) with 0 <= first < end <= seq, both non-decreasing in the row; `shorter`
        (packed sequences, whose lengths the host does not see): at every length up to SHORTER_CHECKED too."""
        if self.keys is not None:
            _checked_keys(self, seq, tuple(numbers))
            if shorter:
                _checked_shorter(self, min(seq - 1, SHORTER_CHECKED), tuple(numbers))

    # ----- in the kernel -----
    def key_interval(self, k, query, seq, arguments) -> tuple:
        """(first, end) of query row `query` (index values), `arguments` the operands' kernel arguments; first
        None where it is 0 for every row (no `keys`)."""
        if self.keys is None:
            return None, k.as_index(seq)
        first, end = self.keys(k.as_index(query), k.as_index(seq), Site(k, query, None, {}, self._named(arguments)))
        return k.as_index(first), k.as_index(end)

    def rows_seeing(self, k, first_key, end_key, seq, arguments, rows=None, position=None) -> tuple:
        """(lowest, beyond): the rows [lowest, beyond) of `rows` (`seq` where not given) that see a key of
        [first_key, end_key) (index values; the backward's block of keys), `position(row)` a row's position among
        the `seq` keys (the row where not given): from the first row whose end passes first_key to the first
        whose first reaches end_key, both bounds non-decreasing in the row, so each a binary search
        (`_first_row`)."""
        from mlir_tile.builder.integers import maximum as index_maximum

        seq = k.as_index(seq)
        rows, at = seq if rows is None else k.as_index(rows), position or (lambda row: row)
        lowest = _first_row(k, rows, lambda row: k.compare("sgt", self.key_interval(k, at(row), seq, arguments)[1],
                                                           first_key))
        beyond = _first_row(k, rows, lambda row: k.compare("sge", self.key_interval(k, at(row), seq, arguments)[0],
                                                           end_key))
        return lowest, index_maximum(beyond, lowest)

    def head_values(self, k, head, arguments) -> dict:
        """The "head" operands' values (F32s) at query head `head` (an index value, counted over batch x heads):
        what the kernel loads once an item (the backward: once a query head) and `scores` and `sink_logit` take
        (loaded where read, their 64-bit address stayed live through the item's loop and spilled)."""
        return {operand.name: F32(k, k.load(argument, [head]))
                for operand, argument in zip(self.operands, arguments) if operand.kind == "head"}

    def scores(self, k, scores, scale, query, first_key, steps, heads: dict, arguments) -> list:
        """The score step on `scores` (fp32 products q.k) times `scale`, `query` their row, their keys `first_key`
        (an index value) plus `steps` (ints), `heads` the head's values (`head_values`). (Each distance is one
        conversion a row plus its step: a conversion a score spilled.)"""
        first, query = k.as_index(first_key), k.as_index(query)
        nearest = self.distance(k, first, query)
        return [self.stepped(k, score, scale, self.site(k, query, first + step, heads, arguments,
                                                        distance=lambda step=step: nearest + float(step)))
                for score, step in zip(scores, steps)]

    def stepped(self, k, score, scale, at: "Site"):
        """The score step on one product q.k `score` (an f32 value) times `scale`, at `at`: an f32 value."""
        return self._f32(k, "score", self.score(F32(k, score, fast=True) * F32(k, scale), at))

    @staticmethod
    def distance(k, key, query) -> F32:
        """key - query (index values, |difference| < 2^31) as an F32 (`Site`'s distance adds a slot's constant)."""
        from mlir import ir
        from mlir.dialects import arith

        return F32(k, arith.sitofp(ir.F32Type.get(), k.as_i32(k.as_index(key) - k.as_index(query), signed=True)),
                   fast=True)

    def gradient_of(self, k, stepped, at: "Site"):
        """The step's derivative (`score_gradient`) at a score whose step gave `stepped` (an f32 value): an f32
        value."""
        if self.constant_gradient:
            return k.constant(float(self.score_gradient), "f32")
        return self._f32(k, "score_gradient", self.score_gradient(F32(k, stepped, fast=True), at))

    def sink_logit(self, k, query, heads: dict, arguments):
        """Row `query`'s sink logit (an f32 value), `heads` the head's values (`head_values`)."""
        at = Site(k, query, None, heads, self._named(arguments))
        return self._f32(k, "sink", at.load(self.sink) if self.sink_operand else self.sink(at))

    def site(self, k, query, key, heads: dict, arguments, distance=None) -> "Site":
        """The `at` of a score at (query, key) (index values), `heads` the head's values, `distance` a callable
        giving key - query as an F32 (one conversion a row and a constant a score, as `scores` makes them)."""
        return Site(k, query, key, heads, self._named(arguments), distance=distance)

    def _named(self, arguments) -> dict:
        return dict(zip((o.name for o in self.operands), zip(self.operands, arguments)))

    def _f32(self, k, function: str, result):
        if not isinstance(result, (F32, int, float)):
            raise ValueError(f"attention variant {self.name!r}: {function} returns an F32 (or a number), got "
                             f"{result!r}")
        return result.value if isinstance(result, F32) else k.constant(float(result), "f32")


def _first_row(k, rows, holds):
    """The first row r of [0, rows) where `holds(r)` (an i1, false then true as r grows), `rows` where none: a
    binary search of 32 halvings (rows below 2^32), its bounds carried by the loop."""
    from mlir_tile.builder.integers import with_operators

    with k.loop(0, 32, carried=[k.index(0), rows]) as it:
        low, high = (with_operators(value) for value in it.values)
        middle = (low + high) // 2
        searching, found = with_operators(k.compare("ult", low, high)), with_operators(holds(middle))
        it.next(k.select(searching & ~found, middle + 1, low), k.select(searching & found, middle, high))
    return with_operators(it.results[0])


@functools.lru_cache(maxsize=256)  # (a launcher asks on every call; a model's lengths repeat)
def _checked_keys(variant: Variant, seq: int, numbers: tuple) -> None:
    _check_lengths(variant, np.array([seq]), numbers)


SHORTER_CHECKED = 4096  # packed sequences: the lengths below the longest checked on the host, each (a row of
# SHORTER_ROWS lengths at a time: some 0.03 s for all, once a variant, its numbers and the longest); past
# them the kernel's `walk_covers` gives a row whose keys its walk misses NaN
SHORTER_ROWS = 256


@functools.lru_cache(maxsize=64)
def _checked_shorter(variant: Variant, longest: int, numbers: tuple) -> None:
    for first in range(1, longest + 1, SHORTER_ROWS):
        _check_lengths(variant, np.arange(first, min(first + SHORTER_ROWS, longest + 1)), numbers)


def _check_lengths(variant: Variant, lengths, numbers: tuple) -> None:
    """ValueError naming the first length of `lengths` (and row) where `keys` breaks a rule: the rows of every
    length evaluated at once (`keys` takes numpy arrays, [lengths, 1] beside [1, rows])."""
    integers = [operand.name for operand in variant.operands if operand.kind == "integer"]
    if len(numbers) != len(integers):
        raise ValueError(f"attention variant {variant.name!r}: {len(integers)} integer operands, got {numbers}")
    seq, query = lengths.astype(np.int64)[:, None], np.arange(int(lengths.max()), dtype=np.int64)[None, :]
    first, end = (np.broadcast_to(np.asarray(x, dtype=np.int64), (seq.shape[0], query.shape[1]))
                  for x in variant.keys(query, seq, HostSite(dict(zip(integers, numbers)))))
    inside = query < seq
    rules = (("0 <= first", first < 0), ("end <= seq", end > seq), ("first < end (a row sees a key)", first >= end),
             ("first non-decreasing", _falls(first)), ("end non-decreasing", _falls(end)))
    for rule, broken in rules:
        broken = broken & inside
        if broken.any():
            length, row = np.unravel_index(int(np.argmax(broken)), broken.shape)
            raise ValueError(f"attention variant {variant.name!r}: keys(query, seq={int(seq[length, 0])}) must keep "
                             f"{rule}; at row {row} it gives [{first[length, row]}, {end[length, row]})")


def _falls(bound):
    """Where a row's bound lies below the row's before it (the first row never)."""
    return np.concatenate([np.zeros((bound.shape[0], 1), bool), bound[:, 1:] < bound[:, :-1]], axis=1)


def variant_arguments(variant, operands, causal: bool, seq: int, per_head: tuple,
                      shorter: bool = False) -> tuple[list, list]:
    """A variant's operands as its launch's slots take them (floats for its fp32 scalars, ints, the addresses of
    its heads' fp32 values: `per_head_values`, `per_head` (batch, heads, device)), its keys checked for `seq`
    (`Variant.check_keys`; `shorter`, packed sequences: at the lengths below it too); none without a variant.
    Also the tensors those addresses lie in, which the caller holds until the launch (else the allocator may
    give their bytes to O)."""
    if variant is None:
        if operands:
            raise ValueError("attention: operands are a variant's")
        return [], []
    if variant.keys is not None and causal:
        raise ValueError(f"attention: variant {variant.name!r} says which keys each row sees; give it causal=False")
    import torch

    kinds = [operand.kind for operand in variant.operands]
    taken = {"scalar": (int, float), "integer": int, "head": torch.Tensor}
    if len(operands) != len(kinds) or any(isinstance(x, bool) or not isinstance(x, taken[kind])
                                          for x, kind in zip(operands, kinds)):
        raise ValueError(f"attention: variant {variant.name!r} takes operands {variant.described()} (a head's: a "
                         f"tensor); got {tuple(operands)!r}")
    variant.check_keys(seq, tuple(x for x, kind in zip(operands, kinds) if kind == "integer"), shorter=shorter)
    kept = [per_head_values(variant, operand.name, x, *per_head) if operand.kind == "head" else None
            for x, operand in zip(operands, variant.operands)]
    return [float(x) if kind == "scalar" else int(x) if kind == "integer" else laid.data_ptr()
            for x, kind, laid in zip(operands, kinds, kept)], kept


def per_head_values(variant, name: str, values, batch: int, heads: int, device):
    """A "head" operand's values as the kernel reads them, fp32 for each of batch x heads, from `values` [heads]
    or [batch, heads] of a floating dtype on `device` (copied where they are not so already)."""
    import torch

    if (values.device != device or not values.is_floating_point()
            or tuple(values.shape) not in ((heads,), (batch, heads))):
        raise ValueError(f"attention: variant {variant.name!r}'s operand {name!r} is a floating tensor [heads] or "
                         f"[batch, heads] on {device}, ({heads},) or ({batch}, {heads}); got {tuple(values.shape)} "
                         f"{values.dtype} on {values.device}")
    return values.to(torch.float32).expand(batch, heads).contiguous()


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
    """Where a score lies in the kernel: `query` and `key` (index values; no key in `keys` and `sink`),
    `distance` (key - query, an F32) and `load(name)`, an operand's value (an F32 for a scalar and for a head's,
    `heads` holding those of the row's head; an index value for an integer)."""

    def __init__(self, k, query, key, heads: dict, operands: dict, distance=None):
        self.k, self.query, self.key, self._heads, self._operands = k, query, key, heads, operands
        self._distance = distance

    @property
    def distance(self) -> F32:
        if self._distance is None:
            raise ValueError("attention variant: at.distance is a score's (keys and sink have no key)")
        return self._distance()

    def load(self, name: str):
        if name not in self._operands:
            raise ValueError(f"attention variant: no operand {name!r}; it has {', '.join(self._operands) or 'none'}")
        operand, argument = self._operands[name]
        if operand.kind == "head":
            if name not in self._heads:
                raise ValueError(f"attention variant: operand {name!r} is a head's; keys see no head")
            return self._heads[name]
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
