"""One verdict (passes/adapter.py): the builder and the verifier pass judge the same transfer alike. Each
transfer is built twice in Python, once through the checking builder (its ContractError is the builder's
verdict) and once unchecked; the unchecked module is printed, parsed back and verified by the pass (its
diagnostics are the pass's verdict). Legal transfers and each illegal class, divergence included."""
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from mlir import ir

from mlir_tile.builder import Kernel, transfer
from mlir_tile.contract import ContractError, aligned_for
from mlir_tile.algebra.layout import ThreadStride
from mlir_tile.compiler.diagnostics import PipelineFailure
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.testing.random_transfers import (RandomTransfer, random_transfer, transfers, with_misaligned_rows,
                                                with_stride)
from mlir_tile.tools.driver import Session

SESSION = Session()
OP_PREFIX = "'tile.matrix_transfer' op "


# Each class changes what is built: (kernel keyword changes, layout changes, how the transfer is placed).
ILLEGAL_CLASSES = {
    "legal": lambda c: {},
    "divergence": lambda c: {"divergent": True},
    "scope": lambda c: {"scope": "thread"},
    "opcode": lambda c: {"opcode": c.opcode.replace(".m8n8", ".m16n8")},
    "shape": lambda c: {"register_layout": str(c.register_layout).replace(",8,4)", ",8,2)", 1)},
    "shared-row": lambda c: {"shared_layout": with_stride(c.shared_layout, -1, 2)},
    "row-alignment": lambda c: {"shared_layout": with_misaligned_rows(c.shared_layout)},
    "row-alignment-base": lambda c: {"alignment": 8},
    "bounds": lambda c: {"words": c.shared_layout.cosize - 1},
    "register-owner": lambda c: {"register_layout": with_stride(c.register_layout, -2, ThreadStride(8, "laneid"))},
    "participation-block": lambda c: {"block": c.threads + 16},
    "target": lambda c: {"chip": "sm_80" if not c.is_load else "sm_75"},  # sm_75: its PTX 6.3 lacks ldmatrix
    "layout-syntax": lambda c: {"shared_layout": str(c.shared_layout)[:-1]},
}


def build(case: RandomTransfer, check: bool, divergent=False, scope=None, opcode=None, register_layout=None,
          shared_layout=None, alignment=None, words=None, block=None, chip="sm_90"):
    """The case's kernel with its transfer; returns (module, the builder's violations or [])."""
    threads = block or case.threads
    with Kernel("k", [], block=(threads, 1, 1), chip=chip, context=ir.Context()) as k:
        sm = k.shared("sm", words or case.words, alignment=alignment or aligned_for(shared_layout or case.shared_layout))
        registers = k.registers(case.slots)
        register_layout = register_layout or case.register_layout
        shared_layout = shared_layout or case.shared_layout
        dst, src = (registers, sm) if case.is_load else (sm, registers)
        dst_layout, src_layout = (register_layout, shared_layout) if case.is_load else (shared_layout, register_layout)
        arguments = dict(dst_layout=dst_layout, src_layout=src_layout, scope=scope or case.scope, check=check)
        violations = []
        with (k.loop(0, k.thread_id()) if divergent else _nothing()):
            try:
                transfer(opcode or case.opcode, dst, src, **arguments)
            except ContractError as error:
                violations = [str(v) for v in error.violations]
    return k.module, violations


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def without_places(messages: list[str]) -> list[str]:
    """The messages without the places they name (`(at built.mlir:10:7)`): the parsed text and the Python
    lines that built the IR are different places for the same op."""
    return sorted(re.sub(r" \(at [^()]*:\d+:\d+\)", "", m) for m in messages)


def pass_verdict(module) -> list[str]:
    parsed = SESSION.parse(str(module), "built.mlir")
    try:
        run_pipeline(parsed, ["tile-verify-matrix-transfer"])
    except PipelineFailure as failure:
        return [d.message.removeprefix(OP_PREFIX) for d in failure.diagnostics if d.severity == "error"]
    return []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize("illegal_class", sorted(ILLEGAL_CLASSES))
@given(case=transfers())
def test_builder_and_pass_give_the_same_verdict(illegal_class, case):
    changes = ILLEGAL_CLASSES[illegal_class](case)
    _, builder_verdict = build(case, check=True, **changes)
    module, unchecked = build(case, check=False, **changes)
    assert unchecked == []
    verdict = pass_verdict(module)
    assert without_places(builder_verdict) == without_places(verdict)
    assert bool(verdict) == (illegal_class != "legal"), verdict


def test_a_rejected_transfer_is_not_left_in_the_builders_ir():
    case = random_transfer(random.Random(3))
    module, violations = build(case, check=True, divergent=True)
    assert violations and violations[0].startswith("[participation]")
    assert "tile.matrix_transfer" not in str(module)
