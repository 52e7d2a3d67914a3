"""The bank-conflict model: the counts the H200 gave for the benchmark layouts, and the property that makes the
model exact without knowing where a buffer sits (a common 16-byte shift only renames the quads)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlir_tile import contract
from mlir_tile.models.banks import matrix_wavefronts, transfer_wavefronts
from mlir_tile.testing.random_transfers import transfers


@pytest.mark.parametrize("shared, registers, opcode, per_instruction, share", [
    ("(4,8,4):(32,4,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 4, 1.0),
    ("(4,8,4):(64,8,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 8, 0.5),
    ("(4,8,4):(256,32,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 32, 0.125),
    ("Sw<3,2,3> o (4,8,4):(256,32,1)", "(4,8,4):(1,4@laneid,1@laneid)", "x4", 4, 1.0),
    ("(2,2,8,4):(128,8,16,1)", "(2,2,8,4):(8,2,4@laneid,1@laneid)", "x2", 8, 0.25),
])
def test_the_counts_the_h200_measured_and_the_bandwidth_share(shared, registers, opcode, per_instruction, share):
    """Wavefronts per instruction as ncu counted them; the predicted share of 128 B/clock is matrices over
    wavefronts (measured within 3% of it: docs/notes/benchmark-history.md)."""
    transfer = contract.verdict(contract.Query.of_layouts(f"ldmatrix.sync.aligned.m8n8.{opcode}.shared.b16", registers, shared,
                                        register_slots=16, shared_words=2048)).require()
    model = transfer_wavefronts(transfer)
    assert model.total == per_instruction * model.instructions and model.worst == per_instruction
    assert model.bandwidth_share == share


@settings(max_examples=200)
@given(rows=st.lists(st.integers(0, 4095), min_size=8, max_size=8), shift=st.integers(0, 1023))
def test_a_common_shift_does_not_change_the_count(rows, shift):
    addresses = [16 * row for row in rows]
    assert matrix_wavefronts([a + 16 * shift for a in addresses]) == matrix_wavefronts(addresses)
    assert 1 <= matrix_wavefronts(addresses) <= 8


@settings(max_examples=100, deadline=None)
@given(transfers())
def test_every_transfer_costs_at_least_one_wavefront_a_matrix(case):
    transfer = contract.verdict(contract.Query.of_layouts(case.opcode, case.register_layout, case.shared_layout, register_slots=case.slots,
                                        shared_words=case.words, scope=case.scope, block_size=(case.threads, 1, 1))).require()
    model = transfer_wavefronts(transfer)
    assert model.minimum <= model.worst <= 8 * model.minimum

