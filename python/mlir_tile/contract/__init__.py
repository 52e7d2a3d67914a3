"""The legality contract of `tile.matrix_transfer`, in pure Python (no MLIR).

Every sentence of the specification's "Legality conditions" is one `Rule`, checked by the functions that
`CHECKS` lists for it: `instruction` (attributes, opcode, scope, participation, layout text, target),
`operands`, `shape`, `registers` and `shared` (the per-coordinate rules). A `Query` holds everything a
transfer is judged by; `verdict(query)` returns the `Verdict`: every violation, and the checked `Transfer`
when there is none. The verifier pass, the lowering and the Python builder build their query through one
adapter (`mlir_tile.analysis.adapter`), so they cannot disagree; the reference emulator and the benchmarks
start from `Query.of_layouts`. Each rejection names its rule, the offending coordinate or value and a fix.
"""
from mlir_tile.contract.model import (ATTRIBUTES, MAX_LOCAL_BYTES, MAX_REGISTERS, ROW_BYTES, ROWS, SCOPES,
                                      SUPPORTED_OPCODES, WARP_SIZE, WARPGROUP_WARPS, WORD_BYTES, WORDS,
                                      ContractError, Opcode, Operand, Query, Rule, Scope, Transfer, Violation,
                                      aligned_for, parse_opcode)
from mlir_tile.contract.shape import check_shape
from mlir_tile.contract.dispatch import CHECKS, RULE_CHECKS, Check, Verdict, check_transfer, verdict

__all__ = [
    "ATTRIBUTES", "MAX_LOCAL_BYTES", "MAX_REGISTERS", "ROW_BYTES", "ROWS", "SCOPES", "SUPPORTED_OPCODES",
    "WARP_SIZE", "WARPGROUP_WARPS", "WORD_BYTES", "WORDS", "aligned_for", "ContractError", "Opcode", "Operand", "Query", "Rule",
    "Scope", "Transfer", "Violation", "parse_opcode", "check_shape", "CHECKS", "RULE_CHECKS", "Check", "Verdict",
    "check_transfer", "verdict",
]
