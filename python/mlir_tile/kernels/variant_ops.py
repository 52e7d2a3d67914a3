"""Attention variants (`flash.variants.Variant`) as torch operators: `mlir_tile::attention_<name>_<fingerprint>`,
one a variant, registered on first use, its "head" operands as a list of tensors beside a list of numbers; and,
for a variant that trains (a mask, a score step with its `score_gradient`, a sink named as an operand), its
backward (`..._gradients`: `flash.backward` with the variant; the sinks' gradient here, from O, dO and the
log-sum-exp). On packed sequences and KV caches, `attention_packed_<name>_<fingerprint>`: packed sequences
train as the dense form does (`flash.backward`'s packed kernels), a cache's calls are forward only.
`ops.attention(..., variant=...)`, `attention_varlen` and `attention_with_kvcache` call them.

No `from __future__ import annotations` here: torch reads the operators' schemas from their annotations.
"""
from typing import List, Optional, Tuple

import torch

from mlir_tile.kernels import registry
from mlir_tile.kernels.registry import kernels_on, no_backward, register_operator


def attention(q, k, v, causal: bool, variant, operands):
    """`ops.attention(..., variant=variant, operands=operands)`: the operands checked against the variant's kinds
    (a head's a tensor, the others numbers; a head's that does not train refused where autograd would want its
    gradient: only a sink named as an operand trains), then its operator."""
    heads = [operand.kind == "head" for operand in variant.operands]
    if len(operands) != len(heads) or any(isinstance(x, torch.Tensor) != head for x, head in zip(operands, heads)):
        raise ValueError(f"attention: variant {variant.name!r} takes operands {variant.described()} (a head's: a "
                         f"tensor); got {tuple(operands)!r}")
    _refuse_untrained_operands(variant, operands)
    return variant_operator(variant)(q, k, v, causal, [x for x in operands if isinstance(x, torch.Tensor)],
                                     [float(x) for x in operands if not isinstance(x, torch.Tensor)])


def _refuse_untrained_operands(variant, operands) -> None:
    """ValueError where autograd would want the gradient of an operand that gets none (only a sink named as an
    operand trains)."""
    for x, operand in zip(operands, variant.operands):
        if (isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled()
                and operand.name != variant.sink_operand):
            raise ValueError(f"attention: variant {variant.name!r}'s operand {operand.name!r} gets no gradient (only "
                             f"a sink named as an operand trains); pass it detached")


def _trains(variant) -> bool:
    """Whether `variant`'s backward is built: its masks, score steps with their score_gradient, sinks given as an
    operand."""
    return not ((variant.sink is not None and variant.sink_operand is None)
                or (variant.score is not None and variant.score_gradient is None))


def _untrainable(variant) -> str:
    return (f"attention: variant {variant.name!r} has a sink function or a score step without a score_gradient, "
            f"whose backward is not built (masks, steps with their derivative and sinks given as an operand train)")


def variant_operator(variant):
    """The forward operator of `variant` (and its gradients' where it has a backward), registered once."""
    name = f"attention{variant.suffix}"
    with registry.lock:
        if name not in registry.custom_operators:
            registry.custom_operators[name] = _register(name, variant)
        return registry.custom_operators[name]


def _register(name: str, variant):
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, tensors: List[torch.Tensor],
            numbers: List[float]) -> Tuple[torch.Tensor, torch.Tensor]:
        return kernels_on(q.device).attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal,
                                              variant=variant, operands=_operands(variant, tensors, numbers))

    def gradients(grad: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool, tensors: List[torch.Tensor],
                  numbers: List[float]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return kernels_on(q.device).attention_backward(grad.contiguous(), q, k, v, o, lse, causal=causal,
                                                       grad_lse=grad_lse, variant=variant,
                                                       operands=_operands(variant, tensors, numbers))

    def setup(ctx, inputs, output) -> None:
        q, k, v, ctx.causal, tensors, ctx.numbers = inputs
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, *output, *tensors)

    def backward(ctx, grad_o, grad_lse):  # (the inputs' structure as torch flattens it, `not_list_of_tensor`: a
        # list holding a non-tensor is one leaf, a list of tensors a list, the empty list a list of none)
        q, k, v, o, lse, *tensors = ctx.saved_tensors
        numbers = None if ctx.numbers else []
        if grad_o is None and grad_lse is None:
            return (None,) * 4 + ([None] * len(tensors), numbers)
        grad_o = torch.zeros_like(o) if grad_o is None else grad_o
        gradients = getattr(torch.ops.mlir_tile, f"{name}_gradients")(grad_o, grad_lse, q, k, v, o, lse, ctx.causal,
                                                                       tensors, ctx.numbers)
        return (*gradients, None, _head_gradients(variant, tensors, grad_o, grad_lse, o, lse), numbers)

    def fake(q, k, v, causal, tensors, numbers):  # (`run`'s contiguous q, k, v take the dense kernels: O as q)
        return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)

    if not _trains(variant):
        return register_operator(name, run, fake=fake, backward=no_backward(_untrainable(variant)))
    register_operator(f"{name}_gradients", gradients,
                      fake=lambda grad, grad_lse, q, k, v, o, lse, causal, tensors, numbers: (
                          q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)))  # (the dense backward's)
    return register_operator(name, run, fake=fake, backward=backward, setup_context=setup)


