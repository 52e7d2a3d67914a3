"""The legality contract: random legal transfers pass, each single-rule mutation of one is rejected with
that rule's diagnostic, and random input yields diagnostics, never a Python exception."""
import dataclasses
import pickle
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mlir_tile import contract
from mlir_tile.algebra.layout import ThreadStride
from mlir_tile.testing.random_transfers import (RandomTransfer, random_transfer, transfers, with_misaligned_rows,
                                                with_stride)



def arguments(case: RandomTransfer, **changes):
    """contract.Query fields for a random transfer, with some replaced."""
    registers = contract.Operand("private", extent=case.slots, offset=0)
    shared = contract.Operand("shared", extent=case.words, offset=0, base_alignment=contract.aligned_for(case.shared_layout))
    values = dict(
        opcode=case.opcode, scope=case.scope,
        dst_layout=str(case.dst_layout), src_layout=str(case.src_layout),
        dst=registers if case.is_load else shared, src=shared if case.is_load else registers,
        block_size=(case.threads, 1, 1), chip="sm_90",
    )
    values.update(changes)
    return values


def rules(**kwargs) -> set:
    return {v.rule for v in contract.verdict(contract.Query(**kwargs))[1]}


def register_role(case):
    return "dst" if case.is_load else "src"


def shared_role(case):
    return "src" if case.is_load else "dst"


@settings(max_examples=300)
@given(transfers())
def test_random_legal_transfers_pass(case):
    transfer, violations = contract.verdict(contract.Query(**arguments(case)))
    assert violations == () and transfer is not None


# Each mutation breaks exactly one rule of a legal transfer; the checker must name that rule.
MUTATIONS = {
    "opcode": lambda c: dict(opcode=c.opcode.replace(".m8n8", ".m16n8")),
    "attributes": lambda c: dict(extra_attributes=("pred",)),
    "scope": lambda c: dict(scope="thread"),
    "operands": lambda c: {register_role(c): contract.Operand("shared", extent=c.slots, base_alignment=16)},
    "operands-16-bit": lambda c: {shared_role(c): contract.Operand("shared", element_bits=16, element_type="f16",
                                                                   extent=c.words, base_alignment=contract.aligned_for(c.shared_layout))},
    "shape": lambda c: {f"{register_role(c)}_layout": str(c.register_layout).replace(",8,4)", ",8,2)", 1)},
    "shared-row": lambda c: {f"{shared_role(c)}_layout": str(with_stride(c.shared_layout, -1, 2))},
    "row-alignment": lambda c: {f"{shared_role(c)}_layout": str(with_misaligned_rows(c.shared_layout))},
    "row-alignment-base": lambda c: {shared_role(c): contract.Operand("shared", extent=c.words, base_alignment=8)},
    "bounds": lambda c: {shared_role(c): contract.Operand("shared", extent=c.shared_layout.cosize - 1,
                                                         base_alignment=contract.aligned_for(c.shared_layout))},
    "register-owner": lambda c: {f"{register_role(c)}_layout": str(with_stride(c.register_layout, -2, ThreadStride(8, "laneid")))},
    "register-bounds": lambda c: {register_role(c): contract.Operand("private", extent=c.slots - 3, offset=0)},
    "participation": lambda c: dict(divergence="it is inside an scf.if whose condition depends on the thread id"),
    "participation-block": lambda c: dict(block_size=(c.threads + 16, 1, 1)),
    "target": lambda c: dict(chip="sm_80" if not c.is_load else "sm_70"),
    "layout-syntax": lambda c: {f"{shared_role(c)}_layout": str(c.shared_layout)[:-1]},
}
EXPECTED_RULE = {"operands-16-bit": "operands", "row-alignment-base": "row-alignment", "register-bounds": "bounds",
                 "participation-block": "participation"}


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@given(case=transfers())
def test_each_single_rule_mutation_is_rejected_with_that_rule(mutation, case):
    changes = MUTATIONS[mutation](case)
    if mutation == "register-bounds" and case.slots <= 3:
        changes = {register_role(case): contract.Operand("private", extent=0, offset=0)}
    found = rules(**arguments(case, **changes))
    expected = {EXPECTED_RULE.get(mutation, mutation)}
    if mutation == "row-alignment" and case.shared_layout.swizzle:
        expected.add("shared-row")  # swizzled, a row that starts off a 16-byte boundary is also torn apart
    assert expected & found, found


@settings(max_examples=30)
@given(case=transfers(), mutation=st.sampled_from(sorted(MUTATIONS)))
def test_a_contract_error_pickles_with_its_violations(case, mutation):
    """A ContractError raised in a worker process (a pool building kernels) reaches its parent with the
    same violations and message (rebuilt from its message, it had one violation per character)."""
    verdict = contract.verdict(contract.Query(**arguments(case, **MUTATIONS[mutation](case))))
    with pytest.raises(contract.ContractError) as raised:
        verdict.require()
    copy = pickle.loads(pickle.dumps(raised.value))
    assert copy.violations == raised.value.violations and str(copy) == str(raised.value)


