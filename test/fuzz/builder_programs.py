"""The fuzzer's builder channel: random programs that call every public builder call with plausible, junk and
misplaced arguments, as a user who makes mistakes and catches the errors would.

A program builds a kernel `other` and then a kernel `k` in one context; each step calls one builder call on `k`
(or `transfer`, or a call on `other`, whose `with` block has ended) with arguments drawn from what the program made so far (values of every type, values made in
`other`, values made inside loops and branches that have ended), from plausible constants and layouts, or from
junk. A BuilderError or ContractError is the call refusing, and the program goes on; loops and branches nest
and sometimes raise inside. After the last step `k` must compile (compile_to_ptx, then nvJitLink). Classes:

- bindings exception: any other exception escaped a builder call (its type, the call and the message kept);
- accepted then invalid: compile_to_ptx or the assembler rejected what the builder accepted.

(A crash or a hang is seen by the fuzzer: the worker process dies or does not answer.)
"""
from __future__ import annotations

import random
import traceback

from mlir import ir

from mlir_tile.isa.atoms import MMA_M16N8K16, MMA_M16N8K32, WgmmaAtom, wgmma
from mlir_tile.builder import BuilderError, Global, Kernel, TensorMap, transfer
from mlir_tile.builder.schedule import StageRing, TileOrder
from mlir_tile.builder.tensor import local_tile
from mlir_tile.compiler.compile import compile_to_ptx_texts
from mlir_tile.contract import ContractError
from mlir_tile.runtime.ptx import CompileError, cubin_of_ptx

CHIPS = ["sm_90", "sm_90", "sm_90a", "sm_90a", "sm_80", "sm_75"]
ELEMENTS = ["i32", "f16", "bf16", "f32", "i8", "i64", "index", "i1", "f17", "", "memref<4xi32>"]
LAYOUTS = ["(64,64):(64,1)", "Sw<3,3,3> o (64,64):(64,1)", "(8,8):(8,1)", "(16,8):(8,1)", "(4,8,4):(32,4,1)",
           "(64,32):(32,1)", "(2,2,8,4):(8,2,4@laneid,1@laneid)", "((2,2),8,4):((8,2),4@laneid,1@laneid)",
           "(64,64):(-64,1)", "(128,64):(64,1)", "Sw<3,2,3> o (8,32):(32,1)", "(", "(4,8):(1)", 7]
OPCODES = ["ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
           "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x4.shared.b16", "ld", 5]
JUNK = [None, -1, 0, 1, 3, 2**31, 2**40, -2**70, 1.5, float("nan"), True, "", "x", "i32", (), [], [1, 2], {}, object()]
# (opcode, registers, shared words, dst layout, src layout) of legal warp transfers, for the stock's buffers
TRANSFERS = [
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "(4,8,4):(1,4@laneid,1@laneid)", "(4,8,4):(32,4,1)"),
    ("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "(2,8,4):(1,4@laneid,1@laneid)", "(2,8,4):(32,4,1)"),
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16", "(1,8,4):(0,4@laneid,1@laneid)", "(1,8,4):(0,4,1)"),
    ("stmatrix.sync.aligned.m8n8.x4.shared.b16", "(4,8,4):(32,4,1)", "(4,8,4):(1,4@laneid,1@laneid)"),
]


