"""The address plan: evaluated lane by lane, every repeat's offset is the layout's own offset of the row the
lane supplies (swizzle and static offset included), for random transfers; and each form is chosen where it
is exact and cheapest."""
from hypothesis import given, settings

from mlir_tile import contract
from mlir_tile.models.address_plan import address_plan, offsets
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


def test_the_xor_form_leaves_whole_rows_to_the_immediate():
    # V's transfer in attention at d 128 (a 64 x 128 tile, Sw<3,2,4> over rows of 64 words): its repeats step 8
    # words along a row and 16 rows down (1024 words). Sw<3,2,4> xors bits 2-4 of the word offset with bits
    # 6-8: a column step of 8, 16 or 24 words is an xor, one of 32 words (bit 5) and the rows are not, so they
    # go to the immediate and the 32 repeats take 3 xor'd registers and the lane's own
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.tiling.tiled import tiled_mma_m16n8k16

    tile = Layout.parse("Sw<3,2,4> o (64,64):(64,1)")
    operand = tiled_mma_m16n8k16((4, 1), (64, 128, 64), Layout.parse("(64,32):(32,1)"), tile,
                                 Layout.parse("(64,64):(64,1)"), "kn").b
    transfer = contract.verdict(contract.Query.of_layouts(
        operand.opcode, operand.whole.registers, operand.whole.shared, register_slots=operand.whole.slots,
        shared_words=tile.cosize, scope="cta", block_size=(128, 1, 1))).require()
    plan = address_plan(transfer)
    xors = [r for r in plan.repeats if r.form == "xor"]
    assert plan.forms.count("shift") == 4 * 2 and len(xors) == 4 * 6  # 4 k16 blocks x 8 n16 pairs
    assert sorted({r.operand for r in xors}) == [8, 16, 24]  # not one per row and column: 24 of them
    assert {r.immediate for r in plan.repeats} == {row + column for row in (0, 1024, 2048, 3072) for column in (0, 32)}
    assert offsets(plan, transfer) == [[transfer.shared_offset(warp, repeat, (lane // 8) % 4, lane % 8)
                                        for warp in range(4) for lane in range(32)] for repeat in transfer.repeats()]