@settings(max_examples=100)
@given(transfers())
def test_overlapping_loaded_slots_and_stored_rows_are_rejected(case):
    atom_axis = case.register_layout.rank - 3
    if case.is_load:
        assume(case.register_layout.sizes[atom_axis] > 1)  # an x1 load has one slot per repeat: nothing to overlap
        broken = with_stride(case.register_layout, atom_axis, 0)
        assert "register-overlap" in rules(**arguments(case, dst_layout=broken))
    else:
        broken = with_stride(case.shared_layout, -2, 0)
        assert "store-race" in rules(**arguments(case, dst_layout=broken))


layout_texts = st.text(alphabet="()0123456789,:@-lanidwrp x", max_size=24)
scalars = st.one_of(st.none(), st.integers(), st.text(max_size=12), st.floats(allow_nan=False))


@settings(max_examples=300)
@given(opcode=st.one_of(st.sampled_from([
           "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "stmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16"]),
           st.text(max_size=40), scalars),
       scope=st.one_of(st.sampled_from(contract.SCOPES + ("thread",)), scalars),
       dst_layout=st.one_of(layout_texts, scalars), src_layout=st.one_of(layout_texts, scalars),
       memories=st.tuples(*(st.sampled_from(["private", "shared", "global", "#foo"]),) * 2),
       bits=st.tuples(*(st.sampled_from([8, 16, 32, 64]),) * 2),
       extents=st.tuples(*(st.one_of(st.none(), st.integers(0, 600)),) * 2),
       offsets=st.tuples(*(st.one_of(st.none(), st.integers(-8, 64)),) * 2),
       alignment=st.one_of(st.none(), st.sampled_from([1, 4, 8, 16, 128])),
       block=st.one_of(st.none(), st.tuples(st.integers(1, 300), st.integers(1, 4), st.just(1))),
       chip=st.one_of(st.none(), st.sampled_from(["sm_70", "sm_80", "sm_90", "sm_90a", "gfx90a"])))
def test_random_input_gives_diagnostics_never_exceptions(opcode, scope, dst_layout, src_layout, memories, bits,
                                                         extents, offsets, alignment, block, chip):
    operands = [contract.Operand(memory, element_bits=width, element_type=f"i{width}", extent=extent, offset=offset,
                                 base_alignment=alignment)
                for memory, width, extent, offset in zip(memories, bits, extents, offsets)]
    transfer, violations = contract.verdict(contract.Query(opcode=opcode, scope=scope, dst_layout=dst_layout, src_layout=src_layout,
                                          dst=operands[0], src=operands[1], block_size=block, chip=chip))
    assert (transfer is None) == bool(violations)
    assert all(isinstance(v, contract.Violation) and v.message for v in violations)


@pytest.mark.parametrize("chip, ptx, ok", [("sm_90", None, True), ("sm_90", 78, True), ("sm_90", 60, False),
                                           ("sm_90a", 78, False), ("sm_90a", 80, True), ("sm_75", 64, False)])
def test_a_ptx_version_below_what_the_chip_and_instruction_need_is_a_target_violation(chip, ptx, ok):
    case = random_transfer(random.Random(1))
    assert case.is_load  # ldmatrix: sm_75 and PTX 6.5 or newer
    transfer, violations = contract.verdict(contract.Query(**arguments(case, chip=chip, ptx=ptx)))
    assert (transfer is not None) == ok
    if not ok:
        assert [v.rule for v in violations] == ["target"] and f"+ptx{ptx}" in str(violations[0])


@pytest.mark.parametrize("seed", range(4))
def test_unknown_chip_is_a_target_violation_naming_the_usable_chips(seed):
    case = random_transfer(random.Random(seed))
    transfer, violations = contract.verdict(contract.Query(**arguments(case, chip="sm_99")))
    assert transfer is None and [v.rule for v in violations] == ["target"]
    message = str(violations[0])
    assert "'sm_99'" in message and "sm_90, sm_90a, sm_100" in message and "sm_70" not in message


REPO = Path(__file__).resolve().parents[2]


def test_the_docs_rule_table_lists_exactly_the_rules():
    table = (REPO / "docs" / "legality-rules.md").read_text()
    documented = re.findall(r"^\| `([a-z-]+)` \|", table, re.M)
    assert sorted(documented) == sorted(rule.value for rule in contract.Rule)


@pytest.mark.parametrize("rule", list(contract.Rule), ids=str)
def test_each_rule_has_its_test_file_with_at_least_two_cases(rule):
    text = (REPO / "test" / "Transforms" / f"verify-{rule}.mlir").read_text()
    assert text.startswith(f"// [{rule}] "), "the file names its rule first"
    assert len(re.findall(rf"expected-error(?:-re)?@\S+ {{{{\[{re.escape(rule.value)}\]", text)) >= 2


@pytest.mark.parametrize("check", [c for c in contract.CHECKS if c.stage != "parse"],
                         ids=lambda c: c.function.__name__)
def test_the_verdict_runs_every_listed_check(check, monkeypatch):
    """CHECKS is the dispatch: a check that reports a probe is heard in the verdict, under its rule."""
    from mlir_tile.contract import dispatch

    probe = contract.Violation(check.rule, f"probe from {check.function.__name__}")
    replaced = tuple(dataclasses.replace(c, function=lambda *_, p=probe: [p]) if c is check else c
                     for c in contract.CHECKS)
    monkeypatch.setattr(dispatch, "CHECKS", replaced)
    transfer, violations = dispatch._verdict(contract.Query(**arguments(random_transfer(random.Random(3)))))
    assert probe in violations and transfer is None