class Program:
    """One random program's state: the kernel being built, the values made so far and where."""

    def __init__(self, rng: random.Random, kernel: Kernel, finished: Kernel, foreign: list):
        self.rng, self.k, self.finished, self.foreign = rng, kernel, finished, foreign
        self.values: list[ir.Value] = list(kernel.arguments)
        self.names = 0
        self.calls = self.refused = 0
        self.escaped: list[str] = []
        self.clean = False  # this step's arguments are all plausible (most steps), else each may be junk
        # a stock of well-formed buffers, so that the calls that need them are accepted often enough to be
        # compiled: a 64 x 64 f16 tile, 512 i32 words, registers
        self.tile, self.words = kernel.shared("tile", 64 * 64, "f16", 128), kernel.shared("words", 512, "i32", 128)
        self.registers, self.accumulators = kernel.registers(8), kernel.registers(8, "f32")
        self.wgmma_accumulators: list = []  # Kernel.accumulators made so far
        self.tensors: list = []  # tensors made so far (some inside loops and branches that have ended)
        self.values += [self.tile, self.words, self.registers, self.accumulators, kernel.shared_bytes("bytes", 4096),
                        kernel.constant(0.5, "f32"), kernel.constant(2.0, "f16"), kernel.constant(7),
                        kernel.compare("ult", kernel.lane_id(), 16)]

    # ----- arguments -----
    def of_type(self, *types: str):
        matching = [v for v in self.values if str(v.type) in types or any(str(v.type).startswith(t) for t in types)]
        return self.rng.choice(matching) if matching else None

    def pick(self, plausible):
        """The plausible argument in a clean step; otherwise mostly, else junk, a value of any type, or one of
        another kernel."""
        roll = 0.0 if self.clean else self.rng.random()
        if roll < 0.75:
            return plausible() if callable(plausible) else plausible
        if roll < 0.90:
            return self.rng.choice(JUNK)
        if roll < 0.96 and self.values:
            return self.rng.choice(self.values)
        return self.rng.choice(self.foreign) if self.foreign else None

    def index(self):
        return self.pick(lambda: self.of_type("index") if self.rng.random() < 0.5 else self.rng.randrange(0, 64))

    def small(self, *choices):
        return self.pick(lambda: self.rng.choice(choices))

    def buffer(self, *spaces):
        wanted = {"shared": "#gpu.address_space<workgroup>", "private": "#gpu.address_space<private>", "global": None}
        return self.pick(lambda: self.rng.choice([v for v in self.values if isinstance(v.type, ir.MemRefType) and (
            (str(ir.MemRefType(v.type).memory_space) if ir.MemRefType(v.type).memory_space else None) in
            [wanted[s] for s in spaces])] or [None]))

    def barriers(self):
        """Mostly a buffer `mbarriers` made (i64 words in shared memory), else any shared buffer."""
        return self.pick(lambda: self.of_type("memref<1xi64, #gpu", "memref<2xi64, #gpu") or self.buffer("shared"))

    def name(self):
        self.names += 1
        return self.pick(lambda: self.rng.choice([f"b{self.names}", f"b{self.names}", "b1", "k"]))

    # ----- steps -----
    def step(self, depth: int) -> None:
        """One builder call (or a nested loop or branch, whose body is more steps)."""
        name, action = self.rng.choice(CALLS)
        if name in ("loop", "if_") and depth >= 3:
            return
        self.calls += 1
        self.clean = self.rng.random() < 0.6
        try:
            made = action(self, depth)
        except (BuilderError, ContractError):
            self.refused += 1
            return
        except _UserError:
            return
        except Exception as error:  # noqa: BLE001 - what the fuzzer counts
            self.escaped.append(f"{name}: {type(error).__name__}: {error} | "
                                f"{traceback.format_tb(error.__traceback__)[-1].strip()[:300]}")
            return
        for value in made if isinstance(made, (list, tuple)) else [made]:
            if isinstance(value, ir.Value):
                self.values.append(value)

    def body(self, depth: int) -> None:
        for _ in range(self.rng.randrange(0, 5)):
            self.step(depth + 1)
        if self.rng.random() < 0.05:
            raise _UserError()


class _UserError(Exception):
    """The user's own exception, raised inside a loop or branch and caught outside it."""


def _loop(p: Program, depth: int):
    carried = p.pick(lambda: [v for v in p.rng.sample(p.values, min(2, len(p.values)))
                              if str(v.type) in ("index", "i32", "f32")])
    with p.k.loop(p.index(), p.index(), p.small(1, 1, 2, 0), carried=carried) as it:
        if isinstance(it, ir.Value):
            p.values.append(it)
            p.body(depth)
            return None
        p.values += [it.index, *it.values]
        p.body(depth)
        # the values carried round: mostly this iteration's, sometimes others of their types (a thread id...)
        it.next(*_spread(p.pick(lambda: [v if p.rng.random() < 0.7 else p.of_type(str(v.type)) for v in it.values])))
    return it.results


