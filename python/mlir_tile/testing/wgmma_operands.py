"""A GPU differential bundle for wgmma's operand reads (issue 39): random descriptors and random operand tiles,
checked bit for bit against the reference model on the H200.

Descriptors: one kernel per (element, majors, N), taking A's and B's descriptors as arguments (their start
relative to the dynamic shared window, which the kernel adds): the whole window is filled with small integers
(exact products and sums), one wgmma reads it, each thread writes its accumulator registers as they lie. The
host draws the fields (every swizzle mode, LBO and SBO, starts inside a swizzle's row for K-major tiles,
the unused LBO of a swizzled K-major tile random), and expects the product of the operands that
`reference.wgmma_operand` reads, placed by `reference.wgmma_accumulator_position`.

Chains: S = Q K^T by wgmma from shared tiles, then P = S kept in registers as the A operand of P V^T (the RS
form, `accumulators_as_a`), V a random tiling: against the exact product.

Layouts: one kernel per random operand tiling (K- or MN-major, each swizzle mode, gaps between core matrices
or swizzle atoms, one or two warpgroups, 1 to 4 K steps), built with the builder's `k.wgmma` on shared tensors
and stored through the accumulators' coordinates: the host places each matrix element where the layout says
and expects A B^T. No model is involved: the layouts are the specification.

    build(folder, seed)   # here, with MLIR
    run(folder)           # on the GPU host: the mismatches
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from mlir_tile.isa.targets import WARPGROUP_CHIP
from mlir_tile.isa import fp8
from mlir_tile.isa.atoms import WGMMA_ELEMENTS, wgmma
from mlir_tile.algebra.layout import Layout
from mlir_tile.isa.tma import ALIGNMENT, Box, swizzle_on_elements

WINDOW = 48 * 1024  # the dynamic shared window the kernels fill (48 KiB: no opt-in attribute needed)
A_REGION = 16 * 1024  # descriptors: A reads below this, B at or above it
# descriptor kernels: (element, A major, B major, N)
DESCRIPTOR_KERNELS = [("f16", "K", "K", 64), ("f16", "K", "MN", 128), ("f16", "MN", "K", 32), ("f16", "MN", "MN", 256),
                      ("f16", "K", "K", 8), ("bf16", "K", "K", 96), ("bf16", "MN", "MN", 64), ("e4m3", "K", "K", 128),
                      ("e5m2", "K", "K", 64)]
_BITS = {16: np.uint16, 8: np.uint8}


def _descriptor_name(element, a_major, b_major, n) -> str:
    return f"wgmma_desc_{element}_{a_major}{b_major}_n{n}"


def build_descriptor_kernel(element: str, a_major: str, b_major: str, n: int):
    """wgmma_desc(image, out, a, b): the image (WINDOW bytes) into the dynamic shared window, then one wgmma
    through descriptors a and b (their starts from the window's start); out[thread, slot] = accumulator slot."""
    from mlir import ir
    from mlir.dialects import arith, memref

    from mlir_tile.builder import Global, Kernel
    from mlir_tile.builder.warpgroup import NVVM_LAYOUT

    atom = wgmma(n, element)
    with Kernel("wgmma_desc", [Global("i32"), Global("f32"), "i64", "i64"], block=(128, 1, 1), chip=WARPGROUP_CHIP) as k:
        image, out, a_descriptor, b_descriptor = k.arguments
        window = k.view(k.dynamic_shared(alignment=1024), (WINDOW // 4,), "i32")
        _fill(k, image, window)
        i64 = ir.IntegerType.get_signless(64)
        base = arith.shrui(arith.index_cast(i64, memref.extract_aligned_pointer_as_index(window)), k._i64(4))
        accumulators = k.accumulators(atom)
        k._issue(atom, accumulators, [(arith.addi(a_descriptor, base), arith.addi(b_descriptor, base))],
                 (NVVM_LAYOUT["a", a_major], NVVM_LAYOUT["b", b_major]), accumulate=False)
        k.wgmma_wait(0, [accumulators])
        results = k.tensor(out, (128, n // 2))
        for slot in range(n // 2):
            results[k.thread_id(), slot] = k.load(accumulators.registers, [slot])
    return k.module


def _fill(k, image, window) -> None:
    """The image's words into the window by the block's threads, then made visible to wgmma's reads."""
    words, threads = WINDOW // 4, k.block[0]
    source, target = k.tensor(image, (words // threads, threads)), k.tensor(window, (words // threads, threads))
    for step in range(words // threads):
        target[step, k.thread_id()] = source[step, k.thread_id()]
    k.async_proxy_fence()
    k.barrier()


def draw_descriptor(rng: random.Random, major: str, element_bits: int, rows: int, region: tuple[int, int]):
    """A descriptor whose reads stay inside `region` (bytes of the window): (its 64-bit value, its text).
    Unswizzled: LBO and SBO any multiples of 16 (core matrices may overlap: the reads are the test), the start
    any. Swizzled by W: the start on the repeat (plus, K-major, a K step of 32 bytes inside a row), the strides
    multiples of the repeat (K-major's LBO, unused, anything)."""
    from mlir_tile.isa.wgmma import Descriptor

    while True:
        width = rng.choice([0, 32, 64, 128])
        if not width:
            descriptor, unit, inside = Descriptor(major, 0, 16 * rng.randrange(1, 64), 16 * rng.randrange(1, 64)), 16, 0
        else:
            unit = ALIGNMENT[width]
            lead = 16 * rng.randrange(0, 1024) if major == "K" else unit * rng.randrange(1, 4)
            descriptor = Descriptor(major, width, lead, unit * rng.randrange(1, 4))
            inside = 32 * rng.randrange(0, width // 32) if major == "K" else 0
        extent = max(descriptor.offset(i, j, element_bits) for i in range(rows) for j in range(256 // element_bits))
        room = region[1] - region[0] - (extent + 16 + (width and ALIGNMENT[width])) - inside
        if room >= 0:
            start = region[0] + unit * rng.randrange(0, room // unit + 1) + inside
            text = (f"{major}-major, swizzle {width or 'none'}, LBO {descriptor.leading}, SBO {descriptor.stride}, "
                    f"start {start}")
            return descriptor.bits(start), text


def small_integers(rng: np.random.Generator, count: int, element: str) -> np.ndarray:
    """`count` elements of `element` (raw bits) holding integers in [-3, 3]: every product and sum exact."""
    values = rng.integers(-3, 4, count).astype(np.float32)
    if element == "f16":
        return values.astype(np.float16).view(np.uint16)
    if element == "bf16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return fp8.encode_integers(values, element)


def as_float(bits: np.ndarray, element: str) -> np.ndarray:
    """Raw element bits back to float64 (the inverse of small_integers for any value they hold)."""
    if element == "f16":
        return bits.view(np.float16).astype(np.float64)
    if element == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return fp8.decode(bits, element)


def random_tile(rng: random.Random, major: str, width: int, element_bits: int, rows: int, depth: int) -> Layout:
    """A (rows, depth) operand tile wgmma reads: the canonical atom (8 rows x W bytes swizzled, or 8 x 16-byte
    core matrices) repeated along rows and along K, the two repeats in a random order with random gaps."""
    e = element_bits // 8
    if major == "K":
        inner_rows, inner_columns = 8, (width or 16) // e
        atom = ((8, inner_columns), (inner_columns, 1))
    else:
        inner_rows, inner_columns = (width or 16) // e, 8
        atom = ((inner_rows, 8), (1, inner_rows))
    block = inner_rows * inner_columns  # elements of one atom (a swizzle's repeat, or a core matrix)
    counts = (rows // inner_rows, depth // inner_columns)
    first = rng.randrange(2)  # which repeat is inner
    strides = [0, 0]
    strides[first] = block * rng.choice([1, 1, 2])
    strides[1 - first] = strides[first] * counts[first] * rng.choice([1, 1, 2])
    shape = ((inner_rows, counts[0]), (inner_columns, counts[1]))
    stride = ((atom[1][0], strides[0]), (atom[1][1], strides[1]))
    return Layout(shape, stride, swizzle_on_elements(width, element_bits))


def draw_layout_case(rng: random.Random) -> dict:
    """A random (element, N, warpgroups, A tile, B tile) whose tiles fit the window."""
    while True:
        case = _layout_case(rng)
        a, b = Layout.parse(case["a"]), Layout.parse(case["b"])
        bits = WGMMA_ELEMENTS[case["element"]]
        if _b_offset(a, bits) + b.cosize * bits // 8 <= WINDOW:
            return case


def _layout_case(rng: random.Random) -> dict:
    element = rng.choice(["f16", "f16", "bf16", "e4m3"])
    bits = WGMMA_ELEMENTS[element]
    majors = ("K", "K") if bits == 8 else (rng.choice(["K", "MN"]), rng.choice(["K", "MN"]))
    widths = [rng.choice([0, 32, 64, 128]) for _ in majors]
    k_atom = 256 // bits
    span = max(w or 16 for w, m in zip(widths, majors) if m == "K") // (bits // 8) if "K" in majors else k_atom
    depth = max(k_atom, span) * rng.choice([1, 2]) if max(k_atom, span) * 2 // k_atom <= 4 else max(k_atom, span)
    n_unit = max([(w or 16) // (bits // 8) for w, m in zip(widths, majors) if m == "MN"] + [8])
    n = min(256, n_unit * rng.choice([1, 2, 3])) // n_unit * n_unit
    warpgroups = rng.choice([1, 2])
    a = random_tile(rng, majors[0], widths[0], bits, 64 * warpgroups, depth)
    b = random_tile(rng, majors[1], widths[1], bits, n, depth)
    return {"element": element, "n": n, "warpgroups": warpgroups, "a": str(a), "b": str(b)}


def _b_offset(a: Layout, element_bits: int) -> int:
    return -(-a.cosize * element_bits // 8 // 1024) * 1024


def build_layout_kernel(case: dict):
    """wgmma_tiles(image, out): the image into the window, A's tile at its start and B's after it (on 1024
    bytes), each warpgroup's 64 rows of A times B by `k.wgmma`, D stored row-major through the accumulators'
    coordinates."""
    from mlir.dialects import arith

    from mlir_tile.builder import Global, Kernel

    atom, warpgroups = wgmma(case["n"], case["element"]), case["warpgroups"]
    a, b = Layout.parse(case["a"]), Layout.parse(case["b"])
    element = {16: "f16" if case["element"] == "f16" else "bf16", 8: "i8"}[atom.element_bits]
    with Kernel("wgmma_tiles", [Global("i32"), Global("f32")], block=(128 * warpgroups, 1, 1), chip=WARPGROUP_CHIP) as k:
        image, out = k.arguments
        shared = k.dynamic_shared(alignment=1024)
        _fill(k, image, k.view(shared, (WINDOW // 4,), "i32"))
        tile_a = k.tensor(k.view(shared, (a.cosize,), element), a)
        tile_b = k.tensor(k.view(shared, (b.cosize,), element, byte_offset=_b_offset(a, atom.element_bits)), b)
        block = arith.divui(k.thread_id(), k.index(128))  # this warpgroup's 64 rows of A and of D
        accumulators = k.accumulators(atom)
        k.wgmma(atom, tile_a, tile_b, accumulators, accumulate=False, a_row_block=block)
        k.wgmma_wait(0, [accumulators])
        product = k.tensor(out, (64 * warpgroups, case["n"]))
        for slot in range(case["n"] // 2):
            row, column = accumulators.coordinate(slot)
            product[arith.addi(row, arith.muli(block, k.index(64))), column] = k.load(accumulators.registers, [slot])
    return k.module


def draw_chain_case(rng: random.Random) -> dict:
    """S = Q K^T (64 x N1, shared operands), then S as the register A operand of S V (V an N2 x N1 tile of any
    major and swizzle mode): FlashAttention's two products, P kept in registers."""
    while True:  # V in the window's last 16 KiB (Q and K^T's tile below them)
        element, n1, n2 = rng.choice(["f16", "bf16"]), rng.choice([16, 32, 64, 128]), rng.choice([16, 64, 128])
        major, width = rng.choice(["K", "MN"]), rng.choice([0, 32, 64, 128])
        width = min(width, n1 * 2) if major == "K" else min(width, n2 * 2)
        v = random_tile(rng, major, width, 16, n2, n1)
        if v.cosize * 2 <= WINDOW - 32768:
            return {"element": element, "n1": n1, "n2": n2, "q": str(Box(64, 64, 16, 128).layout),
                    "k": str(Box(n1, 64, 16, 128).layout), "v": str(v)}


def build_chain_kernel(case: dict):
    """wgmma_chain(image, out): Q at the window's start, K^T's tile at 16 KiB, V's at 48 KiB - its bytes; S by
    an SS wgmma, P = S packed as A (`accumulators_as_a`), O = P V^T by an RS wgmma, stored by coordinates."""
    from mlir_tile.builder import Global, Kernel

    first, second = wgmma(case["n1"], case["element"]), wgmma(case["n2"], case["element"])
    q, key, v = (Layout.parse(case[name]) for name in ("q", "k", "v"))
    with Kernel("wgmma_chain", [Global("i32"), Global("f32")], block=(128, 1, 1), chip=WARPGROUP_CHIP) as k:
        image, out = k.arguments
        shared = k.dynamic_shared(alignment=1024)
        _fill(k, image, k.view(shared, (WINDOW // 4,), "i32"))
        tiles = [k.tensor(k.view(shared, (layout.cosize,), case["element"], at), layout)
                 for layout, at in ((q, 0), (key, 16384), (v, _v_offset(v)))]
        scores = k.accumulators(first)
        k.wgmma(first, tiles[0], tiles[1], scores, accumulate=False)
        k.wgmma_wait(0, [scores])
        output = k.accumulators(second)
        k.wgmma(second, k.accumulators_as_a(scores, second), tiles[2], output, accumulate=False)
        k.wgmma_wait(0, [output])
        product = k.tensor(out, (64, case["n2"]))
        for slot in range(case["n2"] // 2):
            product[output.coordinate(slot)] = k.load(output.registers, [slot])
    return k.module


def _v_offset(v: Layout) -> int:
    return (WINDOW - v.cosize * 2) // 1024 * 1024


def _run_chain_case(runtime, folder: Path, case: dict, data: np.random.Generator) -> str | None:
    element, n1, n2 = case["element"], case["n1"], case["n2"]
    image, matrices = np.zeros(WINDOW // 2, np.uint16), []
    for name, rows, columns, start in (("q", 64, 64, 0), ("k", n1, 64, 8192), ("v", n2, n1, None)):
        layout = Layout.parse(case[name])
        start = _v_offset(layout) // 2 if start is None else start
        values = small_integers(data, rows * columns, element).reshape(rows, columns)
        for i in range(rows):
            for j in range(columns):
                image[start + layout.offset(i, j)] = values[i, j]
        matrices.append(as_float(values, element))
    module = runtime.load_ptx((folder / case["ptx"]).read_text(), name=case["ptx"])
    (out,) = module.launch("wgmma_chain", [image.view(np.uint32), np.zeros((64, n2), np.float32)], grid=1, block=128,
                           shared_bytes=WINDOW)[1:2]
    want = ((matrices[0] @ matrices[1].T) @ matrices[2].T).astype(np.float32)
    if np.array_equal(out, want):
        return None
    r, c = np.argwhere(out != want)[0]
    return f"{case['ptx']} ({element}, N1 {n1}, N2 {n2}, V {case['v']}): O[{r}, {c}] is {out[r, c]}, (Q K^T) V is {want[r, c]}"


def build(folder: Path, seed: int = 0, layouts: int = 120, chains: int = 30) -> dict:
    """The descriptor kernels, `layouts` random tile kernels and `chains` SS-then-RS kernels (their cases in
    layouts.json)."""
    from mlir_tile.compiler.compile import compile_to_ptx

    folder.mkdir(parents=True, exist_ok=True)
    for kernel in DESCRIPTOR_KERNELS:
        (folder / f"{_descriptor_name(*kernel)}.ptx").write_text(compile_to_ptx(build_descriptor_kernel(*kernel)))
    rng, cases = random.Random(seed), []
    for index in range(layouts + chains):
        chain = index >= layouts
        case = {**(draw_chain_case(rng) if chain else draw_layout_case(rng)), "ptx": f"tiles_{index}.ptx",
                "chain": chain}
        (folder / case["ptx"]).write_text(compile_to_ptx(build_chain_kernel(case) if chain else build_layout_kernel(case)))
        cases.append(case)
    (folder / "layouts.json").write_text(json.dumps({"seed": seed, "cases": cases}, indent=1))
    return {"descriptor kernels": len(DESCRIPTOR_KERNELS), "layout kernels": layouts, "chain kernels": chains}


def _expected_from_descriptors(image: np.ndarray, element: str, majors, n: int, a_bits: int, b_bits: int) -> np.ndarray:
    from mlir_tile.models.reference import wgmma_accumulator_position, wgmma_operand

    bits = WGMMA_ELEMENTS[element]
    a = as_float(wgmma_operand(image, a_bits, majors[0] == "K", bits, 64), element)
    b = as_float(wgmma_operand(image, b_bits, majors[1] == "K", bits, n), element)
    product = (a @ b.T).astype(np.float32)
    return np.array([[product[wgmma_accumulator_position(t, v)] for v in range(n // 2)] for t in range(128)],
                    np.float32)


def run(folder: Path, seed: int = 0, per_kernel: int = 120) -> tuple[int, list[str]]:
    """Every descriptor kernel on `per_kernel` random descriptor pairs and every layout kernel once: (cases
    run, the mismatches)."""
    from mlir_tile.runtime import Runtime

    rng, data, failures, ran = random.Random(seed), np.random.default_rng(seed), [], 0
    with Runtime() as runtime:
        for element, a_major, b_major, n in DESCRIPTOR_KERNELS:
            name = _descriptor_name(element, a_major, b_major, n)
            module = runtime.load_ptx((folder / f"{name}.ptx").read_text(), name=name)
            bits = WGMMA_ELEMENTS[element]
            for _ in range(per_kernel):
                image = small_integers(data, WINDOW * 8 // bits, element).view(np.uint8)
                a_bits, a_text = draw_descriptor(rng, a_major, bits, 64, (0, A_REGION))
                b_bits, b_text = draw_descriptor(rng, b_major, bits, n, (A_REGION, WINDOW))
                (out,) = module.launch("wgmma_desc", [image.view(np.uint32), np.zeros((128, n // 2), np.float32),
                                                      a_bits, b_bits], grid=1, block=128, shared_bytes=WINDOW)[1:2]
                want, ran = _expected_from_descriptors(image, element, (a_major, b_major), n, a_bits, b_bits), ran + 1
                if not np.array_equal(out, want):
                    t, v = np.argwhere(out != want)[0]
                    failures.append(f"{name}: A {a_text}; B {b_text}: thread {t} slot {v} is {out[t, v]}, the "
                                    f"model says {want[t, v]}")
        for case in json.loads((folder / "layouts.json").read_text())["cases"]:
            ran += 1
            problem = (_run_chain_case if case.get("chain") else _run_layout_case)(runtime, folder, case, data)
            if problem:
                failures.append(problem)
    return ran, failures


def _run_layout_case(runtime, folder: Path, case: dict, data: np.random.Generator) -> str | None:
    element, n, rows = case["element"], case["n"], 64 * case["warpgroups"]
    bits = WGMMA_ELEMENTS[element]
    a, b = Layout.parse(case["a"]), Layout.parse(case["b"])
    image = np.zeros(WINDOW * 8 // bits, _BITS[bits])
    matrices = []
    for layout, extent, start in ((a, rows, 0), (b, n, _b_offset(a, bits) * 8 // bits)):
        values = small_integers(data, extent * layout.sizes[1], element).reshape(extent, -1)
        for i in range(extent):
            for j in range(layout.sizes[1]):
                image[start + layout.offset(i, j)] = values[i, j]
        matrices.append(as_float(values, element))
    module = runtime.load_ptx((folder / case["ptx"]).read_text(), name=case["ptx"])
    (out,) = module.launch("wgmma_tiles", [image.view(np.uint32), np.zeros((rows, n), np.float32)],
                           grid=1, block=128 * case["warpgroups"], shared_bytes=WINDOW)[1:2]
    want = (matrices[0] @ matrices[1].T).astype(np.float32)
    if np.array_equal(out, want):
        return None
    r, c = np.argwhere(out != want)[0]
    return f"{case['ptx']} ({element}, N {n}, A {case['a']}, B {case['b']}): D[{r}, {c}] is {out[r, c]}, A B^T is {want[r, c]}"
