"""Warpgroup MMA (sm_90a): `wgmma.mma_async` on shared tensors, the descriptors derived from their layouts
and proven (`mlir_tile.isa.wgmma`), the accumulators in registers with their thread-value layout, and the
asynchrony: a batch is fenced and committed as one group, `wgmma_wait` retires groups."""
from __future__ import annotations

import contextlib

from typing import Sequence

from mlir import ir
from mlir.dialects import arith, llvm, memref, nvvm

from mlir_tile.isa import targets
from mlir_tile.analysis.ir_facts import access_alignment, upper_bound
from mlir_tile.isa.atoms import WARPGROUP_THREADS, WgmmaAtom
from mlir_tile.isa.targets import MAX_THREAD_REGISTERS, REGISTER_FILE
from mlir_tile.builder.integers import with_operators
from mlir_tile.builder.common import BuilderError, is_int, memref_value
from mlir_tile.isa.tma import ALIGNMENT
from mlir_tile.isa.wgmma import Descriptor, WgmmaMismatch, descriptor_for

# the descriptor's major as NVVM's layout attribute: A row-major (M x K, K contiguous) is K-major; B col-major
# (K x N, K contiguous) is K-major
NVVM_LAYOUT = {("a", "K"): "row", ("a", "MN"): "col", ("b", "K"): "col", ("b", "MN"): "row"}


class Accumulators:
    """A warpgroup's m64nN accumulators (`Kernel.accumulators`): `registers` (N / 2 f32 a thread) laid out by
    the atom's `c` thread-value layout."""

    def __init__(self, kernel, atom: WgmmaAtom, registers: ir.Value):
        self.kernel, self.atom, self.registers = kernel, atom, registers

    def held(self) -> list:
        return [self.registers]

    def coordinate(self, slot: int) -> tuple[ir.Value, ir.Value]:
        """(row, column) of the 64 x N tile that this thread's accumulator `slot` holds, index values."""
        k, (m, n, _) = self.kernel, self.atom.shape
        if not is_int(slot) or not 0 <= slot < n // 2:
            raise BuilderError(f"accumulators: slot 0 to {n // 2 - 1}, got {slot!r}")
        thread = arith.remui(k.thread_id(), k.index(WARPGROUP_THREADS))
        place = k.identity_tensor((m, n)).partition([self.atom.c.rows, self.atom.c.columns])[thread, slot]
        return tuple(map(with_operators, place))


class Fragment:
    """A warpgroup's A operand in registers (wgmma's RS form) of `atom` over `steps` K steps: `registers` (i32
    words), K step s in slots 4 s .. 4 s + 3 (a0..a3 of the atom's `a` thread-value layout). `key_order`: where
    its columns came from another order (`atoms.a_key_order`: column j of the accumulators is A's column
    key_order(j)), which `wgmma` reads B's K through; None where they kept their places."""

    def __init__(self, kernel, atom: WgmmaAtom, registers: ir.Value, steps: int, key_order=None):
        self.kernel, self.atom, self.registers, self.steps, self.key_order = kernel, atom, registers, steps, key_order

    def held(self) -> list:
        return [self.registers]

    def step_slots(self, step: int) -> list[int]:
        return [4 * step + i for i in range(4)]


