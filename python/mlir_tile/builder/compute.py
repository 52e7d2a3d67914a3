"""Compute: the checked `tile.matrix_transfer`, mma.sync on register storage, packing and byte permutes,
the fast-math choices, warp shuffles and reductions, barriers."""
from __future__ import annotations

from typing import Sequence

from mlir import ir
from mlir.dialects import arith, gpu, llvm, math, memref, nvvm, scf, vector

from mlir_tile import contract
from mlir_tile.isa.atoms import MmaAtom
from mlir_tile.builder import asynchrony
from mlir_tile.builder.common import (BuilderError, caller_location, location_text, check_visible, count, enclosing_blocks, is_int,
                                      kernel_analyses, memref_value, parse_type, typed_value)
from mlir_tile.dialect import load_dialect
from mlir_tile.dialect.tile import MatrixTransferOp
from mlir_tile.algebra.layout import Layout
from mlir_tile.analysis.adapter import transfer_verdict
from mlir_tile.analysis.ir_facts import FactCache


def transfer(
    opcode: str,
    dst: ir.Value,
    src: ir.Value,
    *,
    dst_layout: Layout | str,
    src_layout: Layout | str,
    scope: str = "warp",
    check: bool = True,
    loc: ir.Location | None = None,
    ip: ir.InsertionPoint | None = None,
) -> MatrixTransferOp:
    """Build `"tile.matrix_transfer"(dst, src)` and check it: the result reads its attributes back as Python
    values (`op.dst_layout` is a Layout). Raises `contract.ContractError` for an illegal transfer, with the
    verdict the verifier pass gives on the same IR (the op is then not left in the IR); check=False builds
    one on purpose, e.g. for a diagnostics test (`mlir_tile.dialect.tile.matrix_transfer` never checks)."""
    if loc is not None and not isinstance(loc, ir.Location):
        raise BuilderError(f"transfer: loc is an ir.Location, got {loc!r}")
    if ip is not None and not isinstance(ip, ir.InsertionPoint):
        raise BuilderError(f"transfer: ip is an ir.InsertionPoint, got {ip!r}")
    if (loc or ir.Location.current) is None or (ip or ir.InsertionPoint.current) is None:
        raise BuilderError("transfer: builds at an insertion point, inside `with Kernel(...)` (or pass loc and ip)")
    load_dialect((loc or ir.Location.current).context)
    for what, text in (("opcode", opcode), ("scope", scope)):
        if not isinstance(text, str):
            raise BuilderError(f"transfer: {what} must be a string, got {text!r}")
    for what, value in (("dst", dst), ("src", src)):
        memref_value(value, f"transfer {what}")
    check_visible([dst, src], "transfer", enclosing_blocks((ip or ir.InsertionPoint.current).block))
    for what, layout in (("dst_layout", dst_layout), ("src_layout", src_layout)):
        if not isinstance(layout, (Layout, str)):
            raise BuilderError(f"transfer: {what} must be a Layout or its text, got {layout!r}")
    loc = loc or caller_location((ip.block.owner.context if ip else ir.Location.current.context))
    for value in (dst, src):
        asynchrony.access_anywhere(value, f"a transfer ({opcode})", lambda: f"at {location_text(loc)}",
                                   writes=value is dst)
    op = MatrixTransferOp(opcode, dst, src, dst_layout=dst_layout, src_layout=src_layout, scope=scope, loc=loc, ip=ip)
    if check:
        analyses = kernel_analyses(op)
        _, violations = transfer_verdict(op, FactCache(analyses))
        if violations:
            if analyses is not None:
                analyses.clear()  # (an extended analysis assumes no op was erased)
            op.operation.erase()
            raise contract.ContractError(violations)
    return op


SHUFFLE_MODES = ("xor", "down", "up", "idx")


