"""mlir_tile/kernels/epilogues.py without a GPU: an epilogue's arithmetic and loads in the IR it emits (loads
clamped into the matrix, operands by kind), compositions in order, `selectable`'s branches, the fingerprint
that names built kernels, and the errors a user gets for a malformed epilogue. Their values on the GPU:
test_kernels_ops_gpu.py."""
import pytest
from mlir import ir

from mlir_tile.builder import Global, Kernel
from mlir_tile.compile import compile_to_ptx
from mlir_tile.kernels import epilogues
from mlir_tile.kernels.epilogues import Epilogue, Operand, epilogue, maximum


def applied(chosen: Epilogue, extra_parameters):
    """A kernel that applies `chosen` to out[0] at (row 5, column 7) of an m x n C, its operands after m, n."""
    with Kernel("k", [Global("f32"), "index", "index", *extra_parameters], block=(32, 1, 1), context=ir.Context()) as k:
        out, m, n, *extras = k.arguments
        result = chosen.apply(k, k.load(out, [0]), k.index(5), k.index(7), m, n, extras)
        k.store(result, out, [0])
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


def test_selectable_branches_on_its_integers_and_lowers_to_ptx():
    ptx = compile_to_ptx(applied(epilogues.selectable, [Global("bf16"), Global("bf16"), "index", "index", "index"]))
    assert ptx.count("ex2.approx.ftz.f32") == 2  # gelu_tanh's and silu's, each in its branch
    assert epilogues.selection(None, "silu", None) == (None, None, 0, 3, 0)
    with pytest.raises(ValueError, match="activation is one of relu, gelu_tanh, silu"):
        epilogues.selection(None, "gelu")


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