def _if(p: Program, depth: int):
    condition = p.pick(lambda: p.rng.choice([lambda: p.of_type("i1"), lambda: p.k.compare("ult", p.k.thread_id(), 32),
                                             lambda: p.k.compare("eq", p.of_type("index"), 0)])())
    results = p.pick(lambda: p.rng.choice([[], ["f32"], ["index", "i32"]]))
    with p.k.if_(condition, results) as branch:
        p.body(depth)
        if branch is None:
            return None
        values = [p.k.constant(1.0 if kind == "f32" else 1, kind) for kind in results]
        branch.otherwise(*_spread(p.pick(values)))
        p.body(depth)
        branch.done(*_spread(p.pick(values)))
    return branch.results


def _spread(arguments) -> list:
    """A call's argument list: the list given, or one (junk) argument."""
    return list(arguments) if isinstance(arguments, (list, tuple)) else [arguments]


def _transfer(p: Program, depth: int):
    opcode, registers_layout, shared_layout = p.rng.choice(TRANSFERS)
    registers, tile = p.pick(p.registers), p.pick(lambda: p.words if p.rng.random() < 0.8 else p.buffer("shared"))
    load = opcode.startswith("ld")
    return transfer(p.pick(opcode), registers if load else tile, tile if load else registers,
                    dst_layout=p.pick(registers_layout if load else shared_layout),
                    src_layout=p.pick(shared_layout if load else registers_layout),
                    scope=p.pick(lambda: p.rng.choice(["warp", "warp", "cta", "thread"])))


def _mma(p: Program, depth: int):
    slots = lambda n: p.pick(lambda: p.rng.sample(range(8), n))  # noqa: E731
    words, accumulators = p.pick(p.registers), p.pick(p.accumulators)
    if p.rng.random() < 0.5:
        return p.k.mma(MMA_M16N8K16, words, slots(4), words, slots(2), accumulators, slots(4), p.small("f16", "bf16", "s8"))
    return p.k.mma(MMA_M16N8K32, words, slots(4), words, slots(2), p.pick(p.registers), slots(4), p.small("s8", "u8"),
                            saturate=p.small(False, True))


def _store(p: Program, depth: int):
    buffer = p.buffer("shared", "private", "global")
    element = str(ir.MemRefType(buffer.type).element_type) if isinstance(buffer, ir.Value) and isinstance(
        buffer.type, ir.MemRefType) else "i32"
    return p.k.store(p.pick(lambda: p.of_type(element)), buffer, p.pick(lambda: [p.index()]))


def _copy_async(p: Program, depth: int):
    eighth = p.pick(lambda: p.k.index(8 * p.rng.randrange(0, 512)))
    return p.k.copy_async(p.pick(p.tile), p.pick(lambda: [eighth]), p.pick(lambda: p.k.arguments[0]),
                          p.pick(lambda: [p.rng.choice([eighth, 8 * p.rng.randrange(0, 64)])]), bytes=p.small(16, 8, 4, 2),
                          valid=p.small(None, p.of_type("index"), 3), whole=p.small(False, True))


TILES = [("(64,64):(64,1)", 64, 64), ("Sw<3,3,3> o (64,64):(64,1)", 64, 64), ("(16,64):(64,1)", 16, 64),
         ("(64,32):(32,1)", 64, 32)]  # (layout, rows, cols) of tiles of the stock's 64 x 64 f16 buffer


def _copy_tile_async(p: Program, depth: int):
    layout, rows, cols = p.rng.choice(TILES)
    return p.k.copy_tile_async(
        p.pick(p.tile), p.pick(layout), p.pick(p.k.arguments[0]), p.index(), p.small(64, 128, p.of_type("index")),
        rows=p.pick(rows), cols=p.pick(cols), valid_rows=p.small(None, p.of_type("index"), 17),
        valid_cols=p.small(None, 64, 24, p.of_type("index")), chunk_bytes=p.small(16, 8, 4))


def _copy_tile(p: Program, depth: int):
    layout, rows, cols = p.rng.choice(TILES)
    return p.k.copy_tile(p.pick(p.tile), p.pick(layout), p.pick(p.k.arguments[0]), p.index(),
                         p.small(64, 100, p.of_type("index")), rows=p.pick(rows), cols=p.pick(cols),
                         valid_rows=p.index(), valid_cols=p.index())


