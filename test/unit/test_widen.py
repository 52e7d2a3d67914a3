"""Widening changes how many instructions a transfer issues, never what it does: on random legal transfers the
reference model gives the same registers (loads) or shared memory (stores) for the widened transfer as for the
written one, whenever the contract accepts the widened one."""
import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from mlir_tile.contract import ContractError, parse_opcode
from mlir_tile.models.reference import emulate
from mlir_tile.testing.random_transfers import transfers
from mlir_tile.models.widen import widen_layouts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=transfers(), seed=st.integers(0, 2**32 - 1))
def test_a_widened_transfer_does_what_the_written_one_does(case, seed):
    group_rank = 1 if case.scope != "warp" else 0
    widened = widen_layouts(case.opcode, case.register_layout, case.shared_layout, group_rank)
    event("widened" if widened is not None else "nothing widens")
    assume(widened is not None)
    opcode, registers, shared = widened
    assert int(opcode.split(".x")[1][0]) > int(case.opcode.split(".x")[1][0])
    data = np.random.default_rng(seed)
    register_words = data.integers(0, 2**32, (case.threads, case.slots), dtype=np.uint32)
    shared_words = data.integers(0, 2**32, case.words, dtype=np.uint32)
    dst, src = parse_opcode(case.opcode).dst_and_src(register_words, shared_words)
    written = emulate(case.opcode, case.dst_layout, case.src_layout, dst, src, case.scope)
    new_dst, new_src = parse_opcode(opcode).dst_and_src(registers, shared)
    try:
        wide = emulate(opcode, new_dst, new_src, dst, src, case.scope)
    except ContractError as error:  # only a store whose repeats overlap may not be widened
        assert not case.is_load and all(v.rule == "store-race" for v in error.violations), error
        event("a racing store stays as written")
    else:
        np.testing.assert_array_equal(wide, written)


def test_the_spec_example_becomes_one_x4():
    from mlir_tile.algebra.layout import Layout

    opcode, registers, shared = widen_layouts("ldmatrix.sync.aligned.m8n8.x2.shared.b16",
                                              Layout.parse("(2,2,8,4):(8,2,4@laneid,1@laneid)"),
                                              Layout.parse("(2,2,8,4):(128,8,16,1)"), 0)
    assert (opcode, str(registers), str(shared)) == ("ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                                     "((2,2),8,4):((2,8),4@laneid,1@laneid)", "((2,2),8,4):((8,128),16,1)")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=transfers())
def test_widened_agrees_with_the_whole_contract(case):
    """`widened` checks only the shape and the per-coordinate rules; the whole contract on the wider layouts,
    with the same operands, must give the same verdict."""
    from mlir_tile import contract
    from mlir_tile.models.widen import widened

    transfer = contract.verdict(contract.Query.of_layouts(case.opcode, case.register_layout, case.shared_layout, register_slots=case.slots,
                                        shared_words=case.words, scope=case.scope, block_size=(case.threads, 1, 1))).require()
    layouts = widen_layouts(case.opcode, case.register_layout, case.shared_layout, transfer.group_rank)
    wide = widened(transfer)
    event("widens" if layouts is not None else "nothing widens")
    if layouts is None:
        assert wide is None
        return
    opcode, registers, shared = layouts
    order = parse_opcode(opcode).dst_and_src
    (dst_layout, src_layout), (dst, src) = order(registers, shared), order(transfer.register_operand, transfer.shared_operand)
    _, violations = contract.verdict(contract.Query(opcode=opcode, scope=case.scope, dst_layout=dst_layout, src_layout=src_layout,
                                   dst=dst, src=src, block_size=(case.threads, 1, 1)))
    assert (wide is None) == bool(violations), violations
