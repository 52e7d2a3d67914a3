"""wgmma's asynchrony, enforced while building: a `wgmma` batch is one committed group that owns its
accumulators' registers (and a register A) until a `wgmma_wait` retires it; reading or writing them before
then (a load, a store, a transfer) is a BuilderError [wgmma-in-flight] at that call. The shared tiles it reads
are its too: a write into their bytes before the wait (a store, a transfer, a copy, a TMA load) is refused
where both places are known bytes of one buffer (views at constant offsets). A pipeline's stages lie at
offsets computed at run time: a batch reading a `StageRing`'s stage (its views) holds k-tile t's stage, t as
an SSA value plus a constant; releasing or loading k-tile u's stage (`TmaPipeline.release`, `.load`), or a
write into a view of it, while such a batch is in flight is refused unless u - t is a constant that is no
multiple of the stages (the same value, or a constant apart: proven different stages). A batch carried into
a loop's next iteration holds some stage of its ring, any.

The tracker follows the program as it is built: groups in flight, newest last; `wgmma_wait(n)` keeps the n
newest. A branch may not run: after it, a group is in flight if it is so before or at its end. A loop's body
runs again with what its end left in flight (the next iteration), so at the loop's end the body's accesses are
checked again from there, until nothing new is in flight; a hazard found so is reported at the access's line.
"""
from __future__ import annotations

from mlir import ir

from mlir_tile.builder.common import BuilderError

KEPT = 8  # groups told apart (a wait keeps at most 7); older ones are one
OPEN: list["WgmmaGroups"] = []  # the trackers of the kernels being built (a transfer names no kernel)


def access_anywhere(buffer: ir.Value, what: str, where, writes: bool = False) -> None:
    """An access from outside a kernel's calls (`transfer`): checked by the kernel whose accumulators (or
    tiles) it is."""
    for tracker in OPEN:
        tracker.access(buffer, what, where, writes)


def _merged(first: list[frozenset], second: list[frozenset]) -> list[frozenset]:
    """In flight after one path or the other: the groups aligned newest to newest."""
    length = max(len(first), len(second))
    padded = [[frozenset()] * (length - len(p)) + p for p in (first, second)]
    return _capped([a | b for a, b in zip(*padded)])


def _capped(groups: list[frozenset]) -> list[frozenset]:
    if len(groups) <= KEPT:
        return groups
    return [frozenset().union(*groups[:-KEPT + 1])] + groups[-KEPT + 1:]


class WgmmaGroups:
    def __init__(self) -> None:
        # each committed group's resources: register storages (ids), shared tiles' bytes (buffer, first, end)
        # and pipeline stages (Stage)
        self.in_flight: list[frozenset] = []
        self.names: dict[int, str] = {}  # accumulator storage id -> how diagnostics name it
        self.tiles_read = False  # whether any group has read a shared tile of known bytes
        self.frames: list[tuple[str, list, list]] = []  # open loop/branch bodies: (kind, events, state at entry)
        self.stage_views: dict[int, "Stage"] = {}  # a StageRing's view -> the stage it is

    def storage(self, registers: ir.Value, name: str) -> None:
        self.names[_key(registers)] = name

    def stage_view(self, view: ir.Value, ring: int, stages: int, stage: ir.Value) -> None:
        """`view` is a tile of ring `ring`'s stage `stage` (an index value: k-tile mod `stages`)."""
        self.stage_views[_key(view)] = Stage(ring, stages, *_k_tile_of(stage, stages))

    def stage_written(self, ring: int, stages: int, k_tile, what: str, where) -> None:
        """`what` at `where()` lets k-tile `k_tile`'s stage of ring `ring` be written (a release, a load)."""
        self._stage_write(Stage(ring, stages, *_affine(k_tile)), what, where)

    def _stage_write(self, stage: "Stage", what: str, where) -> None:
        if self.in_flight or self.frames:
            where = where()
            self._record(("stage", stage, what, where))
            _check_stage(self.in_flight, stage, what, where, "")

    def issue(self, *registers: ir.Value, tiles=()) -> None:
        """A committed group that writes (accumulators) or reads (a register A operand) these storages and
        reads these shared tiles (those of known bytes are kept: `shared_bytes`; a StageRing's: its stage)."""
        places = [place for place in map(shared_bytes, tiles) if place is not None]
        self.tiles_read = self.tiles_read or bool(places)
        stages = [self.stage_views[_key(tile)] for tile in tiles if _key(tile) in self.stage_views]
        group = frozenset([_key(r) for r in registers] + places + stages)
        self._record(("issue", group))
        self.in_flight = _capped(self.in_flight + [group])

    def wait(self, pending: int) -> None:
        self._record(("wait", pending))
        self.in_flight = self.in_flight[len(self.in_flight) - pending:] if pending else []

    def access(self, buffer: ir.Value, what: str, where, writes: bool = False) -> None:
        """`what` (a load, a store, a transfer) of `buffer` at `where()` (`at file:line`, asked only of an
        accumulator storage or a write to a shared tile a group may read)."""
        key = _key(buffer)
        if key in self.names:
            where = where()
            self._record(("access", key, what, where))
            _check(self.in_flight, key, what, where, self.names, "")
        elif writes and key in self.stage_views:
            self._stage_write(self.stage_views[key], what, where)
        elif writes and (self.tiles_read or self.frames):  # (a loop's later batches may read what it writes)
            place = shared_bytes(buffer)
            if place is not None:
                where = where()
                self._record(("write", place, what, where))
                _check_tiles(self.in_flight, place, what, where, "")

    def open(self, kind: str) -> None:
        self.frames.append((kind, [], list(self.in_flight)))

    def close(self, check: bool = True) -> None:
        """The body ends: a branch's paths merge; a loop's body is checked again from what its end leaves in
        flight, until that no longer grows."""
        kind, events, entry = self.frames.pop()
        if kind == "loop" and check:
            self.in_flight = _loop(events, entry, self.in_flight, self.names)
        else:
            self.in_flight = _merged(entry, self.in_flight)
        self._record((kind, events))

    def _record(self, event: tuple) -> None:
        if self.frames:
            self.frames[-1][1].append(event)