def _tile_chunks(p: Program, depth: int):
    layout, rows, cols = p.rng.choice(TILES)
    chunks = p.k.tile_chunks(p.pick(p.tile), p.pick(layout), p.pick(rows), p.pick(cols), p.small(16, 8, 4, 3))
    return [v for pair in p.k.chunk_addresses(p.pick(p.tile), p.pick(chunks)) for v in pair]


def _planned(p: Program, depth: int):
    row = p.pick(lambda: p.k.warp_id() if p.k.block[0] >= 32 else p.k.index(0))
    coordinates = p.pick(lambda: [[(row, 0), p.rng.choice([0, 8])], [(row, p.rng.choice([4, 8])), 0]])
    return [v for pair in p.k.planned(p.pick(p.tile), p.small("(64,64):(64,1)", "Sw<3,3,3> o (64,64):(64,1)",
                                                               *LAYOUTS), coordinates, p.small(1, 8)) for v in pair]


def _global_tile(p: Program, depth: int):
    """A tile of A (argument 0, rows of 64 halves) and its coordinates by local_tile, a slice of them, offsets,
    residues and predicates; sometimes copied into the stock's tile."""
    rows = p.index()
    matrix = p.k.tensor(p.pick(lambda: p.k.arguments[0]), p.pick(lambda: (rows, 64)), p.small(None, (64, 1), (rows, 1)))
    at = p.pick(lambda: (p.index(), None))
    tiles = local_tile(p.pick(matrix), p.pick((16, 64)), at)
    coordinates = local_tile(p.k.identity_tensor(p.pick(lambda: (rows, 64))), p.pick((16, 64)), at)
    p.tensors += [tiles, coordinates]
    here = coordinates[None, None, p.index()]
    made = [tiles.offset(p.pick(lambda: (p.index(), 0, p.index()))), *here.residue(), here.inside(p.pick((0, 8)))]
    if p.rng.random() < 0.3:
        made += p.k.copy(tiles[None, None, 0], p.k.tensor(p.pick(p.tile), p.small("(16,64):(64,1)", *LAYOUTS)),
                         valid=p.pick(lambda: here.residue()), chunk_bytes=p.small(16, 8, 2),
                         asynchronous=p.small(True, False))
    return [v for v in made if isinstance(v, ir.Value)]


def _tensor_again(p: Program, depth: int):
    """A tensor made by an earlier step (maybe inside a loop or branch that has ended) read, sliced or tiled."""
    tensor = p.pick(lambda: p.rng.choice(p.tensors) if p.tensors else None)
    if tensor is None or not hasattr(tensor, "rank"):
        raise BuilderError("no tensor")  # (what a junk pick is: not a call)
    coordinate = p.pick(lambda: tuple(p.index() for _ in range(tensor.rank)))
    calls = [lambda: tensor[coordinate], lambda: tensor.domain_offset(coordinate)]
    if hasattr(tensor, "partition"):  # an identity tensor
        calls.append(lambda: tensor.partition(p.small(("(32,4):(1,32)", "(32,4):(4,1)"), ("4:1",)))[p.pick(
            lambda: (p.k.thread_id(), p.index()))])
    return values_of(p.rng.choice(calls)())


def values_of(made) -> list:
    return [made] if isinstance(made, ir.Value) else [v for v in made if isinstance(v, ir.Value)] if isinstance(
        made, tuple) else []


def _tma_load(p: Program, depth: int):
    """A TMA load of the stock's tile (a swizzled layout needs 1024 bytes it has not: refused) and its bytes."""
    barriers = p.pick(lambda: p.of_type("memref<1xi64, #gpu") or p.k.mbarriers(p.name(), 1, 1))
    column = p.pick(lambda: p.rng.choice([p.k.index(8 * p.rng.randrange(0, 8)), p.index()]))
    box = p.k.tma_load(p.k.tensor(p.pick(p.tile), p.small("(64,64):(64,1)", "Sw<3,3,3> o (64,64):(64,1)", *LAYOUTS)),
                       p.pick(lambda: p.k.arguments[3]), p.pick(lambda: (p.index(), column)), barriers,
                       p.small(0, 1))
    p.k.expect_bytes(barriers, p.small(0, 1), p.pick(box))


