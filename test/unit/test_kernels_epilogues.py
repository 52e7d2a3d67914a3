"""mlir_tile/kernels/epilogues.py without a GPU: an epilogue's arithmetic and loads in the IR it emits (loads
clamped into the matrix, operands by kind), compositions in order, `selectable`'s arms, the fingerprint
that names built kernels, and the errors a user gets for a malformed epilogue. Their values on the GPU:
test_kernels_ops_gpu.py."""
import pytest
from mlir import ir

from mlir_tile.builder import Global, Kernel
from mlir_tile.compiler.compile import compile_to_ptx
from mlir_tile.kernels import epilogues
from mlir_tile.kernels.epilogues import Choice, Epilogue, Operand, epilogue, maximum
from mlir_tile.kernels.common import for_each_arm


def applied(chosen, extra_parameters):
    """A kernel that applies `chosen` (an Epilogue or a Choice, as the GEMM does: `gemm.for_each_arm`) to out[0]
    at (row 5, column 7) of an m x n C, its operands after m, n."""
    with Kernel("k", [Global("f32"), "index", "index", *extra_parameters], block=(32, 1, 1), context=ir.Context()) as k:
        out, m, n, *extras = k.arguments
        value = k.load(out, [0])
        for_each_arm(k, chosen, extras, (m, n), lambda finish: k.store(finish(value, k.index(5), k.index(7)), out, [0]))
    return k.module


def test_bias_reads_its_column_clamped_into_n_and_adds_it_in_fp32(filecheck):
    filecheck(str(applied(epilogues.bias, [Global("bf16")])), """
    CHECK: %[[LAST:.*]] = arith.subi %arg2, %{{.*}} : index
    CHECK: %[[COLUMN:.*]] = arith.minui %{{.*}}, %[[LAST]] : index
    CHECK: %[[B:.*]] = memref.load %arg3[%[[COLUMN]]] : memref<2147483647xbf16>
    CHECK: %[[WIDE:.*]] = arith.extf %[[B]] : bf16 to f32
    CHECK: arith.addf %{{.*}}, %[[WIDE]] : f32
    """)


def test_a_residual_is_read_at_row_times_n_plus_column():
    text = str(applied(epilogues.residual_add, [Global("f16")]))
    assert text.count("arith.minui") == 2 and "arith.muli" in text and "memref<2147483647xf16>" in text


def test_chains_apply_in_order_and_lower_to_ptx():
    chained = epilogues.chain(True, "gelu_tanh", True)
    assert chained.name == "bias+gelu_tanh+residual_add"
    assert [o.name for o in chained.operands] == ["bias", "residual"]
    ptx = compile_to_ptx(applied(chained, [Global("bf16"), Global("bf16")]))
    assert ptx.count("ex2.approx.ftz.f32") == 1 and ptx.count("ld.global") == 3  # out, bias, residual
    assert ptx.count("rcp.approx.ftz.f32") == 1 and "div.rn" not in ptx  # sigmoid's reciprocal
    # one object for the same parts: the launcher's plans are keyed by the epilogue, whose function `then` makes
    # anew (each call of bias + an activation had been a new plan, kept forever)
    assert epilogues.chain(True, "gelu_tanh", True) is chained and epilogues.chain(True, "silu") == epilogues.chain(
        True, "silu") != epilogues.chain(True, "relu")


def test_selectable_branches_once_per_arm_and_lowers_to_ptx(filecheck):
    """One branch a thread per arm (activation x residual), the bias a load at element 0 where there is none."""
    module = applied(epilogues.selectable, [Global("bf16"), Global("bf16"), "index", "index"])
    filecheck(str(module), """
    CHECK-COUNT-8: scf.if
    CHECK-NOT: scf.if
    """)
    ptx = compile_to_ptx(module)
    assert ptx.count("ex2.approx.ftz.f32") == 4 and ptx.count("rcp.approx.ftz.f32") == 4  # gelu's, silu's, twice
    assert epilogues.selection(None, "silu", None) == (None, None, 0, 3)
    assert epilogues.selection("b", None, "r") == ("b", "r", 1, 4)
    with pytest.raises(ValueError, match="activation is one of relu, gelu_tanh, silu"):
        epilogues.selection(None, "gelu")


