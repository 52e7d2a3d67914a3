"""The reference model: hand-checked cases from the ISA's fragment layout, the specification's table, and
the lowering's actual code (interpreted per lane) against the model on random legal transfers."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlir import ir

from mlir_tile.contract import ContractError
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.testing.random_transfers import transfers
from mlir_tile.models.reference import emulate, ldmatrix_warp, stmatrix_warp
from mlir_tile.tools.driver import Session
from test_verifier_pass import kernel_text

LD1 = "ldmatrix.sync.aligned.m8n8.x1.shared.b16"
REG1 = "(1,8,4):(0,4@laneid,1@laneid)"
ROWS1 = "(1,8,4):(0,4,1)"


def b16_matrix_words(base=0):
    """Shared words holding an 8x8 b16 matrix whose element (r, c) is base + 8r + c, rows contiguous."""
    return np.array([(base + 8 * r + 2 * w) | ((base + 8 * r + 2 * w + 1) << 16) for r in range(8) for w in range(4)],
                    dtype=np.uint32)


def test_x1_lane_receives_row_lane_div_4_columns_2_lane_mod_4():
    out = emulate(LD1, REG1, ROWS1, np.zeros((32, 1), np.uint32), b16_matrix_words())
    for lane in range(32):
        row, column = lane // 4, 2 * (lane % 4)
        assert out[lane, 0] == (8 * row + column) | ((8 * row + column + 1) << 16)
    assert out[5, 0] == 10 | (11 << 16)  # lane 5: row 1, columns 2 and 3


def test_x1_trans_lane_receives_a_column_pair():
    out = emulate(LD1.replace("x1", "x1.trans"), REG1, ROWS1, np.zeros((32, 1), np.uint32), b16_matrix_words())
    # lane 5: elements (2, 1) = 17 and (3, 1) = 25 of the stored matrix
    assert out[5, 0] == 17 | (25 << 16)
    for lane in range(32):
        k, j = 2 * (lane % 4), lane // 4
        assert out[lane, 0] == (8 * k + j) | ((8 * (k + 1) + j) << 16)


def test_x4_matrix_i_is_read_from_the_rows_lanes_8i_to_8i_plus_7_provide():
    shared = np.concatenate([b16_matrix_words(base=64 * i) for i in range(4)])
    out = emulate("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "(4,8,4):(1,4@laneid,1@laneid)", "(4,8,4):(32,4,1)",
                  np.zeros((32, 4), np.uint32), shared)
    for i in range(4):
        assert out[0, i] == (64 * i) | ((64 * i + 1) << 16)


def test_only_the_first_8N_lanes_addresses_are_read():
    shared = b16_matrix_words()
    addresses = [4 * (l % 8) for l in range(8)] + [10_000] * 24  # lanes 8..31: nonsense, never used by x1
    words = ldmatrix_warp(1, False, addresses, shared)
    assert words[31][0] == (8 * 7 + 6) | ((8 * 7 + 7) << 16)


def test_stmatrix_inverts_ldmatrix_with_and_without_trans():
    rng = np.random.default_rng(1)
    registers = rng.integers(0, 2**32, (32, 4), dtype=np.uint32)
    for trans in ("", ".trans"):
        shared = emulate(f"stmatrix.sync.aligned.m8n8.x4{trans}.shared.b16", "(4,8,4):(32,4,1)",
                         "(4,8,4):(1,4@laneid,1@laneid)", np.zeros(128, np.uint32), registers)
        back = emulate(f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16", "(4,8,4):(1,4@laneid,1@laneid)",
                       "(4,8,4):(32,4,1)", np.zeros((32, 4), np.uint32), shared)
        np.testing.assert_array_equal(back, registers)


def test_trans_store_writes_the_transposed_b16_image():
    words = [[(lane * 4 + 0) | ((lane * 4 + 1) << 16)] for lane in range(32)]
    shared = np.zeros(32, np.uint32)
    stmatrix_warp(1, True, [4 * r for r in range(8)] * 4, words, shared)
    # register element (row j, column 2w+h) of lane 4j+w goes to shared element (2w+h, j)
    image = np.array([[int(shared[4 * r + c // 2]) >> (16 * (c % 2)) & 0xFFFF for c in range(8)] for r in range(8)])
    for lane in range(32):
        j, w = lane // 4, lane % 4
        assert image[2 * w, j] == lane * 4 and image[2 * w + 1, j] == lane * 4 + 1


def test_untouched_slots_and_words_keep_their_values():
    registers = np.full((32, 12), 7, np.uint32)
    out = emulate("ldmatrix.sync.aligned.m8n8.x2.shared.b16", "(2,2,8,4):(8,2,4@laneid,1@laneid)",
                  "(2,2,8,4):(128,8,16,1)", registers, np.arange(256, dtype=np.uint32))
    assert set(np.flatnonzero(out[0] != 7)) <= {0, 2, 8, 10}
    assert (out[:, [1, 3, 4, 5, 6, 7, 9, 11]] == 7).all()


def test_spec_table():
    import seed_example

    x = seed_example.inputs()
    np.testing.assert_array_equal(seed_example.emulated_table(x), seed_example.expected_table(x))


def test_illegal_input_raises_value_error_with_the_contract_message():
    with pytest.raises(ValueError, match=r"\[row-alignment\] src_layout \(4,8,4\):\(32,6,1\)") as error:
        emulate("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "(4,8,4):(1,4@laneid,1@laneid)", "(4,8,4):(32,6,1)",
                np.zeros((32, 4), np.uint32), np.zeros(512, np.uint32))
    assert isinstance(error.value, ContractError)
    with pytest.raises(ValueError, match="registers need 128 threads, got 32"):
        emulate("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)",
                "(4,4,8,4):(128,32,4,1)", np.zeros((32, 4), np.uint32), np.zeros(512, np.uint32), scope="warpgroup")


# ----- the lowering's own code, interpreted lane by lane -----
class LoweredTransfers:
    """Runs the straight-line code tile-lower-matrix-transfer emits, for one thread at a time: collects
    each ldmatrix/stmatrix's address (in shared words) and the register slots its words go to / come from."""

    ARITH = {"arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b, "arith.addi": lambda a, b: a + b,
             "arith.muli": lambda a, b: a * b, "arith.shli": lambda a, b: a << b, "arith.shrui": lambda a, b: a >> b,
             "arith.xori": lambda a, b: a ^ b, "arith.divui": lambda a, b: a // b, "arith.remui": lambda a, b: a % b}

    def __init__(self, kernel: ir.Operation):
        self.body = list(kernel.regions[0].blocks[0].operations)

    def run(self, thread: int):
        values, instructions = {}, []
        for op in (o.operation for o in self.body):
            name = op.name
            operands = [values.get(v) for v in op.operands]
            if name == "gpu.lane_id":
                values[op.result] = thread % 32
            elif name == "gpu.thread_id":
                values[op.result] = thread
            elif name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
                values[op.result] = ir.IntegerAttr(op.attributes["value"]).value
            elif name == "arith.index_cast":
                values[op.result] = operands[0]
            elif name in self.ARITH:
                values[op.result] = self.ARITH[name](*operands)
            elif name == "builtin.unrealized_conversion_cast":
                values[op.result] = "descriptor"
            elif name == "llvm.extractvalue" and operands[0] == "descriptor":
                values[op.result] = 0  # the aligned base is shared word 0 and the static offset is 0 here
            elif name == "llvm.getelementptr":
                constant = list(ir.DenseI32ArrayAttr(op.attributes["rawConstantIndices"]))[0]
                values[op.result] = operands[0] + (operands[1] if len(operands) > 1 else constant)
            elif name in ("nvvm.ldmatrix", "nvvm.stmatrix"):
                record = {"address": operands[0], "slots": {}, "op": op}
                instructions.append(record)
                if name == "nvvm.stmatrix":
                    record["slots"] = {i: v for i, v in enumerate(operands[1:])}
                else:
                    values[op.result] = record
            elif name == "llvm.extractvalue":
                values[op.result] = (operands[0], list(ir.DenseI64ArrayAttr(op.attributes["position"]))[0])
            elif name == "memref.store" and isinstance(operands[0], (tuple, dict)):
                record, index = operands[0] if isinstance(operands[0], tuple) else (operands[0], 0)  # .x1: an i32
                record["slots"][index] = operands[2]
            elif name == "memref.load":
                values[op.result] = operands[1]  # the slot index stands for the register's value
        return instructions


def run_lowered(case, registers, shared, view_offset=0):
    """The lowered transfer run lane by lane on `shared` (the whole buffer; the transfer's memref a subview
    `view_offset` words in, reaching the buffer's end)."""
    session = Session()
    module = session.parse(kernel_text(f'"{case.opcode}"', f'"{case.scope}"', f'#tile.layout<"{case.dst_layout}">',
                                       f'#tile.layout<"{case.src_layout}">', slots=case.slots,
                                       words=len(shared) - view_offset, store=not case.is_load, threads=case.threads,
                                       view_offset=view_offset, buffer_words=len(shared)), "case.mlir")
    run_pipeline(module, ["tile-verify-matrix-transfer", "tile-lower-matrix-transfer"])
    kernel = module.regions[0].blocks[0].operations[0].regions[0].blocks[0].operations[1]
    program = LoweredTransfers(kernel)
    per_thread = [program.run(thread) for thread in range(case.threads)]
    registers, shared = registers.copy(), shared.copy()
    count = int(case.opcode.split(".x")[1][0])
    for warp in range(case.threads // 32):
        lanes = range(32 * warp, 32 * warp + 32)
        for position in range(len(per_thread[lanes[0]])):
            records = [per_thread[t][position] for t in lanes]
            addresses = [r["address"] for r in records]
            if case.is_load:
                words = ldmatrix_warp(count, ".trans" in case.opcode, addresses, shared)
                for lane, thread in enumerate(lanes):
                    for i in range(count):
                        registers[thread, records[lane]["slots"][i]] = words[lane][i]
            else:
                words = [[int(registers[t, records[lane]["slots"][i]]) for i in range(count)] for lane, t in enumerate(lanes)]
                stmatrix_warp(count, ".trans" in case.opcode, addresses, words, shared)
    return registers, shared


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=transfers(), seed=st.integers(0, 2**32 - 1), view_offset=st.sampled_from([0, 0, 4, 8, 36, 100, 252]))
def test_lowered_code_computes_what_the_model_computes(case, seed, view_offset):
    """Also through a subview at a static offset, which enters a swizzle (the view reaches the buffer's end,
    1,024 words past the layout's cosize: room for a swizzled row beyond it)."""
    data = np.random.default_rng(seed)
    registers = data.integers(0, 2**32, (case.threads, case.slots), dtype=np.uint32)
    shared = data.integers(0, 2**32, case.words + (view_offset + 1024 if view_offset else 0), dtype=np.uint32)
    lowered_registers, lowered_shared = run_lowered(case, registers, shared, view_offset)
    if case.is_load:
        expected = emulate(case.opcode, case.dst_layout, case.src_layout, registers, shared, case.scope, view_offset)
        np.testing.assert_array_equal(lowered_registers, expected)
    else:
        expected = emulate(case.opcode, case.dst_layout, case.src_layout, shared, registers, case.scope, view_offset)
        np.testing.assert_array_equal(lowered_shared, expected)