WGMMA_TILES = ["Sw<3,3,3> o (64,64):(64,1)", "Sw<3,3,3> o (128,64):(64,1)", "Sw<2,3,3> o (64,32):(32,1)",
               "(64,64):(1,64)", "Sw<3,3,3> o (64,64):(1,64)", "((8,8),(8,2)):((8,64),(1,512))", *LAYOUTS]


def _wgmma(p: Program, depth: int):
    """A wgmma batch (f16, N 64, K-major 128-byte tiles of a dynamic shared window when plausible; other atoms,
    elements, layouts, offsets and junk otherwise), its accumulators kept for the reads, waits and stores that
    may follow while it is in flight."""
    atom = p.pick(lambda: wgmma(64, "f16") if p.rng.random() < 0.7 else wgmma(p.rng.choice([8, 256]), "e4m3"))
    if isinstance(atom, WgmmaAtom) and p.rng.random() < 0.8:
        p.wgmma_accumulators.append(p.k.accumulators(atom))
    held = p.pick(lambda: p.rng.choice(p.wgmma_accumulators) if p.wgmma_accumulators else None)
    window = p.k.dynamic_shared(p.pick(1024))
    element = p.pick("f16" if getattr(atom, "element", "f16") == "f16" else "i8")
    a = p.k.tensor(p.k.view(window, (p.pick(8192),), element, p.pick(0)), p.pick("Sw<3,3,3> o (128,64):(64,1)"
                                                                                if p.rng.random() < 0.7 else
                                                                                p.rng.choice(WGMMA_TILES)))
    b = p.k.tensor(p.k.view(window, (p.pick(4096),), element, p.pick(16384)), p.pick("Sw<3,3,3> o (64,64):(64,1)"
                                                                                  if p.rng.random() < 0.7 else
                                                                                  p.rng.choice(WGMMA_TILES)))
    block = p.pick(lambda: p.rng.choice([0, 1, 1, p.k.thread_id(), p.index()]))
    p.k.wgmma(atom, a, b, held, accumulate=p.small(True, False), a_row_block=block)


def _wgmma_after(p: Program, depth: int):
    """What follows a batch: a wait (naming accumulators or not), a read, a store or a coordinate of them."""
    held = p.rng.choice(p.wgmma_accumulators) if p.wgmma_accumulators else None
    calls = [lambda: p.k.wgmma_wait(p.small(0, 1, 8), p.pick(lambda: [held] if held else []))]
    if held is not None:
        calls += [lambda: p.k.load(held.registers, [p.small(0, 1, 200)]),
                  lambda: p.k.store(p.k.constant(1.0, "f32"), held.registers, [p.small(0, 3)]),
                  lambda: held.coordinate(p.small(0, 5, -1, 999))]
    return values_of(p.rng.choice(calls)())


def _schedule(p: Program, depth: int):
    order = TileOrder(p.k, p.pick(lambda: (p.index(), p.index())), p.pick((128, 64)), p.small(8, 1, 0))
    ring = StageRing(p.k, p.buffer("shared"), p.small(2, 4, 0), p.pick([("f16", 64), ("f16", 128)]))
    return [*order.origin(p.index(), inside=p.small(False, True)), *ring.views(ring.stage(p.index(), p.small(0, 1)))]