class Compute:
    # ----- mma.sync -----
    def mma(self, atom: MmaAtom, a: ir.Value, a_slots: Sequence[int], b: ir.Value, b_slots: Sequence[int],
            accumulators: ir.Value, c_slots: Sequence[int], element: str | None = None, saturate: bool = False) -> None:
        """One `mma.sync.aligned.<atom>.row.col` (`atoms.MMA_M16N8K16`: f32 accumulators, f16 or bf16;
        `atoms.MMA_M16N8K32`: s32, s8 or u8, wrapping on overflow unless `saturate`) on the words that transfers
        filled: A from `a_slots` (a0, a1, ...) of register storage `a`, B from `b_slots` (b0, b1) of `b`, the
        accumulators in `c_slots` (c0..c3) of `accumulators`, updated in place; `element` the atom's first type
        by default. Every attribute of nvvm.mma.sync is set (the bindings abort the process when the
        multiplicand types are left to inference)."""
        if not isinstance(atom, MmaAtom):
            raise BuilderError(f"mma: an MmaAtom (mlir_tile.isa.atoms.MMA_M16N8K16, MMA_M16N8K32), got {atom!r}")
        element = atom.elements[0] if element is None else element
        (a_count, b_count, c_count), integer = atom.registers, atom.accumulator == "s32"
        if (element not in atom.elements or not _slots(a_slots, a_count) or not _slots(b_slots, b_count)
                or not _slots(c_slots, c_count)):
            raise BuilderError(f"mma {atom.name}: element one of {', '.join(atom.elements)}, {a_count} A slots, "
                               f"{b_count} B slots and {c_count} accumulator slots")
        if not isinstance(saturate, bool) or (saturate and not integer):
            raise BuilderError(f"mma {atom.name}: saturate is True or False, and True only for integer accumulators; "
                               f"got {saturate!r}")
        if integer:
            overflow = ir.Attribute.parse(f"#nvvm.mma_int_overflow<{'satfinite' if saturate else 'wrapped'}>")
            self._mma(atom.shape, element, ir.IntegerType.get_signless(32), a, a_slots, b, b_slots, accumulators,
                      c_slots, lambda word: word, int_overflow_behavior=overflow)
            return
        # NVVM takes f16 pairs as vector<2xf16> and bf16 pairs as the i32 word that holds them
        pair = ir.VectorType.get([2], parse_type(element))
        self._mma(atom.shape, element, ir.F32Type.get(), a, a_slots, b, b_slots, accumulators, c_slots,
                  (lambda word: llvm.bitcast(pair, word)) if element == "f16" else (lambda word: word))

    def _mma(self, shape: tuple[int, int, int], element: str, accumulator: ir.Type, a, a_slots, b, b_slots,
             accumulators, c_slots, operand, **attributes) -> None:
        """One nvvm.mma.sync (row x col) with every attribute set: operands loaded from register storage
        (`operand` turns a loaded word into the multiplicand's type), results stored back to the accumulators."""
        m, n, k = shape
        self._require("mma", "nvvm.mma.sync", f"m{m}n{n}k{k}", element)
        i32 = ir.IntegerType.get_signless(32)
        for name, buffer, slots in (("A", a, a_slots), ("B", b, b_slots), ("accumulator", accumulators, c_slots)):
            kind = ir.MemRefType(memref_value(buffer, "mma", "private").type)
            element_type = kind.element_type
            # f16 pairs are bitcast from their word, which may be an f32 container; other pairs pass as the i32
            wanted = [accumulator] if name == "accumulator" else [i32, ir.F32Type.get()] if element == "f16" else [i32]
            if element_type not in wanted:
                raise BuilderError(f"mma: the {name} registers of the {element} mma hold 32-bit words of "
                                   f"{' or '.join(map(str, wanted))}, got {element_type}")
            if any(not is_int(slot) or not 0 <= slot < kind.shape[0] for slot in slots):
                raise BuilderError(f"mma: the {name} slots {list(slots)} are not all slots of {kind} (0 to "
                                   f"{kind.shape[0] - 1})")
        if len(set(c_slots)) != len(c_slots):
            raise BuilderError(f"mma: the accumulator slots {list(c_slots)} repeat a slot")
        result = nvvm.mma_sync(
            ir.Type.parse(f"!llvm.struct<({', '.join([str(accumulator)] * 4)})>"),
            ir.Attribute.parse(f"#nvvm.shape<m = {m}, n = {n}, k = {k}>"),
            ir.Attribute.parse("#nvvm.mma_layout<row>"), ir.Attribute.parse("#nvvm.mma_layout<col>"),
            [operand(self.load(a, [slot])) for slot in a_slots], [operand(self.load(b, [slot])) for slot in b_slots],
            [self.load(accumulators, [slot]) for slot in c_slots],
            multiplicand_a_ptx_type=ir.Attribute.parse(f"#nvvm.mma_type<{element}>"),
            multiplicand_b_ptx_type=ir.Attribute.parse(f"#nvvm.mma_type<{element}>"), **attributes)
        for position, slot in enumerate(c_slots):
            self.store(llvm.extractvalue(accumulator, result, [position]), accumulators, [slot])

    def pack_f16(self, low: ir.Value, high: ir.Value, element: str = "f16") -> ir.Value:
        """Two f32 values rounded to 16-bit floats in one i32 word, `low` in the low half (what stmatrix
        stores for a packed C/D fragment pair)."""
        _f32(low, "pack_f16"), _f32(high, "pack_f16")
        if element not in ("f16", "bf16"):
            raise BuilderError(f"pack_f16: element f16 or bf16, got {element!r}")
        # one vector<2xf32> -> vector<2xhalf> conversion: PTX's cvt.rn.{f16|bf16}x2.f32, one instruction
        pair = vector.from_elements(ir.VectorType.get([2], ir.F32Type.get()), [low, high])
        narrow = arith.truncf(ir.VectorType.get([2], parse_type(element)), pair)
        return llvm.bitcast(ir.IntegerType.get_signless(32), narrow)

    def pack_f8(self, values: Sequence[ir.Value], element: str = "e4m3") -> ir.Value:
        """Four f32 values rounded to 8-bit floats (to nearest, saturated to the finite range) in one i32 word,
        values[0] in its lowest byte (an 8-bit wgmma A register's order)."""
        if element not in ("e4m3", "e5m2") or len(values) != 4:
            raise BuilderError(f"pack_f8: four values and element e4m3 or e5m2, got {len(values)}, {element!r}")
        for value in values:
            _f32(value, "pack_f8")
        # cvt's first operand goes to the upper byte of each pair
        text = ("{ .reg .b16 lo, hi; cvt.rn.satfinite.%s.f32 lo, $2, $1; cvt.rn.satfinite.%s.f32 hi, $4, $3; "
                "mov.b32 $0, {lo, hi}; }" % ((element + "x2",) * 2))
        return llvm.inline_asm(ir.IntegerType.get_signless(32), list(values), text, "=r,f,f,f,f")

    def byte_permute(self, low: ir.Value, high: ir.Value, selector: ir.Value | int) -> ir.Value:
        """`prmt.b32`: byte i of the i32 result is byte (nibble i of `selector`) & 7 of the eight bytes of
        high:low (low's are 0-3; a nibble's bit 3 replicates that byte's sign), the PTX ISA's default mode
        (`reference.prmt`). `selector`: an i32 value (e.g. a `lane_table`'s) or an int below 2^16."""
        typed_value(low, "byte_permute: low", "i32"), typed_value(high, "byte_permute: high", "i32")
        if is_int(selector):
            if not 0 <= selector < 1 << 16:
                raise BuilderError(f"byte_permute: a selector is four nibbles (0 to 0xFFFF), got {selector!r}")
            selector = self.constant(selector)
        else:
            typed_value(selector, "byte_permute: selector", "i32")
        i32 = ir.IntegerType.get_signless(32)
        return llvm.inline_asm(i32, [low, high, selector], "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r")

    def transpose_bytes(self, plan, buffer: ir.Value, source_byte: ir.Value | int, target_byte: ir.Value | int) -> None:
        """Run `plan` (a `byte_transpose.ByteTranspose`: a tile of bytes in rows of K rewritten in rows of N) by
        this warpgroup: the source tile from byte `source_byte` of the shared byte `buffer`, the target from
        `target_byte` (each on its swizzle's period, so that the views keep the swizzle in place); each step's
        two ldmatrix.trans, four byte permutes (each lane's selector: `lane_table`) and two stmatrix, the
        transfers checked as any. The stores are generic-proxy writes: `async_proxy_fence` before wgmma reads."""
        from mlir_tile.tiling.byte_transpose import ByteTranspose

        if not isinstance(plan, ByteTranspose):
            raise BuilderError(f"transpose_bytes: a byte_transpose.ByteTranspose, got {plan!r}")
        memref_value(buffer, "transpose_bytes: buffer", "shared")
        loaded, stored = [self.registers(4) for _ in plan.loads], [self.registers(4) for _ in plan.stores]
        selectors = [self.lane_table(list(lanes)) for lanes in plan.selectors]

        source, target = (self.view(buffer, (tile.cosize,), "i32", at)
                          for tile, at in ((plan.source, source_byte), (plan.target, target_byte)))

        def view(tile: ir.Value, words: int) -> ir.Value:  # (a subview's offset enters the swizzle)
            return self.subview(tile, words, ir.MemRefType(tile.type).shape[0] - words)
        for source_at, target_at in plan.steps:
            for load, registers in zip(plan.loads, loaded):
                transfer(load.opcode, registers, view(source, source_at + load.offset),
                         dst_layout=load.registers, src_layout=load.shared, scope="warpgroup")
            for selector, registers in zip(selectors, stored):
                for slot in range(4):
                    low, high = (self.load(words, [slot]) for words in loaded)
                    self.store(self.byte_permute(low, high, selector), registers, [slot])
            for store, registers in zip(plan.stores, stored):
                transfer(store.opcode, view(target, target_at + store.offset), registers,
                         dst_layout=store.shared, src_layout=store.registers, scope="warpgroup")

    def lane_table(self, values: Sequence[int]) -> ir.Value:
        """values[lane id] as an i32, for 32 ints of 32 bits: selects on the bits of the lane id the table
        depends on (a constant where it depends on none)."""
        if (not isinstance(values, (list, tuple)) or len(values) != 32
                or any(not is_int(v) or not -(1 << 31) <= v < 1 << 32 for v in values)):
            raise BuilderError(f"lane_table: 32 ints of 32 bits, one a lane, got {values!r}")
        bits = [b for b in range(5) if any(values[lane] != values[lane ^ 1 << b] for lane in range(32))]
        lane = self.lane_id()

        def pick(lane_bits: int, remaining: list[int]) -> ir.Value:
            if not remaining:
                return self.constant(values[lane_bits])
            bit, rest = remaining[0], remaining[1:]
            is_set = self.compare("ne", arith.andi(lane, self.index(1 << bit)), 0)
            return arith.select(is_set, pick(lane_bits | 1 << bit, rest), pick(lane_bits, rest))
        return pick(0, bits)

    # ----- f32 math, fast or exact by the kernel's fast_math -----
    def exp2(self, value: ir.Value) -> ir.Value:
        """2^value of an f32: `ex2.approx.ftz.f32` with fast_math, else `math.exp2` (libdevice's exp2f)."""
        _f32(value, "exp2")
        if self.fast_math:
            return llvm.call_intrinsic(ir.F32Type.get(), "llvm.nvvm.ex2.approx.ftz.f", [value], [], [])
        return math.exp2(value)

    def divide(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """a / b of f32s: `div.approx.ftz.f32` with fast_math, else the IEEE division `div.rn.f32`."""
        _f32(a, "divide"), _f32(b, "divide")
        if self.fast_math:
            return llvm.call_intrinsic(ir.F32Type.get(), "llvm.nvvm.div.approx.ftz.f", [a, b], [], [])
        return arith.divf(a, b)

    # ----- warps -----
    def shuffle(self, value: ir.Value, offset: int, mode: str = "xor", width: int = 32) -> ir.Value:
        """`shfl.sync` of a 32-bit value over the whole warp, within each segment of `width` consecutive lanes (a
        power of two up to 32, CUDA's `__shfl_sync` width): xor (butterfly), down or up by `offset` (a lane whose
        source would leave its segment keeps its own value), or idx (`offset` the source lane within the
        segment). Every lane takes part (upstream's `gpu.shuffle` width is the count of lanes taking part from
        lane 0, the rest undefined: a narrower segment is made here from the full warp's shuffle)."""
        if mode not in SHUFFLE_MODES:
            raise BuilderError(f"shuffle: mode is one of {SHUFFLE_MODES}, got {mode!r}")
        if width not in (1, 2, 4, 8, 16, 32) or not isinstance(offset, int) or not 0 <= offset < width:
            raise BuilderError(f"shuffle: width a power of two up to 32 and 0 <= offset < width, got {offset!r}, "
                               f"{width!r}")
        if not isinstance(value, ir.Value) or getattr(value.type, "width", None) != 32:
            raise BuilderError(f"shuffle: a 32-bit value (f32, i32), got {value!r}")
        kind = getattr(gpu.ShuffleMode, mode.upper())
        if width == 32 or mode == "xor":  # (a butterfly by less than the width stays in its segment)
            return gpu.shuffle(value, self.constant(offset), self.constant(32), kind)[0]
        lane, warp = self.lane_id(), self.constant(32)
        within = arith.remui(lane, self.index(width))
        if mode == "idx":  # (the segment's first lane plus the offset)
            source = arith.index_cast(ir.IntegerType.get_signless(32), arith.addi(arith.subi(lane, within),
                                                                                   self.index(offset)))
            return gpu.shuffle(value, source, warp, kind)[0]
        moved = gpu.shuffle(value, self.constant(offset), warp, kind)[0]
        stays = (arith.cmpi(arith.CmpIPredicate.ult, arith.addi(within, self.index(offset)), self.index(width))
                 if mode == "down" else arith.cmpi(arith.CmpIPredicate.uge, within, self.index(offset)))
        return arith.select(stays, moved, value)

    def broadcast(self, value: ir.Value) -> ir.Value:
        """`value` as lane 0 of the warp holds it (`shfl.sync.idx` from lane 0; an index in two 32-bit halves):
        the same in every lane by construction, which ptxas then keeps in uniform registers with what is computed
        from it (CUTLASS's canonical_warp_group_idx), so that a wgmma descriptor or a pipeline index made from it
        reaches the tensor cores without a move from vector registers (R2UR) each time. For a value the lanes
        share already (a warpgroup's index, a persistent walk's item), the same value."""
        if not isinstance(value, ir.Value) or not (isinstance(value.type, ir.IndexType)
                                                   or getattr(value.type, "width", None) == 32):
            raise BuilderError(f"broadcast: an index or a 32-bit value, got {value!r}")
        if not isinstance(value.type, ir.IndexType):
            return self.shuffle(value, 0, "idx")
        i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        wide = arith.index_cast(i64, value)
        low, high = (self.shuffle(arith.trunci(i32, half), 0, "idx")
                     for half in (wide, arith.shrui(wide, arith.constant(i64, 32))))
        joined = arith.ori(arith.extui(i64, low), arith.shli(arith.extui(i64, high), arith.constant(i64, 32)))
        return arith.index_cast(ir.IndexType.get(), joined)

    def warp_reduce(self, value: ir.Value, operation: str, lanes: int = 32) -> ir.Value:
        """`operation` (max, min, add) of `value` over each group of `lanes` consecutive lanes (a power of two
        up to 32), every lane of a group getting the result: a butterfly of xor shuffles, log2(lanes) steps."""
        combine = {"max": arith.maximumf, "min": arith.minimumf, "add": arith.addf}
        if not isinstance(operation, str) or operation not in combine:
            raise BuilderError(f"warp_reduce: operation is one of {sorted(combine)}, got {operation!r}")
        if lanes not in (1, 2, 4, 8, 16, 32):
            raise BuilderError(f"warp_reduce: lanes a power of two up to 32, got {lanes!r}")
        _f32(value, "warp_reduce")
        distance = lanes // 2
        while distance:
            value = combine[operation](value, self.shuffle(value, distance))
            distance //= 2
        return value

    def leads_lanes(self, lanes: int) -> ir.Value:
        """Whether this lane is the first of its group of `lanes` consecutive lanes (an i1): the one of a group
        that stores what `warp_reduce(..., lanes=lanes)` gave all of them."""
        if lanes not in (1, 2, 4, 8, 16, 32):
            raise BuilderError(f"leads_lanes: lanes a power of two up to 32, got {lanes!r}")
        return arith.cmpi(arith.CmpIPredicate.eq, arith.remui(self.lane_id(), self.index(lanes)), self.index(0))

    def any_lane(self, predicate: ir.Value) -> ir.Value:
        """`vote.sync.any.pred` over the full warp: true in every lane where `predicate` (an i1) is true in
        some lane, so that a branch on it is uniform across the warp."""
        if not isinstance(predicate, ir.Value) or predicate.type != ir.IntegerType.get_signless(1):
            raise BuilderError(f"any_lane: an i1 predicate, got {predicate!r}")
        return nvvm.vote_sync(predicate.type, self.constant(-1), predicate, nvvm.VoteSyncKind.any)

    def barrier(self) -> None:
        """`bar.sync 0`: every thread of the block arrives before any goes on."""
        gpu.barrier()

    # ----- mbarriers: a phase completes when its arrivals are in, without holding the arriving threads -----
    def mbarriers(self, name: str, number: int, arrivals: int) -> ir.Value:
        """`number` mbarriers in shared memory (a workgroup buffer `name` of 8-byte words), each completing a
        phase at `arrivals` arrivals: thread 0 of the block initializes them here (`mbarrier.init`), then a
        `bar.sync`, so that no thread arrives or waits before they are; in a clustered kernel the fence after
        the initialization and a cluster barrier instead, so that no peer CTA's multicast or arrival reaches
        them first. Phases count from 0; a thread waits for phase n by its parity (`wait_phase(..., n % 2)`),
        so no barrier may run two phases ahead of a waiter."""
        self._require("mbarriers", "nvvm.mbarrier.init")
        count(arrivals, "mbarriers: arrivals")
        if arrivals >= 1 << 20:  # PTX: the expected count is at most 2^20 - 1
            raise BuilderError(f"mbarriers: at most {(1 << 20) - 1} arrivals a phase, got {arrivals}")
        if ir.InsertionPoint.current.block != self.body:
            raise BuilderError("mbarriers: at the kernel's top level, where every thread meets the bar.sync after "
                               "the initialization (not inside a loop or a branch)")
        barriers = self.shared(name, count(number, "mbarriers: number"), "i64", 8)
        self.mbarrier_buffers.add(name)
        with self.if_(self.compare("eq", self.thread_id(), 0)):
            for index in range(number):
                nvvm.mbarrier_init(self._mbarrier(barriers, index), self.constant(arrivals))
        if self.cluster is None:
            gpu.barrier()
            return barriers
        self._require("mbarriers", "nvvm.fence.mbarrier.init")
        nvvm.fence_mbarrier_init()
        self.cluster_barrier()
        return barriers

    def arrive(self, barriers: ir.Value, index: ir.Value | int, *, per_warp: bool = False) -> None:
        """`mbarrier.arrive`: this thread's arrival on mbarrier `index` (its shared memory reads and writes
        before it are visible to a thread that then sees the phase complete). `per_warp`: the warp's threads
        meet (`bar.warp.sync`, which orders their accesses before lane 0's) and lane 0 arrives for all of
        them, so that a phase counts warps: one shared-memory atomic a warp, not 32."""
        if not isinstance(per_warp, bool):
            raise BuilderError(f"arrive: per_warp is True or False, got {per_warp!r}")
        if not per_warp:
            nvvm.mbarrier_arrive(ir.IntegerType.get_signless(64), self._mbarrier(barriers, index))
            return
        nvvm.bar_warp_sync(self.constant(-1))
        with self.if_(self.compare("eq", self.lane_id(), 0)):
            nvvm.mbarrier_arrive(ir.IntegerType.get_signless(64), self._mbarrier(barriers, index))

    def arrive_on_copies(self, barriers: ir.Value, index: ir.Value | int) -> None:
        """`cp.async.mbarrier.arrive.noinc`: this thread's arrival on mbarrier `index`, made by the hardware
        once every cp.async this thread issued before it has landed (one of the phase's `arrivals`)."""
        self._require("arrive_on_copies", "nvvm.cp.async.mbarrier.arrive")
        nvvm.cp_async_mbarrier_arrive(self._mbarrier(barriers, index), noinc=True)

    def wait_phase(self, barriers: ir.Value, index: ir.Value | int, parity: ir.Value | int) -> None:
        """Wait until the phase of mbarrier `index` with this parity (0 or 1, an i32 or index value) has
        completed: `mbarrier.try_wait.parity` in a loop (each try suspends the thread for a while, in
        hardware, rather than spinning)."""
        self._require("wait_phase", "nvvm.mbarrier.try_wait.parity")
        address = self._mbarrier(barriers, index)
        i32 = ir.IntegerType.get_signless(32)
        if is_int(parity) and parity not in (0, 1) or not is_int(parity) and not isinstance(parity, ir.Value):
            raise BuilderError(f"wait_phase: parity 0 or 1, or an i32 or index value, got {parity!r}")
        if isinstance(parity, ir.Value):
            typed_value(parity, "wait_phase parity", "i32", "index")
        parity = self.constant(parity) if is_int(parity) else arith.andi(  # the low bit: the parity
            parity if parity.type == i32 else arith.index_cast(i32, parity), self.constant(1))
        loop = scf.WhileOp([], [])
        before = loop.before.blocks.append()
        with ir.InsertionPoint(before):
            done = nvvm.mbarrier_try_wait(ir.IntegerType.get_signless(1), address, parity)
            scf.ConditionOp(arith.xori(done, self.constant(1, "i1")), [])
        with ir.InsertionPoint(loop.after.blocks.append()):
            scf.YieldOp([])

    # ----- flags in global memory: an order among CTAs (a deterministic reduction's turns) -----
    def wait_flag(self, flags: ir.Value, index: ir.Value | int, value: ir.Value | int) -> None:
        """Spin until the u32 flag `flags[index]` (a Global of i32) equals `value`: `ld.acquire.gpu` in a loop,
        then `fence.proxy.async.global`, so that this thread's TMA operations after it (a reduction into what the
        flag guards) come after the writes its last setter released (`release_flag`). The caller guarantees a
        setter: a CTA that waits for one launched after it, or for a count never reached, waits for ever."""
        i32 = ir.IntegerType.get_signless(32)
        address = self._flag_address(flags, index, "wait_flag")
        wanted = self.constant(value) if is_int(value) else typed_value(value, "wait_flag value", "i32")
        loop = scf.WhileOp([], [])
        with ir.InsertionPoint(loop.before.blocks.append()):
            seen = llvm.inline_asm(i32, [address], "ld.acquire.gpu.u32 $0, [$1];", "=r,l", has_side_effects=True)
            scf.ConditionOp(arith.cmpi(arith.CmpIPredicate.ne, seen, wanted), [])
        with ir.InsertionPoint(loop.after.blocks.append()):
            scf.YieldOp([])
        _global_proxy_fence()

    def release_flag(self, flags: ir.Value, index: ir.Value | int, increment: int = 1) -> None:
        """Add `increment` to the u32 flag `flags[index]`, releasing this thread's writes before it, its completed
        TMA writes included (`tma_store_wait(complete=True)` first): `fence.proxy.async.global`, then
        `red.release.gpu.add.u32`."""
        if not is_int(increment) or not 0 < increment < 2 ** 31:
            raise BuilderError(f"release_flag: increment a positive 32-bit int, got {increment!r}")
        address = self._flag_address(flags, index, "release_flag")
        _global_proxy_fence()
        llvm.inline_asm(None, [address, self.constant(increment)], "red.release.gpu.add.u32 [$0], $1;", "l,r",
                        has_side_effects=True)

    def clear_flag(self, flags: ir.Value, index: ir.Value | int) -> None:
        """Set the u32 flag `flags[index]` back to 0 (`st.relaxed.gpu`), for the next launch that counts on it: by
        the thread that waited for its last count, when no other thread of the launch touches it again (the
        next launch on the stream sees it after this one has ended)."""
        address = self._flag_address(flags, index, "clear_flag")
        llvm.inline_asm(None, [address, self.constant(0)], "st.relaxed.gpu.global.u32 [$0], $1;", "l,r",
                        has_side_effects=True)

    def _flag_address(self, flags: ir.Value, index: ir.Value | int, what: str) -> ir.Value:
        kind = ir.MemRefType(memref_value(flags, what).type)
        if kind.rank != 1 or kind.element_type != ir.IntegerType.get_signless(32) or kind.memory_space is not None:
            raise BuilderError(f"{what}: flags are a global i32 array (Global('i32')), got {kind}")
        (place,) = self._indices(flags, [index], what)
        i64 = ir.IntegerType.get_signless(64)
        base = arith.index_cast(i64, memref.extract_aligned_pointer_as_index(flags))
        return arith.addi(base, arith.index_cast(i64, arith.muli(place, self.index(4))))

    def _mbarrier(self, barriers: ir.Value, index: ir.Value | int) -> ir.Value:
        kind = ir.MemRefType(memref_value(barriers, "mbarrier").type)
        owner = barriers.owner
        made = isinstance(owner, ir.OpView) and owner.operation.name == "memref.get_global" and ir.FlatSymbolRefAttr(
            owner.attributes["name"]).value in self.mbarrier_buffers
        if not made:  # an mbarrier is used only after `mbarriers` initialized it
            raise BuilderError(f"mbarrier: the buffer `mbarriers` made, got {barriers.get_name()}: {kind}")
        if is_int(index) and not 0 <= index < kind.shape[0]:
            raise BuilderError(f"mbarrier: index {index} of {kind.shape[0]} mbarriers")
        i64 = ir.IntegerType.get_signless(64)
        base = arith.index_cast(i64, memref.extract_aligned_pointer_as_index(barriers))
        offset = arith.index_cast(i64, arith.muli(self.as_index(index), self.index(8)))
        return llvm.inttoptr(llvm.PointerType.get(3), arith.addi(base, offset))


def _global_proxy_fence() -> None:
    """`fence.proxy.async.global`: this thread's global accesses ordered with its async-proxy (TMA) ones."""
    llvm.inline_asm(None, [], "fence.proxy.async.global;", "", has_side_effects=True)


def _slots(slots, number: int) -> bool:
    return isinstance(slots, (list, tuple)) and len(slots) == number


def _f32(value, what: str) -> None:
    typed_value(value, what, "f32")
