"""The address plan: evaluated lane by lane, every repeat's offset is the layout's own offset of the row the
lane supplies (swizzle and static offset included), for random transfers; and each form is chosen where it
is exact and cheapest."""
from hypothesis import given, settings

from mlir_tile import contract
from mlir_tile.address_plan import address_plan, offsets
from mlir_tile.testing.random_transfers import transfers


def checked(opcode, registers, shared, slots, words, offset=0):
    query = contract.Query.of_layouts(opcode, registers, shared, register_slots=slots, shared_words=words)
    operand = contract.Operand("shared", extent=words, offset=offset,
                               base_alignment=contract.aligned_for(shared))
    dst, src = (query.dst, operand) if opcode.startswith("ld") else (operand, query.src)
    return contract.verdict(contract.Query(query.opcode, query.scope, query.dst_layout, query.src_layout, dst, src)).require()


@settings(max_examples=300, deadline=None)
@given(transfers())
def test_the_plan_addresses_every_lanes_row(case):
    transfer = contract.verdict(contract.Query.of_layouts(
        case.opcode, case.register_layout, case.shared_layout, register_slots=case.slots, shared_words=case.words,
        scope=case.scope, block_size=(case.threads, 1, 1))).require()
    plan = address_plan(transfer)
    count = transfer.opcode.count
    expected = [[transfer.shared_offset(warp, repeat, (lane // 8) % count, lane % 8)
                 for warp in range(transfer.scope.warps) for lane in range(32)] for repeat in transfer.repeats()]
    assert offsets(plan, transfer) == expected
    assert [r.slots for r in plan.repeats] == [tuple(transfer.register_slot(repeat, m) for m in range(count))
                                               for repeat in transfer.repeats()]


def test_unswizzled_repeats_are_immediates_with_the_static_offset():
    transfer = checked("ldmatrix.sync.aligned.m8n8.x2.shared.b16", "(2,2,8,4):(8,2,4@laneid,1@laneid)",
                       "(2,2,8,4):(128,8,16,1)", 12, 512, offset=8)
    plan = address_plan(transfer)
    assert plan.forms == ("plain", "plain") and [r.immediate for r in plan.repeats] == [8, 136]
    assert [r.slots for r in plan.repeats] == [(0, 2), (8, 10)]


def test_each_swizzled_form_where_it_is_exact():
    # Sw<2,2,3> over rows of 8 words (lane parts 0..120 in steps of 8, and 64 for matrix 1): repeat 0 is the
    # swizzled lane part itself; 4 words on touch only zero bits of every lane part (an xor); 8 and 12 words
    # on carry into the swizzle's bits (add, then swizzle).
    transfer = checked("ldmatrix.sync.aligned.m8n8.x2.shared.b16", "(4,2,8,4):(2,1,4@laneid,1@laneid)",
                       "Sw<2,2,3> o (4,2,8,4):(4,64,8,1)", 16, 4096)
    plan = address_plan(transfer)
    assert plan.forms == ("shift", "xor", "swizzle", "swizzle")
    assert [r.operand for r in plan.repeats] == [0, transfer.shared.swizzle(4), 8, 12]
    assert offsets(plan, transfer) == [[transfer.shared_offset(0, (r,), (lane // 8) % 2, lane % 8) for lane in range(32)]
                                       for r in range(4)]