def packed(q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q: int, max_seqlen_k: int, causal: bool, variant,
           operands, gaps: bool = False, descales=()):
    """Packed sequences' attention with `variant` (`flash.packed.PackedAttention`'s): paged where `block_table`
    is given (`keys` each sequence's count of keys), else over packed K/V rows (`keys` cu_seqlens_k; `gaps`: a
    KV cache's, its entries every other sequence, `kvcache.cache_offsets`; `descales`: an fp8 cache's, q's, k's and
    v's). Packed sequences train where the variant does (`_trains`); a cache's call that asks for a gradient is
    refused. Eager calls run it straight,
    others through its operator."""
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    if block_table is not None or gaps:
        refuse_gradients(variant, q, k, v, *tensors)
    elif not _trains(variant) and torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, *tensors)):
        raise ValueError(_untrainable(variant))
    else:
        _refuse_untrained_operands(variant, operands)
    numbers = [float(x) for x in operands if not isinstance(x, torch.Tensor)]
    arguments = (q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q, max_seqlen_k, causal, gaps, list(descales))
    if registry.plain_call(q, k, v, *tensors):
        return _packed_run(*arguments, variant, _operands(variant, tensors, numbers))
    name = f"attention_packed{variant.suffix}"
    with registry.lock:
        if name not in registry.custom_operators:
            registry.custom_operators[name] = _register_packed(name, variant)
    return registry.custom_operators[name](*arguments, tensors, numbers)


def refuse_gradients(variant, *tensors) -> None:
    """ValueError where a call of `variant` on a KV cache would be asked for a gradient."""
    if torch.is_grad_enabled() and any(x.requires_grad for x in tensors):
        raise ValueError(f"attention: variant {variant.name!r} on a KV cache has no backward (packed sequences and "
                         f"the dense form train, with masks, score steps with their score_gradient and sinks given "
                         f"as an operand); call it under torch.no_grad()")


def _packed_run(q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q, max_seqlen_k, causal, gaps, descales,
                variant, operands):
    paths = kernels_on(q.device).attention
    if paths.hopper is None:
        raise ValueError(f"attention: variants on packed sequences run on Hopper's path (sm_90), which this GPU "
                         f"({paths.library.chip}) has not")
    if block_table is not None:
        return paths.hopper.packing.paged(q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q, causal=causal,
                                          variant=variant, operands=operands, descales=descales or None)
    return paths.hopper.packing.packed(q, k, v, cu_seqlens_q, keys, max_seqlen_q, causal=causal,
                                       max_seqlen_k=max_seqlen_k, queried=cu_seqlens_q.shape[0] // 2 if gaps else None,
                                       variant=variant, operands=operands, descales=descales or None)