CALLS = [
    ("thread_id", lambda p, d: p.k.thread_id(p.small("x", "y", "z"))),
    ("lane_id", lambda p, d: p.k.lane_id()),
    ("block_id", lambda p, d: p.k.block_id(p.small("x", "y"))),
    ("grid_size", lambda p, d: p.k.grid_size(p.small("x"))),
    ("block_size", lambda p, d: p.k.block_size(p.small("x", "z"))),
    ("warp_id", lambda p, d: p.k.warp_id()),
    ("index", lambda p, d: p.k.index(p.small(0, 1, 7, 64, 2**62))),
    ("constant", lambda p, d: p.k.constant(p.small(0, 1, -1, 255, 2**31, 0.5, float("inf"), 1e39),
                                           p.small("i32", "f32", "i8", "i1", "f16", "bf16", "i64", "index"))),
    ("as_index", lambda p, d: p.k.as_index(p.index())),
    ("minimum", lambda p, d: p.k.minimum(p.index(), p.index())),
    ("compare", lambda p, d: p.k.compare(p.small("ult", "eq", "sge", "lt"), p.index(), p.index())),
    ("shared", lambda p, d: p.k.shared(p.name(), p.small(64, 4096, 8192, 16), p.small(*ELEMENTS),
                                       p.small(16, 128, 1024, 3))),
    ("shared_bytes", lambda p, d: p.k.shared_bytes(p.name(), p.small(256, 8192, 16), p.small(16, 1024))),
    ("dynamic_shared", lambda p, d: p.k.dynamic_shared(p.small(16, 128, 1024, 8))),
    ("registers", lambda p, d: p.k.registers(p.small(4, 8, 2, 1), p.small("i32", "f32", "i32", "f16", "i8"))),
    ("view", lambda p, d: p.k.view(p.buffer("shared"), p.pick(lambda: (p.rng.choice([16, 64, 1024]),)),
                                   p.small("f16", "i32", "f32"), p.small(0, 16, 128, p.of_type("index")))),
    ("subview", lambda p, d: p.k.subview(p.buffer("shared", "private"), p.small(0, 4, 64), p.small(4, 16, 64))),
    ("offset", lambda p, d: p.k.offset(p.small(*LAYOUTS), p.pick(lambda: [p.index(), p.index()]))),
    ("planned", _planned),
    ("load", lambda p, d: p.k.load(p.buffer("shared", "private", "global"), p.pick(lambda: [p.index()]))),
    ("store", _store),
    ("load_vector", lambda p, d: p.k.load_vector(p.buffer("shared", "global", "private"), p.pick(lambda: [p.index()]),
                                                 p.small(8, 4, 2, 3), assume_aligned=p.small(False, True))),
    ("store_vector", lambda p, d: p.k.store_vector(p.of_type("vector"), p.buffer("shared", "global"),
                                                   p.pick(lambda: [p.index()]), assume_aligned=p.small(False, True))),
    ("copy_async", _copy_async),
    ("commit_group", lambda p, d: p.k.commit_group(p.pick(lambda: [p.of_type("!nvgpu")]))),
    ("wait_groups", lambda p, d: p.k.wait_groups(p.of_type("!nvgpu"), p.small(0, 1, 2))),
    ("copy_tile", _copy_tile),
    ("copy_tile_async", _copy_tile_async),
    ("tile_chunks and chunk_addresses", _tile_chunks),
    ("transfer", _transfer),
    ("mma", _mma),
    ("pack_f16", lambda p, d: p.k.pack_f16(p.of_type("f32"), p.of_type("f32"), p.small("f16", "bf16"))),
    ("exp2", lambda p, d: p.k.exp2(p.of_type("f32"))),
    ("divide", lambda p, d: p.k.divide(p.of_type("f32"), p.of_type("f32"))),
    ("shuffle", lambda p, d: p.k.shuffle(p.of_type("f32", "i32"), p.small(1, 16, 31), p.small("xor", "down", "idx"),
                                         p.small(32, 16))),
    ("warp_reduce", lambda p, d: p.k.warp_reduce(p.of_type("f32"), p.small("max", "add"), p.small(32, 4))),
    ("any_lane", lambda p, d: p.k.any_lane(p.of_type("i1"))),
    ("byte_permute", lambda p, d: p.k.byte_permute(p.of_type("i32"), p.of_type("i32"),
                                                   p.small(0x6420, 0x3175, 1 << 16, p.of_type("i32", "f32")))),
    ("lane_table", lambda p, d: p.k.lane_table([p.small(0x6420, 0x7531, 1 << 32) for _ in range(p.rng.choice((32, 31)))])),
    ("barrier", lambda p, d: p.k.barrier()),
    ("mbarriers", lambda p, d: p.k.mbarriers(p.name(), p.small(2, 1), p.small(128, 32))),
    ("commit_group of copies", lambda p, d: p.k.commit_group([_copy_async(p, d)])),
    ("arrive", lambda p, d: p.k.arrive(p.barriers(), p.small(0, 1, p.of_type("index")), per_warp=p.small(False, True))),
    ("arrive_on_copies", lambda p, d: p.k.arrive_on_copies(p.barriers(), p.small(0, 1))),
    ("wait_phase", lambda p, d: p.k.wait_phase(p.barriers(), p.small(0, 1), p.small(0, 1, p.of_type("i32")))),
    ("a call on a finished kernel", lambda p, d: p.finished.load(p.finished.arguments[0], [p.index()])),
    ("tensor, local_tile, identity_tensor, copy", _global_tile),
    ("a tensor again", _tensor_again),
    ("schedule", _schedule),
    ("tma_load and expect_bytes", _tma_load),
    ("wgmma", _wgmma),
    ("wgmma again", _wgmma),
    ("accumulators_as_a", lambda p, d: p.k.accumulators_as_a(
        p.pick(lambda: p.rng.choice(p.wgmma_accumulators) if p.wgmma_accumulators else None),
        p.pick(lambda: wgmma(p.rng.choice([64, 32]), p.rng.choice(["f16", "e4m3"]))))),
    ("tma_store and its wait", lambda p, d: (p.k.tma_store(p.k.tensor(p.pick(p.tile), p.small(
        "Sw<3,3,3> o (64,64):(64,1)", *LAYOUTS)), p.pick(lambda: p.k.arguments[3]), p.pick(lambda: (p.index(), 0))),
        p.k.tma_store_wait(p.small(0, 1, 9)))),
    ("async_proxy_fence", lambda p, d: p.k.async_proxy_fence()),
    ("warpgroup_id", lambda p, d: p.k.warpgroup_id()),
    ("set_max_registers", lambda p, d: p.k.set_max_registers(p.small(40, 232, 100, 0), p.small("increase", "decrease",
                                                                                             "up"))),
    ("named_barrier", lambda p, d: p.k.named_barrier(p.small(1, 0, 16), p.small(128, 256, 33))),
    ("named_barrier_arrive", lambda p, d: p.k.named_barrier_arrive(p.small(2, 0, 16), p.small(128, 256, 33))),
    ("cluster_rank", lambda p, d: p.k.cluster_rank()),
    ("cluster_barrier", lambda p, d: p.k.cluster_barrier()),
    ("arrive_remote", lambda p, d: p.k.arrive_remote(p.barriers(), p.small(0, 1), p.small(0, 1, 5, p.of_type("index")))),
    ("wait_for_prerequisites", lambda p, d: p.k.wait_for_prerequisites()),
    ("launch_dependents", lambda p, d: p.k.launch_dependents()),
    ("wgmma's wait and accumulators", _wgmma_after),
    ("global_thread_id", lambda p, d: p.k.global_thread_id()),
    ("leads_lanes", lambda p, d: p.k.leads_lanes(p.small(4, 32, 3))),
    ("loop", _loop),
    ("if_", _if),
]


