"""The bank-conflict model: the counts the H200 gave for the benchmark layouts, and the property that makes the
model exact without knowing where a buffer sits (a common 16-byte shift only renames the quads)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile import contract
from mlir_tile.banks import matrix_wavefronts, transfer_wavefronts
from mlir_tile.testing.random_transfers import transfers


@pytest.mark.parametrize("shared, registers, opcode, per_instruction", [
    ("(4,8,4):(32,4,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 4),
    ("(4,8,4):(64,8,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 8),
    ("(4,8,4):(256,32,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 32),
    ("Sw<3,2,3> o (4,8,4):(256,32,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 4),
    ("(2,2,8,4):(128,8,16,1)", "(2,2,8,4):(8,2,4@laneid,1@laneid)", "x2", 8),
])
def test_the_counts_the_h200_measured(shared, registers, opcode, per_instruction):
    transfer = contract.require_layouts(f"ldmatrix.sync.aligned.m8n8.{opcode}.shared.b16", registers, shared,
                                        register_slots=16, shared_words=2048)
    model = transfer_wavefronts(transfer)
    assert model.total == per_instruction * model.instructions and model.worst == per_instruction


@settings(max_examples=200)
@given(rows=st.lists(st.integers(0, 4095), min_size=8, max_size=8), shift=st.integers(0, 1023))
def test_a_common_shift_does_not_change_the_count(rows, shift):
    addresses = [16 * row for row in rows]
    assert matrix_wavefronts([a + 16 * shift for a in addresses]) == matrix_wavefronts(addresses)
    assert 1 <= matrix_wavefronts(addresses) <= 8


@settings(max_examples=100, deadline=None)
@given(transfers())
def test_every_transfer_costs_at_least_one_wavefront_a_matrix(case):
    transfer = contract.require_layouts(case.opcode, case.register_layout, case.shared_layout, register_slots=case.slots,
                                        shared_words=case.words, scope=case.scope, block_size=(case.threads, 1, 1))
    model = transfer_wavefronts(transfer)
    assert model.minimum <= model.worst <= 8 * model.minimum


@pytest.mark.parametrize("shared, registers, opcode, share", [
    ("(4,8,4):(32,4,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 1.0),
    ("(4,8,4):(64,8,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 0.5),
    ("(2,2,8,4):(128,8,16,1)", "(2,2,8,4):(8,2,4@laneid,1@laneid)", "x2", 0.25),
    ("(4,8,4):(256,32,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 0.125),
])
def test_the_bandwidth_share_is_matrices_over_wavefronts(shared, registers, opcode, share):
    transfer = contract.require_layouts(f"ldmatrix.sync.aligned.m8n8.{opcode}.shared.b16", registers, shared,
                                        register_slots=16, shared_words=2048)
    assert transfer_wavefronts(transfer).bandwidth_share == share
