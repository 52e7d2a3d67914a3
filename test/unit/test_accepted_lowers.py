"""Whatever tile-verify-matrix-transfer accepts, tile-to-ptx turns into PTX that the assembler (nvJitLink, the
ptxas of CUDA 13.0) accepts: random legal transfers in kernels that vary what surrounds them (register
storage at a static offset, f32 containers, a dynamic region start, a uniform loop, affine index arithmetic,
several chips)."""
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mlir_tile.compiler.compile import compile_to_cubin
from mlir_tile.contract import aligned_for, parse_opcode
from mlir_tile.isa.targets import STATIC_SHARED_BYTES
from mlir_tile.compiler.diagnostics import PipelineFailure
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.testing.random_transfers import RandomTransfer, transfers
from mlir_tile.tools.driver import Session

SESSION = Session()


def dynamic_starts(case: RandomTransfer) -> tuple:
    """(step, steps): the dynamic starts a kernel tries, 0 to steps - 1 steps of `step` words (a start passes
    through a swizzle as a multiple of its period); the static buffer holds the transfer's words and steps x step
    more."""
    swizzle = case.shared_layout.swizzle
    return (max(4, swizzle.period), 2) if swizzle else (4, 16)


def kernel_text(case: RandomTransfer, element: str, register_offset: int, dynamic_start: bool, in_loop: bool,
                chip: str) -> str:
    threads, slots, words = case.threads, case.slots, case.words
    step, steps = dynamic_starts(case)
    room = steps * step  # the largest dynamic start is steps - 1 steps in
    registers_type = f"memref<{slots}x{element}, 5>" if not register_offset else \
        f"memref<{slots}x{element}, strided<[1], offset: {register_offset}>, 5>"
    shared_type = f"memref<{words}x{element}, 3>" if not dynamic_start else \
        f"memref<{words}x{element}, strided<[1], offset: ?>, 3>"
    lines = [f'gpu.module @m [#nvvm.target<chip = "{chip}">] {{',
             f'  memref.global "private" @sm : memref<{words + room}x{element}, 3> '
             f'{{alignment = {aligned_for(case.shared_layout)} : i64}}',
             f'  gpu.func @k(%out: memref<{threads}x{slots}x{element}>) kernel attributes '
             f'{{known_block_size = array<i32: {threads}, 1, 1>}} {{',
             f'    %g = memref.get_global @sm : memref<{words + room}x{element}, 3>',
             '    %tid = gpu.thread_id x',
             '    %row = affine.apply affine_map<(d0) -> (d0 mod 1024)>(%tid)']
    if dynamic_start:
        lines += ['    %b = gpu.block_id x', f'    %c15 = arith.constant {steps - 1} : index',
                  '    %low = arith.andi %b, %c15 : index', f'    %c2 = arith.constant {step.bit_length() - 1} : index',
                  '    %start = arith.shli %low, %c2 : index',
                  f'    %sm = memref.subview %g[%start] [{words}] [1] : memref<{words + room}x{element}, 3> to {shared_type}']
    else:
        lines.append(f'    %sm = memref.subview %g[0] [{words}] [1] : memref<{words + room}x{element}, 3> to {shared_type}')
    lines.append(f'    %a = memref.alloca() : memref<{slots + register_offset}x{element}, 5>')
    lines.append(f'    %r = memref.subview %a[{register_offset}] [{slots}] [1] : '
                 f'memref<{slots + register_offset}x{element}, 5> to {registers_type}')
    is_load = parse_opcode(case.opcode).is_load
    for slot in range(slots):
        lines += [f'    %i{slot} = arith.constant {slot} : index']
        if not is_load:
            lines += [f'    %v{slot} = memref.load %out[%row, %i{slot}] : memref<{threads}x{slots}x{element}>',
                      f'    memref.store %v{slot}, %r[%i{slot}] : {registers_type}']
    dst, src = ("%r", "%sm") if is_load else ("%sm", "%r")
    types = f"({registers_type}, {shared_type})" if is_load else f"({shared_type}, {registers_type})"
    transfer = (f'"tile.matrix_transfer"({dst}, {src}) {{opcode = "{case.opcode}", scope = "{case.scope}", '
                f'dst_layout = #tile.layout<"{case.dst_layout}">, src_layout = #tile.layout<"{case.src_layout}">}} : '
                f'{types} -> ()')
    if in_loop:
        lines += ['    %lo = arith.constant 0 : index', '    %hi = arith.constant 2 : index', '    %one = arith.constant 1 : index',
                  '    scf.for %it = %lo to %hi step %one {', f'      {transfer}', '    }']
    else:
        lines.append(f'    {transfer}')
    if is_load:
        for slot in range(slots):
            lines += [f'    %w{slot} = memref.load %r[%i{slot}] : {registers_type}',
                      f'    memref.store %w{slot}, %out[%row, %i{slot}] : memref<{threads}x{slots}x{element}>']
    else:
        lines += ['    gpu.barrier', f'    %x = memref.load %sm[%row] : {shared_type}',
                  f'    memref.store %x, %out[%row, %i0] : memref<{threads}x{slots}x{element}>']
    lines += ['    gpu.return', '  }', '}']
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=transfers(), element=st.sampled_from(["i32", "f32"]), register_offset=st.sampled_from([0, 3]),
       dynamic_start=st.booleans(), in_loop=st.booleans(), chip=st.sampled_from(["sm_90", "sm_90a", "sm_100"]))
def test_what_the_verifier_accepts_assembles(case, element, register_offset, dynamic_start, in_loop, chip):
    step, steps = dynamic_starts(case)
    # (a static buffer past STATIC_SHARED_BYTES is a kernel no chip takes, which the verifier rightly refuses)
    assume(4 * (case.words + steps * step) <= STATIC_SHARED_BYTES)
    text = kernel_text(case, element, register_offset, dynamic_start, in_loop, chip)
    module = SESSION.parse(text, "accepted.mlir")
    try:
        run_pipeline(module, ["tile-verify-matrix-transfer"])
    except PipelineFailure as failure:
        raise AssertionError(f"a legal transfer was rejected:\n{failure}\n{text}") from None
    cubin = compile_to_cubin(module)
    assert cubin.startswith(b"\x7fELF")
