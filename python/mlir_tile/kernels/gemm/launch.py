"""The GEMM family's launch module: `Matmul` (mma.sync or Hopper's path, picked here), its checks of what it is
given, its plans, and the kernels shipped for each chip (the Hopper-only operators' too: `hopper_ops`)."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.common import MapOperand, Plans, TensorMaps, allocator, operand_slots
from mlir_tile.kernels.epilogues import Choice, Epilogue, expert_bias, row_scale, selectable
from mlir_tile.kernels.gemm import sm80, sm90, sm90_tiles
from mlir_tile.kernels.gemm.sm80_tiles import (FILL, HALF, MAX_SPLITS, PERSISTENT, SPLIT_VARIANTS, TILES, pick_splits,
                                               pick_tile, smallest_tile, variant, variants_for)
from mlir_tile.kernels.gemm.sm90_tiles import (DECODE_A_ROWS, DECODE_TILES, SCALINGS, SHIPPED_ACTIVATIONS,
                                               SMALL_TILE, grouped_config, grouped_gradient_configs, hopper_config,
                                               library_splits, measured_tile, scaled_config, swiglu_config)
from mlir_tile.runtime import POINTER, TENSOR_MAP


TMA_ADDRESS_BYTES = 16  # TMA reads and writes matrices whose addresses (and rows) lie on 16 bytes


def takes_hopper(chip: str, m: int, n: int, depth: int, *, tile, splits, aligned: bool) -> bool:
    """Whether `Matmul` runs an M x N x K product on Hopper's path (`sm90`, splitting K there where its tiles
    leave SMs idle: `library_splits`): a library whose chip runs it, no mma.sync tile named and no mma.sync
    split-K asked for, rows and addresses on 16 bytes (N and K multiples of 8: TMA)."""
    return (runs_warpgroup_kernels(chip) and tile is None and splits in (None, 1) and aligned and n % 8 == 0
            and depth % 8 == 0 and min(m, n, depth) > 0)


def shipped_kernels(chip: str, epilogues=(None, selectable)):
    """(name, build) of every kernel `Matmul` may pick for `chip`: each (element, B layout, alignment, tile,
    split) variant and the split's reduction, with each of `epilogues` (None: plain); on sm_90 also the
    Hopper path's (`hopper_shipped_kernels`)."""
    if runs_warpgroup_kernels(chip):
        yield from hopper_shipped_kernels(epilogues)
    for element in ("f16", "bf16"):
        for epilogue in epilogues:
            for config in variants_for(chip, epilogue):
                yield sm80.kernel_name(element, config, epilogue), partial(sm80.build_module, element, config, chip,
                                                                      epilogue=epilogue)
            yield sm80.reduce_name(element, epilogue), partial(sm80.build_reduce_module, element, chip, epilogue=epilogue)
        for config in SPLIT_VARIANTS:
            yield sm80.kernel_name(element, config), partial(sm80.build_module, element, config, chip)