def test_a_choice_selects_by_an_integer_operand():
    with pytest.raises(ValueError, match="the selector 'arm' is one of its integer operands"):
        Choice("c", "arm", (epilogues.relu,), (Operand("arm", "scalar"),))
    with pytest.raises(ValueError, match="it has no arms"):
        Choice("c", "arm", (), (Operand("arm", "integer"),))


def test_a_user_epilogue_with_a_scalar_and_a_row_vector(filecheck):
    @epilogue(Operand("scale", "scalar"), Operand("floor", "row"))
    def scaled(x, at):
        return maximum(x * at.load("scale"), at.load("floor"))

    filecheck(str(applied(scaled, ["f32", Global("f16")])), """
    CHECK: %[[SCALED:.*]] = arith.mulf %{{.*}}, %arg3 : f32
    CHECK: %[[ROW:.*]] = arith.minui %{{.*}}, %{{.*}} : index
    CHECK: %[[F:.*]] = memref.load %arg4[%[[ROW]]] : memref<2147483647xf16>
    CHECK: %[[WIDE:.*]] = arith.extf %[[F]] : f16 to f32
    CHECK: arith.maximumf %[[SCALED]], %[[WIDE]] : f32
    """)


def test_the_fingerprint_follows_the_code_and_what_it_closes_over():
    def scaled_by(factor):
        return Epilogue("scaled", lambda x, at: x * factor)

    assert scaled_by(2.0).fingerprint == scaled_by(2.0).fingerprint
    assert scaled_by(2.0).fingerprint != scaled_by(3.0).fingerprint
    assert Epilogue("scaled", lambda x, at: x + 2.0).fingerprint != scaled_by(2.0).fingerprint


@pytest.mark.parametrize("make, said", [
    (lambda: Operand("bias", "vector"), "kind is one of column, row, matrix, scalar, integer"),
    (lambda: Operand("not a name", "row"), "the name is an identifier"),
    (lambda: Epilogue("e", lambda x, at: x, (Operand("b", "row"), Operand("b", "column"))), "operand names repeat"),
    (lambda: Epilogue("e", 3), "a callable of"),
])
def test_malformed_epilogues_are_refused_where_they_are_made(make, said):
    with pytest.raises(ValueError, match=said):
        make()


@pytest.mark.parametrize("function, said", [
    (lambda x, at: x + at.load("bias"), "no operand 'bias'; it has none"),
    (lambda x, at: "x", "returns an F32"),
    (lambda x, at: x + [1], "takes F32 values and numbers"),
])
def test_an_epilogue_that_misuses_its_site_says_how(function, said):
    with pytest.raises((ValueError, TypeError), match=said):
        applied(Epilogue("e", function), [])


def test_numbers_become_constants():
    text = str(applied(Epilogue("e", lambda x, at: 2 * x - 1), []))
    assert "arith.constant 2.000000e+00 : f32" in text and "arith.subf" in text


def test_the_fingerprint_is_of_the_source_not_of_where_it_lies(tmp_path):
    """The wheel's kernels are named where they are built and looked up in the user's install (another place,
    maybe another Python version, whose bytecode differs): the fingerprint reads the source."""
    made = []
    for folder, spacing in (("build", ""), ("install", "\n\n")):
        (tmp_path / folder).mkdir()
        module = tmp_path / folder / "mine.py"
        module.write_text(spacing + "from mlir_tile.kernels.epilogues import Epilogue\n"
                          "e = Epilogue('e', lambda x, at: x * 2.0 + 1.0)\n")
        scope: dict = {}
        exec(compile(module.read_text(), str(module), "exec"), scope)
        made.append(scope["e"].fingerprint)
    assert made[0] == made[1]


def test_operands_are_arranged_in_the_epilogues_order_from_tensors_and_numbers():
    """What a user epilogue's torch operator receives (tensors and numbers apart) goes back into its order;
    integers come back as ints; a wrong count says what it takes."""
    mixed = Epilogue("mixed", lambda x, at: x, (Operand("gate", "matrix"), Operand("scale", "scalar"),
                                                Operand("bias", "column"), Operand("arm", "integer")))
    assert epilogues.arranged(mixed, ["g", "b"], [0.5, 3.0]) == ["g", 0.5, "b", 3]
    assert isinstance(epilogues.arranged(mixed, ["g", "b"], [0.5, 3.0])[3], int)
    with pytest.raises(ValueError, match="takes 2 tensors and 2 numbers, got 1 and 2"):
        epilogues.arranged(mixed, ["g"], [0.5, 3.0])
