"""The verifier pass on real IR: random legal transfers built as kernels pass; random attribute mixes give
MLIR diagnostics at the op, never a Python exception."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlir_tile.contract import aligned_for
from mlir_tile.compiler.diagnostics import PipelineFailure
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.testing.random_transfers import transfers
from mlir_tile.tools.driver import Session

SESSION = Session()


def kernel_text(opcode, scope, dst_layout, src_layout, *, slots=16, words=4096, store=False, threads=128,
                extra="", view_offset=0, buffer_words=None, alignment=None):
    """A kernel with one transfer on a `words`-word shared memref: the buffer itself, or a memref.subview
    `view_offset` words into a buffer of `buffer_words`."""
    registers = f"memref<{slots}xi32, 5>"
    buffer = f"memref<{buffer_words or words}xi32, 3>"
    shared = buffer if not view_offset else f"memref<{words}xi32, strided<[1], offset: {view_offset}>, 3>"
    view = (f'    %sm = memref.get_global @sm : {buffer}\n' if not view_offset else
            f'    %g = memref.get_global @sm : {buffer}\n'
            f'    %sm = memref.subview %g[{view_offset}] [{words}] [1] : {buffer} to {shared}\n')
    operands, types = (("%sm, %r", f"{shared}, {registers}") if store else ("%r, %sm", f"{registers}, {shared}"))
    return (f'gpu.module @m [#nvvm.target<chip = "sm_90">] {{\n'
            f'  memref.global "private" @sm : {buffer} {{alignment = {alignment or _aligned_for(src_layout, dst_layout)} : i64}}\n'
            f'  gpu.func @k() kernel attributes {{known_block_size = array<i32: {threads}, 1, 1>}} {{\n'
            f'{view}    %r = memref.alloca() : {registers}\n'
            f'    "tile.matrix_transfer"({operands}) {{opcode = {opcode}, scope = {scope}{extra},\n'
            f'        dst_layout = {dst_layout}, src_layout = {src_layout}}} : ({types}) -> ()\n'
            f'    gpu.return\n  }}\n}}\n')


def _aligned_for(*layouts) -> int:
    """The alignment the shared layout among the op's two layout attributes needs (16, or its swizzle's period)."""
    shared = [text for text in layouts if "laneid" not in text and "warpid" not in text]
    found = re.search(r"#tile\.layout<\"(.*)\">", shared[0]) if shared else None
    return aligned_for(found.group(1)) if found else 16


def verify(text):
    module = SESSION.parse(text, "random.mlir")
    run_pipeline(module, ["tile-verify-matrix-transfer"])


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(transfers())
def test_random_legal_transfers_pass_the_pass(case):
    verify(kernel_text(f'"{case.opcode}"', f'"{case.scope}"', f'#tile.layout<"{case.dst_layout}">',
                       f'#tile.layout<"{case.src_layout}">', slots=case.slots, words=case.words,
                       store=not case.is_load, threads=case.threads))


def quoted(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


attribute_values = st.one_of(
    st.text(alphabet="()0123456789,:@-lanidwrp x", max_size=24).map(lambda t: f"#tile.layout<{quoted(t)}>"),
    st.sampled_from(['#tile.layout<"(4,8,4):(1,4@laneid,1@laneid)">', '#tile.layout<"(4,8,4):(32,4,1)">',
                     '#tile.layout<"(1,4,8,4):(1@warpid,1,4@laneid,1@laneid)">']),
)
strings = st.one_of(st.text(max_size=30).map(quoted), st.sampled_from(
    ['"ldmatrix.sync.aligned.m8n8.x4.shared.b16"', '"stmatrix.sync.aligned.m8n8.x4.trans.shared.b16"', '"warp"',
     '"warpgroup"', '"cta"', '"thread"']))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(opcode=strings, scope=strings, dst=attribute_values, src=attribute_values, store=st.booleans(),
       extra=st.sampled_from(["", ", pred = true", ', cache = "L2"']))
def test_random_attribute_mixes_give_diagnostics_not_exceptions(opcode, scope, dst, src, store, extra):
    try:
        verify(kernel_text(opcode, scope, dst, src, store=store, extra=extra))
    except PipelineFailure as failure:
        assert failure.diagnostics, "a failure must say why"
        for diagnostic in failure.diagnostics:
            assert diagnostic.file == "random.mlir" and diagnostic.line is not None, str(diagnostic)
            assert "internal error" not in diagnostic.message
