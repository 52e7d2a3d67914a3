"""Ready-made attention variants (`variants.Variant`) for the masks and score steps models use, to pass as
`attention(q, k, v, variant=..., operands=...)`:

- `sliding_window(left, right=0)`: query i sees keys i - left to i + right (Mistral's, gpt-oss's and Gemma's
  local layers: right 0, causal); the widths are built into the kernel, so each pair is a kernel of its own.
- `band`: the same with one width either side read at the call (`operands=(width,)`): one kernel for every width.
- `prefix_lm(prefix)`: the first `prefix` keys seen by every query, causal after them (T5's and PaliGemma's
  prefix-LM).
- `softcap`: Gemma 2's logit soft-capping, cap * tanh(s / cap) on each scaled score (`operands=(cap,)`); it
  trains (its derivative 1 - (stepped / cap)^2), as ALiBi does and every mask.
- `alibi`: ALiBi's linear biases, each score less its head's slope times the key's distance from the query
  (`operands=(slopes,)`, a tensor [heads] or [batch, heads]; `alibi_slopes(heads)` the paper's).
- `sinks`: gpt-oss's learned attention sinks, a logit per head in each row's softmax sum with no value
  (`operands=(sinks,)`, a tensor [heads] or [batch, heads], which trains: the operator returns its gradient).
- `combined(*variants)`: the keys all of them let a query see, their score steps in order (trained where one
  has a step, or every step's derivative is a number) and the sink of one
  (Gemma 2's local layers: `combined(sliding_window(4095), softcap)`, `operands=(50.0,)`; gpt-oss's:
  `combined(sliding_window(127), sinks)`).

Each mask is an interval of keys a query row, so a query tile visits only the key tiles its rows see and masks
those at either end (`variants`' rules). The same arguments give the same object, whose kernels are built once.
"""
from __future__ import annotations

import functools
import math

from mlir_tile.kernels.epilogues import Operand, absolute, reciprocal, tanh
from mlir_tile.kernels.flash.variants import Variant, maximum, minimum


@functools.lru_cache(maxsize=None)
def sliding_window(left: int, right: int = 0) -> Variant:
    """Query i sees keys [i - left, i + right] of the sequence (right 0: causal, left keys before it)."""
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in (left, right)):
        raise ValueError(f"sliding_window: left and right are non-negative ints, got {left!r}, {right!r}")

    def window(query, seq, at):
        return maximum(query - left, 0), minimum(query + (right + 1), seq)

    return Variant("window", keys=window)


def _band(query, seq, at):  # the keys within `width` of the query, either side
    width = at.load("width")
    return maximum(query - width, 0), minimum(query + width + 1, seq)


def _softcap(s, at):  # cap * tanh(s / cap), the division a reciprocal of the cap (IEEE's is some 20 instructions)
    cap = at.load("cap")
    return cap * tanh(s * reciprocal(cap))


def _alibi(s, at):  # s - slope x |key - query|
    return s - at.load("slopes") * absolute(at.distance)


band = Variant("band", keys=_band, operands=(Operand("width", "integer"),))
def _softcap_gradient(stepped, at):  # d/ds cap tanh(s / cap) = 1 - tanh^2 = 1 - (stepped / cap)^2
    ratio = stepped * reciprocal(at.load("cap"))
    return 1.0 - ratio * ratio


softcap = Variant("softcap", score=_softcap, operands=(Operand("cap", "scalar"),), score_gradient=_softcap_gradient)
alibi = Variant("alibi", score=_alibi, operands=(Operand("slopes", "head"),), score_gradient=1)
sinks = Variant("sinks", sink="sinks", operands=(Operand("sinks", "head"),))


def alibi_slopes(heads: int) -> list:
    """ALiBi's slopes for `heads` heads (Press et al.: 2^(-8 i / n) for i = 1..n, n the power of two at or
    below `heads`; past it, every other slope of 2n's)."""
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"alibi_slopes: heads is a positive int, got {heads!r}")
    power = 1 << (heads.bit_length() - 1)
    slopes = [2 ** (-8 * i / power) for i in range(1, power + 1)]
    return slopes + [2 ** (-4 * i / power) for i in range(1, 2 * (heads - power), 2)]


@functools.lru_cache(maxsize=None)
def prefix_lm(prefix: int) -> Variant:
    """Every query sees the first `prefix` keys, and each key up to its own (causal past the prefix)."""
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise ValueError(f"prefix_lm: the prefix is a non-negative int, got {prefix!r}")

    def prefix_then_causal(query, seq, at):
        return 0, minimum(maximum(query + 1, prefix), seq)

    return Variant("prefix_lm", keys=prefix_then_causal)


@functools.lru_cache(maxsize=None)
def combined(*parts: Variant) -> Variant:
    """The keys every part lets a query see (the latest first, the earliest end), the parts' score steps in
    their order and the sink of one; their operands one after another (distinct names)."""
    if len(parts) < 2 or not all(isinstance(part, Variant) for part in parts):
        raise ValueError(f"combined: two or more Variants, got {parts!r}")
    masks = [part.keys for part in parts if part.keys is not None]
    steps = [part.score for part in parts if part.score is not None]
    sunk = [part.sink for part in parts if part.sink is not None]
    if len(sunk) > 1:
        raise ValueError(f"combined: one part with a sink, got {len(sunk)}")

    def keys(query, seq, at):
        first, end = masks[0](query, seq, at)
        for mask in masks[1:]:
            other_first, other_end = mask(query, seq, at)
            first, end = maximum(first, other_first), minimum(end, other_end)
        return first, end

    def score(s, at):
        for step in steps:
            s = step(s, at)
        return s

    return Variant("_".join(part.name for part in parts), keys=keys if masks else None,
                   score=score if steps else None, operands=sum((part.operands for part in parts), ()),
                   sink=sunk[0] if sunk else None, score_gradient=_chained([p for p in parts if p.score is not None]))


def _chained(stepped: list):
    """The derivative of the parts' steps in turn, where it follows from the last result: one step's own, or the
    product of constant ones; else None (no backward: the chain rule needs each step's result)."""
    if len(stepped) == 1:
        return stepped[0].score_gradient
    if stepped and all(part.constant_gradient for part in stepped):
        return math.prod(part.score_gradient for part in stepped)
    return None