def _key(value) -> int | None:
    return hash(value) if isinstance(value, ir.Value) else None


ANY = "any"


class Stage(tuple):
    """Ring `ring`'s stage of k-tile base + constant (base: an SSA value's key, None for a constant k-tile,
    ANY for a stage not known: a batch from a loop's earlier iteration)."""

    def __new__(cls, ring: int, stages: int, base, constant: int):
        return super().__new__(cls, (ring, stages, base, constant))

    def apart_from(self, other: "Stage") -> bool:
        """Proven another stage than `other`'s (or of another ring)."""
        ring, stages, base, constant = self
        if other[0] != ring:
            return True
        return base is not ANY and other[2] == base and (constant - other[3]) % stages != 0

    def carried(self) -> "Stage":
        return Stage(self[0], self[1], ANY, 0)

    def text(self) -> str:
        base, constant = self[2], self[3]
        if base is ANY:
            return "an earlier iteration's k-tile"
        if base is None:
            return f"k-tile {constant}"
        return f"k-tile t{constant:+d}" if constant else "k-tile t"


def _affine(value) -> tuple:
    """(base, constant) with value = base + constant: through index casts, additions and subtractions of
    constants and products with a constant 0; base the key of the SSA value left (None: a constant)."""
    from mlir_tile.analysis.ir_facts import constant_int, defining_op

    if isinstance(value, int):
        return None, value
    known = constant_int(value)
    if known is not None:
        return None, known
    op = defining_op(value)
    name = op.name if op is not None else ""
    if name in ("arith.index_cast", "arith.index_castui"):
        return _affine(op.operands[0])
    if name == "arith.muli" and 0 in (constant_int(op.operands[0]), constant_int(op.operands[1])):
        return None, 0
    if name in ("arith.addi", "arith.subi"):
        (first, a), (second, b) = _affine(op.operands[0]), _affine(op.operands[1])
        sign = 1 if name == "arith.addi" else -1
        if second is None:
            return first, a + sign * b
        if first is None and sign == 1:
            return second, a + b
    return _key(value), 0


def _k_tile_of(stage, stages: int) -> tuple:
    """The (base, constant) k-tile whose stage `stage` is: x where stage = x mod stages, a constant's own
    value; else the stage is not known (ANY)."""
    from mlir_tile.analysis.ir_facts import constant_int, defining_op

    known = stage if isinstance(stage, int) else constant_int(stage)
    if known is not None:
        return None, known
    op = defining_op(stage)
    if op is not None and op.name == "arith.index_castui":  # (a narrow ring's: x mod stages in 32 bits)
        op = defining_op(op.operands[0])
    if op is not None and op.name == "arith.remui" and constant_int(op.operands[1]) == stages:
        return _affine(op.operands[0])
    return ANY, 0


