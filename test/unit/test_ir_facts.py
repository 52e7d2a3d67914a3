"""The proofs the builder relies on for vector widths and planned addresses (passes/ir_facts.py): upper bounds
of thread-derived indices, power-of-two multiples through xor/or/shift/remainder/induction variables, the
alignment an argument declares, and an access's alignment through views. Each is the largest fact that is
true, and nothing more."""
import pytest
from mlir import ir

from mlir_tile.analysis.ir_facts import access_alignment, argument_alignment, upper_bound, value_multiple

KERNEL = """
gpu.module @m {{
  gpu.func @k(%data: memref<1024xf32> {{llvm.align = 16 : i64}}, %plain: memref<1024xf32>, %n: index) kernel
      attributes {{known_block_size = array<i32: 128, 1, 1>}} {{
    %t = gpu.thread_id x
    %l = gpu.lane_id
    {body}
    gpu.return
  }}
}}
"""


def facts(body: str) -> dict:
    """%t, %l, the arguments, and %r: the body's last result (MLIR keeps no SSA names)."""
    context = ir.Context()
    module = ir.Module.parse(KERNEL.format(body=body), context)
    function = module.body.operations[0].regions[0].blocks[0].operations[0]
    block = function.regions[0].blocks[0]
    operations = list(block.operations)
    named = dict(zip(("data", "plain", "n"), block.arguments))
    named["t"], named["l"] = operations[0].results[0], operations[1].results[0]
    results = [op.results[0] for op in operations[:-1] if len(op.results)]
    named["r"] = results[-1]
    named["_keep"] = (context, module)  # the values live as long as their context
    return named


@pytest.mark.parametrize("body, name, bound", [
    ("", "t", 127),  # known_block_size
    ("", "l", 31),
    ("%c8 = arith.constant 8 : index\n%r = arith.divui %t, %c8 : index", "r", 15),
    ("%c8 = arith.constant 8 : index\n%r = arith.remui %n, %c8 : index", "r", 7),
    ("%c64 = arith.constant 64 : index\n%r = arith.muli %t, %c64 : index", "r", 127 * 64),
    ("%c3 = arith.constant 3 : index\n%r = arith.shrui %t, %c3 : index", "r", 15),
    ("%c56 = arith.constant 56 : index\n%r = arith.andi %n, %c56 : index", "r", 56),
    ("%r = arith.xori %t, %l : index", "r", 127),
    ("%r = arith.addi %t, %l : index", "r", 158),
    ("%r = arith.subi %t, %l : index", "r", None),  # a difference may wrap: no bound
    ("", "n", None),  # an argument: anything
])
def test_upper_bounds_of_thread_derived_indices(body, name, bound):
    named = facts(body)  # held: its values live as long as their module
    assert upper_bound(named[name]) == bound


@pytest.mark.parametrize("body, name, multiple", [
    ("%c8 = arith.constant 8 : index\n%r = arith.muli %n, %c8 : index", "r", 8),
    ("%c8 = arith.constant 8 : index\n%a = arith.muli %n, %c8 : index\n%c16 = arith.constant 16 : index\n"
     "%b = arith.muli %t, %c16 : index\n%r = arith.xori %a, %b : index", "r", 8),
    ("%c32 = arith.constant 32 : index\n%a = arith.muli %n, %c32 : index\n%c2 = arith.constant 2 : index\n"
     "%r = arith.shrui %a, %c2 : index", "r", 8),
    ("%c32 = arith.constant 32 : index\n%a = arith.muli %n, %c32 : index\n%c4 = arith.constant 4 : index\n"
     "%r = arith.divui %a, %c4 : index", "r", 8),
    ("%c32 = arith.constant 32 : index\n%a = arith.muli %n, %c32 : index\n%c3 = arith.constant 3 : index\n"
     "%r = arith.divui %a, %c3 : index", "r", 1),  # not a power of two: nothing survives
    ("%c4 = arith.constant 4 : index\n%a = arith.muli %t, %c4 : index\n%c64 = arith.constant 64 : index\n"
     "%r = arith.remui %a, %c64 : index", "r", 4),
    ("%c16 = arith.constant 16 : index\n%a = arith.muli %t, %c16 : index\n%c8 = arith.constant 8 : index\n"
     "%r = arith.remui %a, %c8 : index", "r", 8),  # x mod 8 of a multiple of 16 is 0: a multiple of 8 at least
    ("%c8 = arith.constant 8 : index\n%a = arith.muli %n, %c8 : index\n%c32 = arith.constant 32 : index\n"
     "%b = arith.muli %t, %c32 : index\n%r = arith.minsi %a, %b : index", "r", 8),  # one of the two: both's
    ("%c8 = arith.constant 8 : index\n%a = arith.muli %n, %c8 : index\n%c0 = arith.constant 0 : index\n"
     "%r = arith.maxsi %a, %c0 : index", "r", 8),  # 0 is a multiple of anything
    ("%c8 = arith.constant 8 : index\n%a = arith.muli %n, %c8 : index\n%c4 = arith.constant 4 : index\n"
     "%r = arith.maxui %a, %c4 : index", "r", 4),
    ("%c8 = arith.constant 8 : index\n%a = arith.muli %n, %c8 : index\n%c2 = arith.constant 2 : index\n"
     "%p = arith.cmpi ult, %t, %l : index\n%r = arith.select %p, %a, %c2 : index", "r", 2),
])
def test_power_of_two_multiples(body, name, multiple):
    named = facts(body)
    assert value_multiple(named[name]) == multiple


def test_an_induction_variable_is_its_bounds_and_steps_multiple():
    context = ir.Context()
    module = ir.Module.parse("""
    func.func @f(%n: index) {
      %c8 = arith.constant 8 : index
      %c24 = arith.constant 24 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c8 to %n step %c24 { scf.yield }
      scf.for %j = %c1 to %n step %c24 { scf.yield }
      return
    }""", context)
    loops = [op for op in module.body.operations[0].regions[0].blocks[0].operations if op.name == "scf.for"]
    assert [value_multiple(loop.regions[0].blocks[0].arguments[0]) for loop in loops] == [8, 1]


def test_an_argument_declares_its_alignment_and_accesses_inherit_it():
    quad = facts("%c4 = arith.constant 4 : index\n%r = arith.muli %t, %c4 : index")
    past = facts("%c4 = arith.constant 4 : index\n%q = arith.muli %t, %c4 : index\n"
                 "%c2 = arith.constant 2 : index\n%r = arith.addi %q, %c2 : index")
    assert argument_alignment(quad["data"]) == 16 and argument_alignment(quad["plain"]) is None
    assert access_alignment(quad["data"], [quad["r"]]) == 16  # 4 floats a step on a 16-byte base
    assert access_alignment(past["data"], [past["r"]]) == 8  # 2 floats past it
    assert access_alignment(quad["plain"], [quad["r"]]) is None  # nothing declared: nothing proven