def run_program(seed: int, steps: int = 24) -> dict:
    """Build one random program; its counts, the exceptions that escaped, and whether what was built compiles."""
    rng = random.Random(seed)
    context = ir.Context()
    result = {"seed": seed, "escaped": [], "invalid": None}
    try:
        with Kernel("other", [Global("f32"), "index"], context=context) as other:
            foreign = [other.thread_id(), other.shared("o", 64), other.registers(4, "f32"), *other.arguments]
        chip = rng.choice(CHIPS)
        cluster = rng.choice([None, None, (2, 1, 1)]) if chip.startswith("sm_90") else None
        with Kernel("k", [Global("f16"), "index", Global("f32"), TensorMap()], block=(rng.choice([128, 32, 256, 256]), 1, 1),
                    chip=chip, fast_math=rng.random() < 0.3, context=context, cluster=cluster) as kernel:
            program = Program(rng, kernel, other, foreign)
            for _ in range(steps):
                program.step(0)
    except Exception as error:  # noqa: BLE001 - outside any call: the builder's own entry or exit
        result["escaped"].append(f"kernel: {type(error).__name__}: {error}")
        return result
    result.update(calls=program.calls, refused=program.refused, escaped=program.escaped)
    try:
        for text in compile_to_ptx_texts(kernel.module):
            cubin_of_ptx(text.text, text.chip)
    except CompileError as error:
        result["invalid"] = str(error)[-1500:]
    return result