def shared_bytes(buffer) -> tuple | None:
    """(the buffer, first byte, byte past the last) that a shared memref covers, where views at constant
    offsets tell: the dynamic window (every gpu.dynamic_shared_memory is the same bytes) or a named buffer;
    None where an offset is computed at run time or the memref is not shared memory."""
    from mlir_tile.analysis.ir_facts import constant_int, defining_op

    if not isinstance(buffer, ir.Value) or not isinstance(buffer.type, ir.MemRefType):
        return None
    kind = ir.MemRefType(buffer.type)
    if "workgroup" not in str(kind.memory_space) or not kind.has_static_shape:
        return None
    size = kind.shape[0] * max(1, getattr(kind.element_type, "width", 8) // 8) if kind.rank == 1 else None
    op, start = defining_op(buffer), 0
    while op is not None and size is not None:
        if op.name == "memref.view":
            shift = constant_int(op.operands[1])
            if shift is None:
                return None
            start += shift
            op = defining_op(op.operands[0])
        elif op.name == "memref.assume_alignment":
            op = defining_op(op.operands[0])
        elif op.name == "gpu.dynamic_shared_memory":
            return "dynamic", start, start + size
        elif op.name == "memref.get_global":
            return str(op.attributes["name"]), start, start + size
        else:
            return None
    return None


def _check(in_flight, key, what, where, names, when) -> None:
    if any(key in group for group in in_flight):
        raise BuilderError(f"[wgmma-in-flight] {what} of {names[key]} {where}{when}: a wgmma group using them is "
                           f"still in flight; wgmma_wait(...) for it first (wgmma_wait(0) retires every group)")


def _check_tiles(in_flight, place, what, where, when) -> None:
    buffer, first, last = place
    for group in in_flight:
        for held in group:
            if isinstance(held, tuple) and held[0] == buffer and held[1] < last and first < held[2]:
                raise BuilderError(f"[wgmma-in-flight] {what} {where}{when} writes bytes {first} to {last - 1} of the "
                                   f"shared tile a wgmma group still reads (bytes {held[1]} to {held[2] - 1}); "
                                   f"wgmma_wait(...) for it first")


def _check_stage(in_flight, stage: Stage, what, where, when) -> None:
    for group in in_flight:
        for held in group:
            if isinstance(held, Stage) and not stage.apart_from(held):
                same = held[2] == stage[2] and held[2] is not ANY
                raise BuilderError(
                    f"[wgmma-in-flight] {what} {where}{when} frees or writes {stage.text()}'s stage of a pipeline "
                    f"whose {held.text()}'s stage a wgmma group still reads"
                    f"{'' if same else ' (not proven another of its ' + str(stage[1]) + ' stages)'}; "
                    f"wgmma_wait(...) for that group first")


def _carried(groups: list[frozenset]) -> list[frozenset]:
    """Groups in flight from a loop's earlier iteration: each stage they read, some stage of its ring."""
    return [frozenset(held.carried() if isinstance(held, Stage) else held for held in group) for group in groups]


def _loop(events: list, entry: list, end: list, names: dict) -> list:
    state = _carried(_merged(entry, end))
    for _ in range(2 * KEPT):
        after = _run(events, state, names)
        grown = _carried(_merged(state, after))
        if grown == state:
            return grown
        state = grown
    return state


def _run(events: list, state: list, names: dict) -> list:
    """`events` replayed from `state`: what is in flight after them; BuilderError at a hazard."""
    for event in events:
        kind = event[0]
        if kind == "access":
            _check(state, event[1], event[2], event[3], names, ", in the loop's next iteration")
        elif kind == "write":
            _check_tiles(state, event[1], event[2], event[3], ", in the loop's next iteration")
        elif kind == "stage":
            _check_stage(state, event[1], event[2], event[3], ", in the loop's next iteration")
        elif kind == "issue":
            state = _capped(state + [event[1]])
        elif kind == "wait":
            state = state[len(state) - event[1]:] if event[1] else []
        elif kind == "branch":
            state = _merged(state, _run(event[1], state, names))
        else:
            state = _loop(event[1], state, _run(event[1], state, names), names)
    return state