class Warpgroups:
    def accumulators(self, atom: WgmmaAtom) -> Accumulators:
        """The accumulators of `atom` for this thread, zeroed: N / 2 f32 registers."""
        self._warpgroup_kernel("accumulators", atom)
        registers = self.registers(atom.shape[1] // 2, "f32")
        zero = self.constant(0.0, "f32")
        for slot in range(atom.shape[1] // 2):
            self.store(zero, registers, [slot])
        self.wgmma_groups.storage(registers, f"the {atom.name} accumulators")
        return Accumulators(self, atom, registers)

    def accumulators_as_a(self, accumulators: Accumulators, atom: WgmmaAtom, into: Fragment | None = None) -> Fragment:
        """`accumulators` (64 x N, f32) rounded to `atom`'s element and packed as its register A operand over N /
        K steps, each thread's own (FlashAttention's P for P V: no shared memory, no shuffle); the layouts prove
        that every element stays in its thread (`atoms.accumulators_as_a`), else BuilderError [wgmma-rs-layout].
        8-bit A (e4m3, e5m2; saturated to the element's finite range) holds the columns in the order that keeps
        them in their threads (`atoms.a_key_order`, FlashAttention-3's fp8 P): the Fragment's `key_order`, through
        which `wgmma` reads its B, so that B's tile is given in the accumulators' order (V as it is, for P V).
        `into`: a Fragment of this atom and size made by an earlier call, written over (a value a loop carries:
        P of one key tile read by the next turn's P V); writing it while a wgmma group reads it is refused
        [wgmma-in-flight]."""
        from mlir_tile.isa.atoms import a_key_order, accumulators_as_a

        self._warpgroup_kernel("accumulators_as_a", atom)
        if not isinstance(accumulators, Accumulators):
            raise BuilderError(f"accumulators_as_a: Kernel.accumulators(...), got {accumulators!r}")
        try:
            order = a_key_order(accumulators.atom, atom)
            slots = accumulators_as_a(accumulators.atom, atom, order)
        except ValueError as error:
            raise BuilderError(f"[wgmma-rs-layout] {error}") from None
        if into is not None and (not isinstance(into, Fragment) or into.atom != atom or into.steps != len(slots) // 4):
            raise BuilderError(f"accumulators_as_a: into is a Fragment of {atom.name} over {len(slots) // 4} K steps "
                               f"(an earlier accumulators_as_a of these accumulators), got {into!r}")
        registers = self.registers(len(slots), "i32") if into is None else into.registers
        for word, parts in enumerate(slots):
            values = [self.load(accumulators.registers, [slot]) for slot in parts]
            packed = self.pack_f16(*values, atom.element) if len(parts) == 2 else self.pack_f8(values, atom.element)
            self.store(packed, registers, [word])
        if into is not None:
            return into
        self.wgmma_groups.storage(registers, f"the {atom.name} register A operand")
        return Fragment(self, atom, registers, len(slots) // 4, order)

    def wgmma(self, atom: WgmmaAtom, a, b, accumulators: Accumulators, *, accumulate: bool = True,
              a_row_block: ir.Value | int = 0) -> None:
        """D += A B^T over the K of shared tiles `a` (M x K: the warpgroup's 64 rows at row block `a_row_block`,
        an int or an index value with a proven bound; or a register `Fragment`, the RS form) and `b` (N x K),
        one `wgmma.mma_async` per `atom` K,
        fenced (`wgmma.fence`) and committed as one group (`wgmma.commit_group`): the accumulators are this
        warpgroup's until `wgmma_wait` retires the group. `accumulate=False`: D = A B^T (the first K step's
        scale-d is 0). Each tile's descriptors come from its layout (K- or MN-major, any swizzle mode;
        `wgmma.descriptor_for`), every element of every operand checked; BuilderError naming the element where
        no descriptor reads the layout, or where a tile's start is not proven on its swizzle's repeat."""
        self._warpgroup_kernel("wgmma", atom)
        if not isinstance(accumulators, Accumulators) or accumulators.atom != atom:
            raise BuilderError(f"[wgmma-accumulators] wgmma: accumulators are Kernel.accumulators(atom) of this atom "
                               f"({atom.name}), "
                               f"got {accumulators!r}")
        if not isinstance(accumulate, bool):
            raise BuilderError(f"wgmma: accumulate is True or False, got {accumulate!r}")
        _, n, k_step = atom.shape
        depth = _operand_tile("b", b, atom)
        if isinstance(a, Fragment) and a.key_order is not None:  # B's K read in the order A holds its columns
            b = _in_key_order(b, a.key_order)
        if depth[0] != n or depth[1] % k_step:
            raise BuilderError(f"[wgmma-operand] wgmma {atom.name}: b is {n} x K, K a multiple of {k_step}; got b "
                               f"{depth[0]} x {depth[1]}")
        steps = depth[1] // k_step
        b_fields, b_starts, _ = _descriptors("b", b, atom, n, steps, [0])
        _k_major("b", b_fields, atom)
        b_base = self._descriptor_base(b.memory, b_fields, 0, 0)
        b_descriptors = [arith.addi(b_base, self._i64(b_starts[s] >> 4)) for s in range(steps)]
        if isinstance(a, Fragment):
            if a.atom.element != atom.element or a.steps != steps:
                raise BuilderError(f"[wgmma-operand] wgmma {atom.name}: a register A of {atom.element} over {steps} K "
                                   f"steps (b's K), got one of {a.atom.element} over {a.steps}")
            a_operands = [[self.load(a.registers, [slot]) for slot in a.step_slots(s)] for s in range(steps)]
            self._issue(atom, accumulators, list(zip(a_operands, b_descriptors)),
                        (None, NVVM_LAYOUT["b", b_fields.major]), accumulate)
            self.wgmma_groups.issue(accumulators.registers, a.registers, tiles=[b.memory])
            return
        rows = _operand_tile("a", a, atom)
        if rows[1] != depth[1] or rows[0] % 64:
            raise BuilderError(f"[wgmma-operand] wgmma {atom.name}: a is M x K (M a multiple of 64) with b's K; got a "
                               f"{rows[0]} x {rows[1]}, b {depth[0]} x {depth[1]}")
        blocks = _row_blocks(a_row_block, rows[0] // 64)
        a_fields, a_starts, a_block_bytes = _descriptors("a", a, atom, 64, steps, blocks)
        _k_major("a", a_fields, atom)
        a_base = self._descriptor_base(a.memory, a_fields, a_row_block, a_block_bytes)
        self._issue(atom, accumulators, [(arith.addi(a_base, self._i64(a_starts[s] >> 4)), b_descriptors[s])
                                         for s in range(steps)],
                    (NVVM_LAYOUT["a", a_fields.major], NVVM_LAYOUT["b", b_fields.major]), accumulate)
        self.wgmma_groups.issue(accumulators.registers, tiles=[a.memory, b.memory])

    def warpgroup_id(self) -> ir.Value:
        """This thread's warpgroup in the block (thread_id / 128): an index value with its bound proven."""
        self._warpgroup_kernel("warpgroup_id")
        return arith.divui(self.thread_id(), self.index(WARPGROUP_THREADS))

    def set_max_registers(self, count: int, action: str) -> None:
        """`setmaxnreg.{inc|dec}.sync.aligned.u32 count`: this warpgroup's registers a thread raised to or lowered
        to `count` (a multiple of 8 from 24 to 256; every thread of the warpgroup runs it): warp specialization's
        producers give theirs to the consumers. The kernel's own count (what ptxas allots a thread at launch,
        `min_blocks_per_sm=1` with the block's size) must leave the increase room in the register file.

        ptxas refuses a decrease to more than the kernel's largest count (C7406), which it takes to be its
        largest increase, or without one what the block's size leaves a thread (the register file over the
        block, at most 255, in multiples of 8): so a decrease above the largest increase so far (or that share),
        and an increase below a decrease made before it, are refused here, at the call."""
        self._warpgroup_kernel("set_max_registers")
        if not is_int(count) or count % 8 or not 24 <= count <= 256 or action not in ("increase", "decrease"):
            raise BuilderError(f"[setmaxnreg] set_max_registers: a count multiple of 8 from 24 to 256 and action "
                               f"'increase' or 'decrease', got {count!r}, {action!r}")
        made = self.__dict__.setdefault("_register_counts", {"increase": [], "decrease": []})
        threads = self.block[0] * self.block[1] * self.block[2]
        largest = max(made["increase"], default=min(MAX_THREAD_REGISTERS, REGISTER_FILE // threads) // 8 * 8)
        if action == "decrease" and count > largest:
            raise BuilderError(f"[setmaxnreg] set_max_registers: a decrease to {count} registers is above the "
                               f"kernel's largest count so far ({largest}: its largest increase, or without one "
                               f"what {threads} threads leave of the register file), which ptxas refuses (C7406); "
                               f"decrease to {largest} or less")
        if action == "increase" and count < max(made["decrease"], default=0):
            raise BuilderError(f"[setmaxnreg] set_max_registers: an increase to {count} registers, below the "
                               f"decrease to {max(made['decrease'])} made before it, would make it the kernel's "
                               f"largest count, which ptxas refuses the decrease against (C7406); increase to "
                               f"{max(made['decrease'])} or more")
        made[action].append(count)
        nvvm.setmaxregister(count, getattr(nvvm.SetMaxRegisterAction, action))

    @contextlib.contextmanager
    def role(self, warpgroup: ir.Value, which: str | int, registers: int | None = None):
        """`with k.role(warpgroup, ...):` the body for one role of warp specialization (CUTLASS's and
        FlashAttention-3's): "producer" is warpgroup 0, lowered to `registers` (`set_max_registers(...,
        "decrease")`); "consumers" every other warpgroup, and a number one of them (a ping-pong consumer), raised
        to `registers`. `warpgroup` is `warpgroup_id()` (or its broadcast); registers None: no reallocation."""
        if which == "producer":
            predicate, action = self.compare("eq", warpgroup, 0), "decrease"
        elif which == "consumers":
            predicate, action = self.compare("ne", warpgroup, 0), "increase"
        elif is_int(which) and which >= 1:
            predicate, action = self.compare("eq", warpgroup, which), "increase"
        else:
            raise BuilderError(f"role: 'producer', 'consumers' or a consumer's warpgroup (1 on), got {which!r}")
        with self.if_(predicate):
            if registers is not None:
                self.set_max_registers(registers, action)
            yield

    def named_barrier(self, index: int, threads: int) -> None:
        """`bar.sync index, threads`: the first `threads` to arrive at barrier `index` (1 to 15; 0 is
        `barrier`'s, the whole block's) go on together: a barrier among some warpgroups (the consumers of a
        warp-specialized kernel), which the others never reach. `threads` a multiple of 32 up to the block."""
        block = self.block[0] * self.block[1] * self.block[2]
        if (not is_int(index) or not 1 <= index <= 15 or not is_int(threads) or threads % 32
                or not 32 <= threads <= block):
            raise BuilderError(f"[named-barrier] named_barrier: index 1 to 15 and threads a multiple of 32 up to the "
                               f"block's {block}, got {index!r}, {threads!r}")
        nvvm.barrier(None, barrier_id=self.constant(index), number_of_threads=self.constant(threads))

    def named_barrier_arrive(self, index: int, threads: int) -> None:
        """`bar.arrive index, threads`: this thread's arrival on named barrier `index` without waiting: the other
        side of a `named_barrier` that `threads` threads meet at, some arriving (a producer of an order: "you
        may go"), the rest waiting there (CUTLASS's ordered warpgroups). Index and threads as named_barrier's."""
        block = self.block[0] * self.block[1] * self.block[2]
        if (not is_int(index) or not 1 <= index <= 15 or not is_int(threads) or threads % 32
                or not 32 <= threads <= block):
            raise BuilderError(f"[named-barrier] named_barrier_arrive: index 1 to 15 and threads a multiple of 32 up "
                               f"to the block's {block}, got {index!r}, {threads!r}")
        nvvm.barrier_arrive(self.constant(threads), barrier_id=self.constant(index))

    def async_proxy_fence(self) -> None:
        """`fence.proxy.async.shared::cta`: this thread's shared-memory writes (st.shared, stmatrix) become
        visible to the async proxy (wgmma's operand reads, TMA stores); a barrier after it orders them for
        the other threads' wgmma."""
        self._require("async_proxy_fence", "nvvm.fence.proxy")
        nvvm.fence_proxy(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)

    def wgmma_wait(self, pending: int = 0, accumulators: Sequence[Accumulators] = ()) -> None:
        """`wgmma.wait_group pending`: wait until at most `pending` of this warpgroup's committed groups are in
        flight (0: every one's accumulators are written). `accumulators`: those the retired groups wrote, which
        pass through the wait (its inline PTX takes and gives back their registers), so that no read of them
        is scheduled above it; without them ptxas finds such a read and waits there itself (C7517)."""
        self._warpgroup_kernel("wgmma_wait")
        if not is_int(pending) or not 0 <= pending <= 7:
            raise BuilderError(f"wgmma_wait: pending is 0 to 7, got {pending!r}")
        if not isinstance(accumulators, (list, tuple)) or not all(isinstance(a, Accumulators) for a in accumulators):
            raise BuilderError(f"wgmma_wait: accumulators is a list of Kernel.accumulators(...), got {accumulators!r}")
        self.wgmma_groups.wait(pending)
        if not accumulators:
            nvvm.wgmma_wait_group_sync_aligned(pending)
            return
        f32 = ir.F32Type.get()
        places = [(held.registers, slot) for held in accumulators for slot in range(held.atom.shape[1] // 2)]
        struct = llvm.StructType.get_literal([f32] * len(places))
        constraints = ",".join(["=f"] * len(places) + [str(i) for i in range(len(places))])
        self._wgmma_internal = True
        try:
            waited = llvm.inline_asm(struct, [self.load(registers, [slot]) for registers, slot in places],
                                     f"wgmma.wait_group.sync.aligned {pending};", constraints, has_side_effects=True)
            for position, (registers, slot) in enumerate(places):
                self.store(llvm.extractvalue(f32, waited, [position]), registers, [slot])
        finally:
            self._wgmma_internal = False

    def _warpgroup_kernel(self, what: str, atom=WgmmaAtom) -> None:
        """BuilderError unless the kernel runs wgmma (its chip, whole warpgroups) and `atom` is a WgmmaAtom."""
        if atom is not WgmmaAtom and not isinstance(atom, WgmmaAtom):
            raise BuilderError(f"[wgmma-atom] {what}: a WgmmaAtom (mlir_tile.isa.atoms.wgmma(n, element)), got {atom!r}")
        if self.chip not in targets.WARPGROUP_CHIPS:
            raise BuilderError(f"[wgmma-chip] {what}: warpgroup instructions (wgmma, setmaxnreg) run on "
                               f"{', '.join(sorted(targets.WARPGROUP_CHIPS))} only, the kernel "
                               f"targets {self.chip}; build it with Kernel(..., chip=\"{targets.WARPGROUP_CHIP}\")")
        threads = self.block[0] * self.block[1] * self.block[2]
        if self.block[1] * self.block[2] != 1 or threads % WARPGROUP_THREADS:
            raise BuilderError(f"[wgmma-warpgroup] {what}: a warpgroup is {WARPGROUP_THREADS} consecutive threads: "
                               f"the block is (x, 1, "
                               f"1) with x a multiple of {WARPGROUP_THREADS}, got {self.block}")

    def _i64(self, value: int) -> ir.Value:
        """An i64 constant of a 64-bit pattern (a descriptor's swizzle bits set the sign bit)."""
        return arith.constant(ir.IntegerType.get_signless(64), value - (1 << 64) if value >= 1 << 63 else value)

    def _descriptor_base(self, tile: ir.Value, fields: Descriptor, row_block, block_bytes: int) -> ir.Value:
        """The descriptor without its operand's offset: the fields, plus the tile's shared address (and the row
        block's bytes) in 16-byte units."""
        i64 = ir.IntegerType.get_signless(64)
        address = arith.index_cast(i64, memref.extract_aligned_pointer_as_index(tile))
        units = arith.addi(arith.shrui(address, self._i64(4)), self._i64(fields.bits()))
        if is_int(row_block):
            return arith.addi(units, self._i64(row_block * block_bytes >> 4))
        return arith.addi(units, arith.muli(arith.index_cast(i64, row_block), self._i64(block_bytes >> 4)))

    def _issue(self, atom: WgmmaAtom, accumulators: Accumulators, descriptors: Sequence, layouts, accumulate: bool):
        self._wgmma_internal = True
        try:
            self._issue_batch(atom, accumulators, descriptors, layouts, accumulate)
        finally:
            self._wgmma_internal = False

    def _issue_batch(self, atom, accumulators, descriptors, layouts, accumulate) -> None:
        f32, count = ir.F32Type.get(), atom.shape[1] // 2
        struct = llvm.StructType.get_literal([f32] * count)
        value = llvm.mlir_undef(struct)
        for slot in range(count):
            value = llvm.insertvalue(value, self.load(accumulators.registers, [slot]), [slot])
        kind = getattr(nvvm.WGMMATypes, atom.element)
        shape = ir.Attribute.parse("#nvvm.shape<m = {}, n = {}, k = {}>".format(*atom.shape))
        nvvm.wgmma_fence_aligned()
        for step, (a_operand, b_descriptor) in enumerate(descriptors):
            if isinstance(a_operand, list):  # A in registers: the RS form, which NVVM's op does not have
                value = _register_a(atom, struct, value, a_operand, b_descriptor, accumulate or step, layouts[1])
                continue
            scale = nvvm.WGMMAScaleOut.one if accumulate or step else nvvm.WGMMAScaleOut.zero
            value = nvvm.wgmma_mma_async(struct, value, a_operand, b_descriptor, shape, kind, kind,
                                         nvvm.WGMMATypes.f32, scale, nvvm.WGMMAScaleIn.one, nvvm.WGMMAScaleIn.one,
                                         getattr(nvvm.MMALayout, layouts[0]), getattr(nvvm.MMALayout, layouts[1]))
        nvvm.wgmma_commit_group_sync_aligned()
        for slot in range(count):
            self.store(llvm.extractvalue(f32, value, [slot]), accumulators.registers, [slot])


def _register_a(atom: WgmmaAtom, struct, accumulators, a_words, b_descriptor, accumulate, b_layout: str):
    """One RS-form `wgmma.mma_async` as inline PTX (NVVM's op takes A only by descriptor): the accumulators in
    and out (tied), A's 32-bit words, B's descriptor; scale-d 1 or 0, A and B unscaled, B transposed where
    MN-major (16-bit elements only)."""
    f32, count = ir.F32Type.get(), atom.shape[1] // 2
    values = [llvm.extractvalue(f32, accumulators, [slot]) for slot in range(count)]
    d = ", ".join(f"${i}" for i in range(count))
    a = ", ".join(f"${2 * count + i}" for i in range(len(a_words)))
    transpose = f", {int(b_layout == 'row')}" if atom.transposable else ""
    text = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, {int(bool(accumulate))}, 0;\n"
            f"wgmma.mma_async.sync.aligned.{atom.name}.f32.{atom.element}.{atom.element} {{{d}}}, {{{a}}}, "
            f"${2 * count + len(a_words)}, p, 1, 1{transpose};\n}}")
    constraints = ",".join(["=f"] * count + [str(i) for i in range(count)] + ["r"] * len(a_words) + ["l"])
    return llvm.inline_asm(struct, [*values, *a_words, b_descriptor], text, constraints, has_side_effects=True)


def _k_major(name: str, fields: Descriptor, atom: WgmmaAtom) -> None:
    if fields.major == "MN" and not atom.transposable:
        raise BuilderError(f"[wgmma-k-major] wgmma {atom.name}.{atom.element}: {name} must be K-major (wgmma "
                           f"transposes "
                           f"only 16-bit operands); lay the tile out with K contiguous")


def _in_key_order(tile, key_order):
    """B's tile (N x K) read with its K in `key_order`: at K position key_order(j), its column j."""
    from mlir_tile.builder.tensor import Tensor
    from mlir_tile.algebra.operations import composition, right_inverse

    if tile.layout.sizes[1] != key_order.size:
        raise BuilderError(f"[wgmma-operand] wgmma: b's K ({tile.layout.sizes[1]}) is not the register A's "
                           f"{key_order.size} columns")
    return Tensor(tile.kernel, tile.memory, composition(tile.layout, (None, right_inverse(key_order))))


def _operand_tile(name: str, tile, atom: WgmmaAtom) -> tuple[int, int]:
    from mlir_tile.builder.tensor import Tensor

    if (not isinstance(tile, Tensor) or tile.layout is None or tile.rank != 2
            or not (is_int(tile.base) and tile.base == 0)):
        raise BuilderError(f"[wgmma-operand] wgmma: {name} is a rank-2 shared Tensor through its tile's layout, from "
                           f"its memory's "
                           f"start, got {tile!r}")
    kind = ir.MemRefType(memref_value(tile.memory, f"wgmma {name}", "shared").type)
    if kind.get_strides_and_offset() != ([1], 0):
        raise BuilderError(f"[wgmma-operand] wgmma: {name}'s memory is a 1-D view from its start (k.view), got {kind}")
    if getattr(kind.element_type, "width", 0) != atom.element_bits:
        raise BuilderError(f"[wgmma-operand] wgmma {atom.name}.{atom.element}: {name}'s memory holds "
                           f"{atom.element_bits}-bit "
                           f"elements, got {kind.element_type}")
    return tile.layout.sizes


def _row_blocks(row_block, blocks: int) -> list[int]:
    """Every row block the warpgroup may read: the int given, or all a value's proven bound allows."""
    if is_int(row_block):
        if not 0 <= row_block < blocks:
            raise BuilderError(f"[wgmma-row-block] wgmma: a_row_block is 0 to {blocks - 1} (a has {blocks} blocks of "
                               f"64 rows), got "
                               f"{row_block}")
        return [row_block]
    if not isinstance(row_block, ir.Value) or not isinstance(row_block.type, ir.IndexType):
        raise BuilderError(f"[wgmma-row-block] wgmma: a_row_block is an int or an index value, got {row_block!r}")
    bound = upper_bound(row_block)
    if bound is None or bound >= blocks:
        raise BuilderError(f"[wgmma-row-block] wgmma: a_row_block must be proven below {blocks} (a has {blocks} "
                           f"blocks of 64 rows), "
                           f"but {'no bound' if bound is None else f'only {bound}'} is proven (e.g. the thread "
                           f"id / 128 of a block of {blocks} warpgroups)")
    return list(range(blocks))


def _descriptors(name: str, tile, atom: WgmmaAtom, rows: int, steps: int, blocks: list[int]):
    """The descriptor fields of tile `name`, each K step's start in bytes (row block 0), and the bytes between
    row blocks: every row block and K step checked element by element, their fields alike and their starts a
    row block's bytes apart."""
    k_step, fields, starts, block_bytes = atom.shape[2], set(), {}, 0
    for block in blocks:
        for step in range(steps):
            try:
                descriptor, start = descriptor_for(tile.layout, atom.element_bits, rows, k_step,
                                                   (64 * block, k_step * step))
            except WgmmaMismatch as error:
                raise BuilderError(f"[wgmma-descriptor] wgmma: {name}: {error}") from None
            fields.add(descriptor)
            if block == blocks[0]:
                starts[step] = start
            elif block == blocks[1]:
                block_bytes = start - starts[step]
            if start != starts[step] + (block - blocks[0]) * block_bytes:
                raise BuilderError(f"[wgmma-descriptor] wgmma: {name}'s row blocks of 64 are not equally far apart in "
                                   f"{tile.layout}")
    if len(fields) > 1:
        raise BuilderError(f"[wgmma-descriptor] wgmma: {name}'s K steps or row blocks read through different "
                           f"descriptors "
                           f"({', '.join(map(str, fields))}); one descriptor's fields serve a whole tile")
    fields = fields.pop()
    needed = ALIGNMENT[fields.swizzle_bytes] if fields.swizzle_bytes else 16
    proven = access_alignment(tile.memory, [tile.kernel.index(0)])
    if proven is None or proven < needed:
        mode = f"{fields.swizzle_bytes}-byte " if fields.swizzle_bytes else "un"
        raise BuilderError(f"[wgmma-alignment] wgmma: {name}'s {mode}swizzled tile must start on {needed} "
                           f"bytes, but {proven or 'no alignment'} {'bytes are' if proven else 'is'} proven "
                           f"(dynamic_shared(alignment=...), views at multiples of it)")
    return fields, [starts[s] for s in range(steps)], block_bytes