def _register_packed(name: str, variant):
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, keys: torch.Tensor,
            block_table: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, causal: bool, gaps: bool,
            descales: List[torch.Tensor], tensors: List[torch.Tensor],
            numbers: List[float]) -> Tuple[torch.Tensor, torch.Tensor]:
        return _packed_run(q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q, max_seqlen_k, causal, gaps,
                           descales, variant, _operands(variant, tensors, numbers))

    def fake(q, k, v, cu_seqlens_q, keys, block_table, max_seqlen_q, max_seqlen_k, causal, gaps, descales, tensors,
             numbers):
        return (q.new_empty(q.shape, dtype=torch.bfloat16 if descales else q.dtype),
                q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))

    def gradients(grad: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_k: int, causal: bool, tensors: List[torch.Tensor],
                  numbers: List[float]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return kernels_on(q.device).attention_backward.packed(
            grad.contiguous(), q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, causal=causal,
            grad_lse=grad_lse, variant=variant, operands=_operands(variant, tensors, numbers))

    def setup(ctx, inputs, output) -> None:  # (a cache's calls ask for no gradient: `packed` refuses them)
        q, k, v, cu_seqlens_q, keys, _, _, ctx.max_seqlen_k, ctx.causal, _, descales, tensors, ctx.numbers = inputs
        ctx.descales = len(descales)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, cu_seqlens_q, keys, *output, *tensors)

    def backward(ctx, grad_o, grad_lse):  # (the structure as the dense operator's `backward` gives it)
        q, k, v, cu_seqlens_q, cu_seqlens_k, o, lse, *tensors = ctx.saved_tensors
        numbers = None if ctx.numbers else []
        none = (None,) * 7 + ([None] * ctx.descales,)  # (cu_seqlens_q to gaps, the descales)
        if grad_o is None and grad_lse is None:
            return (None,) * 3 + none + ([None] * len(tensors), numbers)
        grad_o = torch.zeros_like(o) if grad_o is None else grad_o
        gradients = getattr(torch.ops.mlir_tile, f"{name}_gradients")(
            grad_o, grad_lse, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, ctx.max_seqlen_k, ctx.causal, tensors,
            ctx.numbers)
        token_batch = _token_batch(cu_seqlens_q, q.shape[0])
        return (*gradients, *none, _head_gradients(variant, tensors, grad_o, grad_lse, o, lse, token_batch), numbers)

    if not _trains(variant):
        return register_operator(name, run, fake=fake)
    register_operator(f"{name}_gradients", gradients,
                      fake=lambda grad, grad_lse, q, k, v, o, lse, cu_q, cu_k, max_k, causal, tensors, numbers: (
                          q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)))
    return register_operator(name, run, fake=fake, backward=backward, setup_context=setup)


def _token_batch(cu_seqlens_q, total_q: int):
    """Each packed token's sequence, -1 for a token outside every one."""
    from mlir_tile.kernels.flash.backward import token_sequences

    _, sequence, inside, _ = token_sequences(cu_seqlens_q, total_q)
    return torch.where(inside, sequence, -1)


def _head_gradients(variant, tensors: List[torch.Tensor], grad_o, grad_lse, o, lse, token_batch=None) -> list:
    """The gradients of the "head" operands (in their order): the sinks' where the variant's sink names one (dL/ds
    = sum over the rows of p_s (dL/dlse - D), p_s = exp(s - lse) the sink's share, D = rowsum(dO O)), summed over
    the batch for sinks given as [heads]; None for the others (ALiBi's slopes do not train). Packed sequences
    (`token_batch`: each token's sequence, -1 outside every one): lse [heads, total_q], O [total_q, heads, d]."""
    heads = [operand.name for operand in variant.operands if operand.kind == "head"]
    gradients = [None] * len(tensors)
    if variant.sink_operand is None:
        return gradients
    place = heads.index(variant.sink_operand)
    sinks = tensors[place].float()
    rows = (grad_o.float() * o.float()).sum(-1)  # (the backward's preprocessing makes D too, into statistics it
    # frees: a pass more over O and dO, for sinks that train alone)
    if token_batch is None:  # ([batch, heads, seq])
        logits = sinks.expand(*lse.shape[:2])[:, :, None]
    else:  # ([heads, total_q])
        rows = rows.T
        logits = sinks[:, None] if sinks.dim() == 1 else sinks[token_batch.clamp(min=0)].T
    if grad_lse is not None:
        rows = rows - grad_lse
    gradient = -torch.exp(logits - lse) * rows
    if token_batch is not None:  # (a token outside every sequence adds nothing: its lse is not written)
        gradient = torch.where(token_batch >= 0, gradient, 0.0)
    if token_batch is None:
        gradient = gradient.sum(-1)
        gradient = gradient.sum(0) if sinks.dim() == 1 else gradient
    elif sinks.dim() == 1:
        gradient = gradient.sum(-1)
    else:
        gradient = torch.zeros_like(sinks).index_add_(0, token_batch.clamp(min=0), gradient.T)
    gradients[place] = gradient.to(tensors[place].dtype)
    return gradients


def _operands(variant, tensors: List[torch.Tensor], numbers: List[float]) -> list:
    """The variant's operands in its order from the operator's two lists (too few: None, which the launcher
    refuses); an integer operand's number as an int."""
    tensors, numbers, operands = iter(tensors), iter(numbers), []
    for operand in variant.operands:
        x = next(tensors if operand.kind == "head" else numbers, None)
        operands.append(int(x) if operand.kind == "integer" and isinstance(x, float) and x.is_integer() else x)
    return operands