class Matmul:
    """C = epilogue(A x B) on torch tensors through mlir-tile's runtime (no host copies, torch's current
    stream). On Hopper Hopper's path where it takes the product (`takes_hopper`: TMA, wgmma,
    `sm90_tiles.library_config`'s tile, measured per dtype and B layout; the tensor maps kept by
    `common.TensorMaps`); else the mma.sync variant is picked from the dtypes, B's layout, the sizes'
    alignment, the CTA tile for M x N (`pick_tile`) and split-K where the tiles leave SMs idle (`pick_splits`:
    an fp32 workspace of splits x M x N, then the reduction's launch, which applies the epilogue). `b` is [K, N]
    (b_major "kn") or [N, K] ("nk", a weight of torch.nn.functional.linear). The kernels come from `library` (a
    `KernelLibrary`). What depends on the dtypes, shapes, layout, epilogue and the operands' alignment is worked
    out once, a launch plan (`_Plan`) whose call is the driver's launch. ValueError for what the kernels do not
    take."""

    def __init__(self, library):
        self.library, self.plans = library, Plans()
        self.sms = library.runtime.device.properties.multiprocessor_count
        self.maps = TensorMaps(library.runtime)
        self.last_config, self.last_splits = None, None  # the variant of the last call and its splits

    def __call__(self, a, b, *, b_major: str = "kn", a_major: str = "mk", out=None, tile: dict | None = None,
                 splits: int | None = None, epilogue: Epilogue | Choice | None = None, operands: tuple = ()):
        """`a_major`: A is [M, K] ("mk") or [K, M] ("km", A^T as a backward has it: Hopper's path reads it
        MN-major; elsewhere, or where TMA cannot take it, A is transposed into a copy first); `tile`: one of
        TILES instead of `pick_tile`'s choice (where rows lie on 4 bytes or more: element copies take
        `pick_tile`'s); `splits`: 1 to MAX_SPLITS CTAs sharing each C tile's k-tiles instead of `pick_splits`'
        choice (more than 1: on the smallest tile); `out`: a contiguous M x N CUDA tensor of A's dtype to write C
        into; `operands`: the epilogue's, in its order (tensors of A's dtype, floats)."""
        import torch

        from mlir_tile.runtime import torch_stream

        if a_major != "mk" and not self.reads_a_transposed(a, b, b_major, a_major, out=out, tile=tile, splits=splits):
            a, a_major = a.t().contiguous(), "mk"
        plan = self.plan(a, b, b_major, epilogue, out=out, tile=tile, splits=splits, a_major=a_major)
        if not (a.is_cuda and b.is_cuda and a.is_contiguous() and b.is_contiguous()):
            raise ValueError("gemm: A and B are row-major (contiguous) CUDA tensors; call .contiguous() first")
        m, n = plan.m, plan.n
        extras = checked_operands(epilogue, operands, m, n, a)
        if out is None:
            out = torch.empty(m, n, dtype=a.dtype, device=a.device)
        elif out.shape != (m, n) or out.dtype != a.dtype or not out.is_cuda or not out.is_contiguous():
            raise ValueError(f"gemm: out is a contiguous {m} x {n} CUDA tensor of {a.dtype}, got {tuple(out.shape)} "
                             f"{out.dtype}{'' if out.is_contiguous() else ' (not contiguous)'}")
        self.last_config, self.last_splits = plan.config, plan.splits
        plan(a.data_ptr(), b.data_ptr(), out.data_ptr(), extras, torch_stream(a))
        return out

    def reads_a_transposed(self, a, b, b_major: str, a_major: str, *, out=None, tile=None, splits=None) -> bool:
        """Whether A [K, M] ("km") runs as it is: on Hopper's path (`takes_hopper`), M a multiple of 8 (its rows
        on 16 bytes); ValueError for an `a_major` other than "mk" and "km"."""
        if a_major not in ("mk", "km"):
            raise ValueError(f"gemm: a_major is 'mk' (A is [M, K]) or 'km' (A is [K, M]), got {a_major!r}")
        _, (m, n, depth) = _element_and_sizes(a, b, b_major, a_major)
        return m % 8 == 0 and takes_hopper(self.library.chip, m, n, depth, tile=tile, splits=splits,
                                           aligned=_start(a, b, out) % TMA_ADDRESS_BYTES == 0)

    def plan(self, a, b, b_major: str, epilogue, *, out=None, tile=None, splits=None, a_major: str = "mk"):
        """The launch plan of a call with these arguments: made (and what it depends on checked) on first use,
        then looked up by the dtypes, shapes, layouts, tile, splits, epilogue and the operands' alignment (A [K,
        M]: where `reads_a_transposed` said so)."""
        start = _start(a, b, out)
        key = (a.dtype, b.dtype, b_major, a_major, a.shape, b.shape, None if tile is None else repr(tile), splits,
               epilogue, start)
        return self.plans.of(key, lambda: self._plan(a, b, b_major, tile, splits, epilogue, start, a_major))

    def _plan(self, a, b, b_major, tile, splits, epilogue, start: int, a_major: str = "mk"):
        """The launch plan (`_Plan`, `_SplitPlan`, `_HopperPlan`) for these operands, whose first elements lie on
        `start` bytes, or ValueError."""
        element, (m, n, depth) = _element_and_sizes(a, b, b_major, a_major)
        if takes_hopper(self.library.chip, m, n, depth, tile=tile, splits=splits, aligned=start % TMA_ADDRESS_BYTES == 0):
            return self._hopper_plan(element, m, n, depth, b_major, epilogue, whole=splits == 1, device=a.device,
                                     a_major=a_major)
        if a_major != "mk":
            raise ValueError(f"gemm: A [K, M] runs on Hopper's path only (TMA, rows and addresses on 16 bytes); got "
                             f"{m} x {n} x {depth} on {self.library.chip}")
        if tile is not None and tile not in TILES + (PERSISTENT,):
            raise ValueError(f"gemm: tile is one of {TILES + (PERSISTENT,)}, got {tile!r}")
        if splits is not None and not (isinstance(splits, int) and 1 <= splits <= MAX_SPLITS):
            raise ValueError(f"gemm: splits is an int from 1 to {MAX_SPLITS}, got {splits!r}")
        align = next(align for align in (16, 8, 4, 2)
                     if align <= start and n % (align // HALF) == 0 and depth % (align // HALF) == 0)
        smallest = smallest_tile(align)
        if splits is not None and splits > 1:
            if tile not in (None, smallest) and align != HALF:
                raise ValueError(f"gemm: split-K runs on the tile {smallest}, not on {tile!r}")
            tile = smallest
        elif tile is None or align == HALF:
            tile = pick_tile(m, n, depth, self.sms, element=element, align=align, b_major=b_major,
                             chip=self.library.chip, epilogue=epilogue)
        config = variant(tile, align, b_major=b_major)
        if config.persistent and (config not in variants_for(self.library.chip, epilogue)
                                  or not config.takes(m, n, depth)):
            raise ValueError(f"gemm: the persistent tile takes B [N, K] with N and K multiples of 8, "
                             f"{config.sizes_taken()}; got B {b_major}, {m} x {n} x {depth}")
        if splits is None:
            splits = pick_splits(m, n, depth, self.sms, config) if tile == smallest else 1
        reduction_epilogue = None
        if splits > 1:
            config = variant(tile, align, b_major=b_major, split_k=True)
            reduction_epilogue, epilogue = epilogue, None  # the reduction applies it
        chip, launch = self.library.chip, {"grid": config.grid(m, n, splits, self.sms), "block": config.threads,
                                           "shared_bytes": config.shared_bytes}
        module = self.library.module(sm80.kernel_name(element, config, epilogue),
                                     lambda: sm80.build_module(element, config, chip, epilogue=epilogue))
        sizes = [m, n // config.unit, depth // config.unit]
        if splits == 1:
            return _Plan(config, m, n, module.prepare(sm80.KERNEL, [POINTER] * 3 + sizes + _slots(epilogue), **launch))
        main = module.prepare(sm80.KERNEL, [POINTER] * 3 + sizes + [splits], **launch)
        return _SplitPlan(config, m, n, main, splits, self._reduction(element, reduction_epilogue, m, n, splits),
                          a.device)

    def _hopper_plan(self, element: str, m: int, n: int, depth: int, b_major: str, epilogue, *, whole: bool,
                     device, a_major: str = "mk"):
        """Hopper's plan: the library's tile (`library_config`), split-K (unless `whole`) where its tiles leave
        SMs idle (`library_splits`: one launch, the last split of each C tile adding the others' partials and
        applying the epilogue, `sm90.reduce_splits`)."""
        config = replace(sm90_tiles.library_config(m, n, b_major, sms=self.sms, fill=FILL, epilogue=epilogue,
                                                   element=element, decode=a_major == "mk"), a_major=a_major)
        if config.a_rows and m > config.a_rows:  # (its tile's rows past a_rows are not loaded: C's past M alone)
            raise ValueError(f"gemm: {config} loads {config.a_rows} rows of A, fewer than M = {m}")
        splits = 1 if whole else library_splits(m, n, depth, config, sms=self.sms, fill=FILL, most=MAX_SPLITS)
        config = replace(config, split_k=splits > 1)
        module = self.library.module(sm90.kernel_name(element, config, epilogue),
                                     lambda: sm90.build_module(element, config, epilogue=epilogue))
        box, size = sm90.boxes(config), 2  # (bytes of a 16-bit element)
        b_rows = (depth, n) if b_major == "kn" else (n, depth)
        a_rows = (m, depth) if a_major == "mk" else (depth, m)
        maps = [MapOperand(self.maps, a_rows, a_rows[1] * size, box["a"]),
                MapOperand(self.maps, b_rows, b_rows[1] * size, box["b"])]
        sizes = [m, n // config.unit, depth // config.unit]
        launch = partial(module.prepare, sm90.KERNEL, block=config.threads, shared_bytes=config.shared_bytes)
        maps.append(MapOperand(self.maps, (m, n), n * size, box["c"], store=True))
        tiles = config.grid(m, n, self.sms)
        if splits == 1:
            return _HopperPlan(config, m, n, launch([TENSOR_MAP] * 3 + sizes + _slots(epilogue), grid=tiles), maps)
        main = launch([TENSOR_MAP] * 3 + sizes + [POINTER, POINTER, splits] + _slots(epilogue), grid=tiles * splits)
        return _HopperSplitPlan(config, m, n, main, maps, splits, tiles, device)

    def _reduction(self, element: str, epilogue, m: int, n: int, splits: int):
        """The launch of split-K's reduction of `splits` fp32 partials of M x N into C, applying `epilogue`."""
        chip = self.library.chip
        module = self.library.module(sm80.reduce_name(element, epilogue),
                                     lambda: sm80.build_reduce_module(element, chip, epilogue=epilogue))
        return module.prepare(sm80.REDUCE_KERNEL, [POINTER, POINTER, m, n, splits] + _slots(epilogue),
                              grid=-(-m * n // sm80.REDUCE_THREADS), block=sm80.REDUCE_THREADS)


def _start(a, b, out=None) -> int:
    """The bytes every operand's first element lies on (16, 8, 4 or 2): a view's may be any even address, which
    caps the copies' width as its rows' lengths do."""
    return next(align for align in (16, 8, 4, 2) if all(t.data_ptr() % align == 0 for t in (a, b) + (
        () if out is None else (out,))))


def _element_and_sizes(a, b, b_major: str, a_major: str = "mk") -> tuple[str, tuple[int, int, int]]:
    """The element type and (M, N, K) of A ([M, K], or [K, M] for `a_major` "km") and B, or ValueError."""
    import torch

    element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(a.dtype)
    if element is None or b.dtype != a.dtype:
        raise ValueError(f"gemm: A and B are both float16 or both bfloat16, got {a.dtype} and {b.dtype}")
    if b_major not in ("kn", "nk"):
        raise ValueError(f"gemm: b_major is 'kn' (B is [K, N]) or 'nk' (B is [N, K]), got {b_major!r}")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError("gemm: A and B are 2-D CUDA tensors")
    m, depth = a.shape if a_major == "mk" else a.shape[::-1]
    n, b_depth = (b.shape[1], b.shape[0]) if b_major == "kn" else b.shape
    if b_depth != depth or m == 0 or n == 0 or depth == 0:
        raise ValueError(f"gemm: A ({a_major}) is {tuple(a.shape)} and B ({b_major}) is {tuple(b.shape)}: the K "
                         f"extents differ or a size is 0")
    return element, (m, n, depth)


def checked_operands(epilogue: Epilogue | None, operands, m: int, n: int, a, groups: int | None = None) -> list:
    """The epilogue's operands as the values of its launch's slots (`_slots`: a tensor's address, a float, an
    int), each checked against its kind (a grouped GEMM's `groups` for "group_column" operands [E, N]), or
    ValueError. A tensor operand may be None where the epilogue does not read it (`epilogues.selectable`): A's
    address stands in."""
    declared = epilogue.operands if epilogue is not None else ()
    if len(operands) != len(declared):
        raise ValueError(f"gemm: the epilogue takes {len(declared)} operands "
                         f"({', '.join(o.name for o in declared) or 'none'}), got {len(operands)}")
    arguments = []
    for operand, value in zip(declared, operands):
        if operand.kind in ("scalar", "integer"):
            number = (int,) if operand.kind == "integer" else (int, float)
            if not isinstance(value, number) or isinstance(value, bool):
                raise ValueError(f"gemm: epilogue operand {operand.name!r} is {'an int' if number == (int,) else 'a number'}"
                                 f", got {value!r}")
            arguments.append(float(value) if operand.kind == "scalar" else value)
            continue
        if value is None:  # an operand the epilogue does not read (a branch on an integer leaves it out)
            arguments.append(a.data_ptr())
            continue
        shape = {"column": (n,), "row": (m,), "matrix": (m, n), "group_column": (groups, n)}[operand.kind]
        if (getattr(value, "shape", None) != shape or value.dtype != a.dtype or not value.is_contiguous()
                or value.device != a.device):
            raise ValueError(f"gemm: epilogue operand {operand.name!r} is a contiguous {' x '.join(map(str, shape))} "
                             f"tensor of {a.dtype} on {a.device}, got {_described(value)}")
        arguments.append(value.data_ptr())
    return arguments


def _slots(epilogue: Epilogue | None) -> list:
    """The launch slots of an epilogue's operands (`common.operand_slots`), none without one."""
    return operand_slots(epilogue.operands) if epilogue is not None else []


class _Plan:
    """What every call of one `Matmul` key launches, prepared once: a kernel's `runtime.Launch` taking A's, B's and
    C's addresses and the epilogue's operands (`checked_operands`' values)."""
    splits = 1

    def __init__(self, config, m: int, n: int, launch):
        self.config, self.m, self.n, self.launch = config, m, n, launch

    def __call__(self, a: int, b: int, c: int, extras: list, stream: int) -> None:
        self.launch(stream, a, b, c, *extras)


class _SplitPlan(_Plan):
    """The mma.sync path's split-K: the k-tiles' partial sums into an fp32 workspace of `splits` x M x N, then
    the reduction's launch, which applies the epilogue."""

    def __init__(self, config, m: int, n: int, launch, splits: int, reduce, device):
        import torch

        super().__init__(config, m, n, launch)
        self.splits, self.reduce = splits, reduce
        self.workspace = allocator((splits * m * n,), torch.float32, device)

    def __call__(self, a: int, b: int, c: int, extras: list, stream: int) -> None:
        partials = self.workspace()
        self.launch(stream, a, b, partials.data_ptr())
        self.reduce(stream, partials.data_ptr(), c, *extras)  # (the workspace freed after: torch's allocator
        # reuses it in stream order)


class _HopperPlan(_Plan):
    """Hopper's path: A's, B's and C's tensor maps (`MapOperand`s: each address's map encoded once) by value;
    `before`, the bytes each map starts before its tensor (a grouped GEMM's ragged maps: `hopper_ops`)."""
    before = (0, 0, 0)

    def __init__(self, config, m: int, n: int, launch, maps: list):
        super().__init__(config, m, n, launch)
        self.maps = maps

    def __call__(self, a: int, b: int, c: int, extras: list, stream: int) -> None:
        map_a, map_b, map_c = self.maps
        self.launch(stream, map_a(a), map_b(b), map_c(c), *extras)


class _HopperSplitPlan(_HopperPlan):
    """Hopper's split-K in one launch (`sm90.reduce_splits`): an fp32 workspace for the partials of every split
    but the last, and the C tiles' flags, zeros that each launch's last splits clear again. The flags are one
    array a stream (launches on two streams would count on each other's), kept where made outside a CUDA
    graph's capture (made during one, they are zeroed only by its replays: they serve that capture alone)."""

    def __init__(self, config, m: int, n: int, launch, maps: list, splits: int, tiles: int, device):
        import torch

        super().__init__(config, m, n, launch, maps)
        self.splits, self.tiles, self.device = splits, tiles, device
        self.workspace = allocator(((splits - 1) * m * n,), torch.float32, device)
        self.flags = {}

    def __call__(self, a: int, b: int, c: int, extras: list, stream: int) -> None:
        map_a, map_b, map_c = self.maps
        partials = self.workspace()  # (freed after the launch: torch's allocator reuses it in stream order)
        self.launch(stream, map_a(a), map_b(b), map_c(c), partials.data_ptr(), self._flags(stream), *extras)

    def _flags(self, stream: int) -> int:
        import torch

        flags = self.flags.get(stream)
        if flags is None:
            flags = torch.zeros(self.tiles, dtype=torch.int32, device=self.device)
            if not torch.cuda.is_current_stream_capturing():
                self.flags[stream] = flags
        return flags.data_ptr()  # (one made in a capture, freed after the launch: reused only in stream order)


def _described(value) -> str:
    shape = getattr(value, "shape", None)
    return repr(value) if shape is None else f"{tuple(shape)} {value.dtype} on {value.device}"


def hopper_shipped_kernels(epilogues) -> list:
    """(name, build) of the Hopper kernels `Matmul` and `ScaledMatmul` pick: each element, B layout and
    epilogue of `epilogues` (None: plain) with the tiles `library_config` takes for it (a `Choice`: SMALL_TILE
    only); bias + each of SHIPPED_ACTIVATIONS as a chain on the measured tiles (not on SMALL_TILE: there the
    operators take `selectable`); SMALL_TILE's split-K kernels (`library_splits`), with each of `epilogues`; the
    decode tiles' (DECODE_TILES), whole and split, loading A's whole box or its first DECODE_A_ROWS rows, without
    one; A [K, M]'s (`a_major` "km", a backward's dB) without an epilogue on each tile and split; fp8's with either
    B layout and per-tensor or
    per-row scales each accumulated fast and precise, and blockwise with B [N, K] (`scaled_config`)."""
    from functools import partial

    from mlir_tile.kernels.epilogues import chain

    def tiles_for(element, major, epilogue, chained=False):
        measured = measured_tile(element, major)
        return [SMALL_TILE] if isinstance(epilogue, Choice) else [measured] if chained else [measured, SMALL_TILE]

    chains = [chain(True, activation) for activation in SHIPPED_ACTIVATIONS]
    sixteen = [(element, hopper_config(major, tile), epilogue) for element in ("f16", "bf16") for major in ("nk", "kn")
               for epilogue, chained in [(e, False) for e in epilogues] + [(c, True) for c in chains]
               for tile in tiles_for(element, major, epilogue, chained)]
    split = [(element, replace(hopper_config(major, SMALL_TILE), split_k=True), epilogue) for element in ("f16", "bf16")
             for major in ("nk", "kn") for epilogue in epilogues]
    split += [(element, replace(hopper_config(major, tile), split_k=split_k, a_rows=rows), None)
              for element in ("f16", "bf16") for major in ("nk", "kn") for tile in DECODE_TILES
              for split_k in (False, True) for rows in (0, *DECODE_A_ROWS)]
    transposed_a = [(element, replace(hopper_config(major, tile), a_major="km", split_k=split), None)
                    for element in ("f16", "bf16") for major in ("nk", "kn")
                    for tile, split in ((measured_tile(element, major), False), (SMALL_TILE, False), (SMALL_TILE, True))]
    eight = [("e4m3", scaled_config(major, scaling, precise), None) for major in ("nk", "kn")
             for scaling in SCALINGS for precise in (False, True)
             if scaling not in ("blocks", "row_blocks") or major == "nk" and precise]
    fused = [(element, config, None) for element in ("f16", "bf16") for config in (swiglu_config(element),)]
    fused += [(element, grouped_config(element, contiguous), None) for element in ("f16", "bf16", "e4m3")
              for contiguous in (False, True)]
    fused += [(element, config, None) for element in ("f16", "bf16") for config in grouped_gradient_configs(element)]
    fused += [(element, grouped_config(element, True, epilogue), epilogue) for element in ("f16", "bf16")
              for epilogue in (row_scale, expert_bias)]
    named = {sm90.kernel_name(element, config, epilogue): partial(sm90.build_module, element, config, epilogue=epilogue)
             for element, config, epilogue in sixteen + split + transposed_a + eight + fused}  # (an epilogue given that is a shipped chain: once)
    return list(named.items())
