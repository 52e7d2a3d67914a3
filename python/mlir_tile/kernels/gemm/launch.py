"""The GEMM family's one launch module: `Matmul` (mma.sync or Hopper's path, picked here) and `ScaledMatmul`
(fp8), their checks of what they are given, and the kernels shipped for each chip."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.common import MapOperand, Plans, TensorMaps, allocator, operand_slots
from mlir_tile.kernels.epilogues import Choice, Epilogue, selectable
from mlir_tile.kernels.gemm import sm80, sm90, sm90_tiles
from mlir_tile.kernels.gemm.sm80_tiles import (FILL, HALF, MAX_SPLITS, PERSISTENT, SPLIT_VARIANTS, TILES, pick_splits,
                                               pick_tile, smallest_tile, variant, variants_for)
from mlir_tile.kernels.gemm.sm90 import boxes
from mlir_tile.kernels.gemm.sm90_tiles import (BLOCK, SCALINGS, SHIPPED_ACTIVATIONS, SMALL_TILE, hopper_config,
                                               library_splits, measured_tile, scaled_config)
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
                                                   element=element), a_major=a_major)
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


def checked_operands(epilogue: Epilogue | None, operands, m: int, n: int, a) -> list:
    """The epilogue's operands as the values of its launch's slots (`_slots`: a tensor's address, a float, an
    int), each checked against its kind, or ValueError. A tensor operand may be None where the epilogue does not
    read it (`epilogues.selectable`): A's address stands in."""
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
        shape = {"column": (n,), "row": (m,), "matrix": (m, n)}[operand.kind]
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
    """Hopper's path: A's, B's and C's tensor maps (`MapOperand`s: each address's map encoded once) by value."""

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
    operators take `selectable`); SMALL_TILE's split-K kernels (`library_splits`), with each of `epilogues`; A [K, M]'s (`a_major` "km", a
    backward's dB) without an epilogue on each tile and split; fp8's with either B layout and per-tensor or
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
    transposed_a = [(element, replace(hopper_config(major, tile), a_major="km", split_k=split), None)
                    for element in ("f16", "bf16") for major in ("nk", "kn")
                    for tile, split in ((measured_tile(element, major), False), (SMALL_TILE, False), (SMALL_TILE, True))]
    eight = [("e4m3", scaled_config(major, scaling, precise), None) for major in ("nk", "kn")
             for scaling in SCALINGS for precise in (False, True)
             if (scaling != "blocks" or major == "nk") and (scaling != "blocks" or precise)]
    fused = [(element, config(element), None) for element in ("f16", "bf16") for config in (swiglu_config, grouped_config)]
    named = {sm90.kernel_name(element, config, epilogue): partial(sm90.build_module, element, config, epilogue=epilogue)
             for element, config, epilogue in sixteen + split + transposed_a + eight + fused}  # (an epilogue given that is a shipped chain: once)
    return list(named.items())


def swiglu_config(element: str):
    """`SwigluMatmul`'s kernel: the tile measured fastest for `element` with B [N, K], its epilogue fused SwiGLU."""
    return replace(hopper_config("nk", measured_tile(element, "nk"), element), swiglu=True)


class _HopperOperator:
    """What the Hopper-only launchers share: the library (sm_90's, else ValueError naming `operator`), the tensor
    maps, the plans, the SMs, and a plan's launch of one kernel over A, B and C maps."""
    operator = "hopper gemm"

    def __init__(self, library):
        if not runs_warpgroup_kernels(library.chip):
            raise ValueError(f"{self.operator}: runs on Hopper's path (sm_90), not {library.chip}")
        self.library, self.maps, self.plans = library, TensorMaps(library.runtime), Plans()
        self.sms = library.runtime.device.properties.multiprocessor_count

    def launched(self, element: str, config, maps: list, m: int, n: int, depth: int, extras=()) -> "_HopperPlan":
        """The plan of `config`'s kernel on an M x N x K product through `maps` (A's, B's and C's), the kernel's
        parameters after the sizes `extras` (their types, or constants baked in)."""
        module = self.library.module(sm90.kernel_name(element, config), lambda: sm90.build_module(element, config))
        launch = module.prepare(sm90.KERNEL, [TENSOR_MAP] * 3 + [m, n // config.unit, depth // config.k_unit, *extras],
                                grid=config.grid(m, n, self.sms), block=config.threads, shared_bytes=config.shared_bytes)
        return _HopperPlan(config, m, n, launch, maps)


def _sixteen_bit(operator: str, x, w) -> str:
    """x's and w's element (f16, bf16), one dtype, else ValueError naming `operator`."""
    import torch

    element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(x.dtype)
    if element is None or w.dtype != x.dtype:
        raise ValueError(f"{operator}: x and w of one dtype, float16 or bfloat16; got {x.dtype} and {w.dtype}")
    return element


class SwigluMatmul(_HopperOperator):
    """silu(x W_gate^T) * (x W_up^T) in one GEMM on Hopper's path (`HopperConfig.swiglu`): x [M, K] and w [2F, K],
    W_gate's and W_up's rows interleaved a block of 8 at a time (`ops.swiglu_weights`), f16 or bf16, C [M, F] of
    x's dtype, the gate and up products never written. K a multiple of 8, F of 8; on torch's current stream.
    ValueError for what the kernel does not take."""
    operator = "swiglu_mm"

    def __call__(self, x, w):
        import torch

        from mlir_tile.runtime import torch_stream

        element = _sixteen_bit(self.operator, x, w)
        if x.dim() != 2 or w.dim() != 2 or w.shape[1] != x.shape[1]:
            raise ValueError(f"swiglu_mm: x [M, K] and w [2F, K]; got {tuple(x.shape)} and {tuple(w.shape)}")
        (m, depth), n = x.shape, w.shape[0]
        if n % 16 or depth % 8 or not all(t.is_cuda and t.is_contiguous() for t in (x, w)):
            raise ValueError(f"swiglu_mm: contiguous CUDA tensors, w's rows a multiple of 16 (swiglu_weights' "
                             f"interleaved blocks) and K of 8; got {tuple(x.shape)} and {tuple(w.shape)}")
        if 0 in (m, n, depth):  # (K 0: silu(0) 0 = 0)
            return torch.zeros(m, n // 2, dtype=x.dtype, device=x.device)
        out = torch.empty(m, n // 2, dtype=x.dtype, device=x.device)
        plan = self.plans.of((element, m, n, depth), lambda: self._plan(element, m, n, depth))
        x, w = (t.clone() if t.data_ptr() % TMA_ADDRESS_BYTES else t for t in (x, w))
        plan(x.data_ptr(), w.data_ptr(), out.data_ptr(), [], torch_stream(x))
        return out

    def _plan(self, element: str, m: int, n: int, depth: int) -> "_HopperPlan":
        config = swiglu_config(element)
        box = boxes(config)
        maps = [MapOperand(self.maps, (m, depth), 2 * depth, box["a"]),
                MapOperand(self.maps, (n, depth), 2 * depth, box["b"]),
                MapOperand(self.maps, (m, n // 2), n, box["c"], store=True)]
        return self.launched(element, config, maps, m, n, depth)


def grouped_config(element: str):
    """`GroupedMatmul`'s kernel: the small tile (128 rows: the groups' T a multiple of it) with B [N, K], grouped."""
    return replace(hopper_config("nk", SMALL_TILE, element), grouped=True)


class GroupedMatmul(_HopperOperator):
    """The masked grouped GEMM (a mixture of experts' decode step, DeepGEMM's masked layout) on Hopper's path
    (`HopperConfig.grouped`): x [E, T, K], w [E, N, K] and counts int32 [E] on the device; C [E, T, N] of x's
    dtype whose group e's first counts[e] rows are x[e] w[e]^T (rows past a count: unspecified, as the layout
    has it). 16-bit; T a multiple of 128 (a tile's rows), N and K of 8; the counts read by the kernel, so a CUDA
    graph holds the call. ValueError for what it does not take."""
    operator = "grouped_mm"

    def __call__(self, x, w, counts):
        import torch

        from mlir_tile.runtime import torch_stream

        element = _sixteen_bit(self.operator, x, w)
        if x.dim() != 3 or w.dim() != 3 or w.shape[0] != x.shape[0] or w.shape[2] != x.shape[2]:
            raise ValueError(f"grouped_mm: x [E, T, K] and w [E, N, K]; got {tuple(x.shape)} and {tuple(w.shape)}")
        (groups, rows, depth), n = x.shape, w.shape[1]
        if (not isinstance(counts, torch.Tensor) or counts.dtype != torch.int32 or counts.shape != (groups,)
                or rows % SMALL_TILE["bm"] or n % 8 or depth % 8
                or not all(t.is_cuda and t.is_contiguous() for t in (x, w, counts))):
            raise ValueError(f"grouped_mm: contiguous CUDA tensors, counts int32 [E] = [{groups}], T a multiple of "
                             f"{SMALL_TILE['bm']}, N and K of 8; got x {tuple(x.shape)}, w {tuple(w.shape)}, counts "
                             f"{getattr(counts, 'dtype', counts)} {tuple(getattr(counts, 'shape', ()))}")
        if 0 in (groups, rows, n, depth):
            return torch.zeros(groups, rows, n, dtype=x.dtype, device=x.device)
        out = torch.empty(groups, rows, n, dtype=x.dtype, device=x.device)  # (rows past the counts: unspecified)
        plan = self.plans.of((element, groups, rows, n, depth), lambda: self._plan(element, groups, rows, n, depth))
        x, w = (t.clone() if t.data_ptr() % TMA_ADDRESS_BYTES else t for t in (x, w))
        plan(x.data_ptr(), w.data_ptr(), out.data_ptr(), [counts.data_ptr()], torch_stream(x))
        return out

    def _plan(self, element: str, groups: int, rows: int, n: int, depth: int) -> "_HopperPlan":
        config, m = grouped_config(element), groups * rows
        box = boxes(config)
        maps = [MapOperand(self.maps, (m, depth), 2 * depth, box["a"]),
                MapOperand(self.maps, (groups * n, depth), 2 * depth, box["b"]),
                MapOperand(self.maps, (m, n), 2 * n, box["c"], store=True)]
        return self.launched(element, config, maps, m, n, depth, (POINTER, rows))


class ScaledMatmul(_HopperOperator):
    """C = (A x B) * scale_a * scale_b in bf16 from fp8 e4m3 torch tensors, as torch._scaled_mm computes it, on
    Hopper's path (the sm_90 library): A [M, K] and B [N, K] (`b_major` "nk") or [K, N] ("kn", transposed in
    the kernel, where torch._scaled_mm needs a transposed copy), row-major; scale_a and scale_b fp32, one
    element each (per tensor), [M] and [N] (per row), or blockwise [M, K / 128] and [N / 128, K / 128] (DeepGEMM's
    1 x 128 and 128 x 128 blocks, rounded up; B [N, K]). K a multiple of 16 and N of 16 (B [K, N]) or 8, every
    address on 16 bytes (TMA). On torch's current stream; the tensor maps kept (`TensorMaps`). ValueError for
    what the kernels do not take."""
    operator = "scaled matmul"

    def __call__(self, a, b, scale_a, scale_b, *, b_major: str = "nk", out=None, accumulation: str = "default"):
        """`accumulation` (`precise_of`): "fast" (wgmma's fp8 sums in the accumulators), "precise" (each
        k-tile's sums added into fp32: cuBLASLt's default), or "default": blockwise scales precise, else fast."""
        import torch

        from mlir_tile.runtime import torch_stream

        m, n, depth, scaling = _scaled_sizes(a, b, scale_a, scale_b, b_major)
        precise = precise_of(accumulation, scaling)
        if 0 in (m, n, depth):  # (torch's: an empty C, or with K 0 zeros)
            c = torch.zeros(m, n, dtype=torch.bfloat16, device=a.device)
            return c if out is None else out.copy_(c)
        plan = self.plan(b_major, scaling, precise, m, n, depth)
        if out is None:
            out = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
        elif out.shape != (m, n) or out.dtype != torch.bfloat16 or not out.is_cuda or not out.is_contiguous():
            raise ValueError(f"scaled matmul: out is a contiguous {m} x {n} CUDA tensor of bfloat16, got "
                             f"{tuple(out.shape)} {out.dtype}")
        # TMA takes matrices on 16 bytes: a view off them is copied onto them (A and B), or written through a
        # fresh C and copied into it (out)
        a, b = (x.clone() if x.data_ptr() % TMA_ADDRESS_BYTES else x for x in (a, b))
        c = out.new_empty(out.shape) if out.data_ptr() % TMA_ADDRESS_BYTES else out
        plan(a.data_ptr(), b.data_ptr(), c.data_ptr(), [scale_a.data_ptr(), scale_b.data_ptr()], torch_stream(a))
        return out if c is out else out.copy_(c)

    def plan(self, b_major: str, scaling: str, precise: bool, m: int, n: int, depth: int) -> "_HopperPlan":
        """The launch plan of an M x N x K product with B `b_major`, `scaling`'s scales (`SCALINGS`) and precise
        accumulation or not: checked and made on first use."""
        return self.plans.of((b_major, scaling, precise, m, n, depth),
                             lambda: self._plan(b_major, scaling, precise, m, n, depth))

    def _plan(self, b_major: str, scaling: str, precise: bool, m: int, n: int, depth: int) -> "_HopperPlan":
        config = scaled_config(b_major, scaling, precise)
        if n % config.unit or depth % config.k_unit:
            raise ValueError(f"scaled matmul: N a multiple of {config.unit} and K of {config.k_unit} (TMA: rows on 16 "
                             f"bytes), got {m} x {n} x {depth} with B {b_major}")
        box, b_rows = boxes(config), (depth, n) if b_major == "kn" else (n, depth)
        maps = [MapOperand(self.maps, (m, depth), depth, box["a"]), MapOperand(self.maps, b_rows, b_rows[1], box["b"]),
                MapOperand(self.maps, (m, n), n * 2, box["c"], store=True)]  # (fp8 A and B; bf16 C)
        return self.launched("e4m3", config, maps, m, n, depth, (POINTER, POINTER))


def precise_of(accumulation: str, scaling: str) -> bool:
    """Whether an fp8 product of `scaling`'s scales accumulates precisely (`HopperConfig.promote`): as
    `accumulation` asks ("fast", "precise"), or by default where the scales are blockwise (applied as each k-tile is
    added in: always precise) and not otherwise (the faster kernel, until the precise one is measured beside
    cuBLASLt's default: docs/notes/fp8-moe-plan.md)."""
    if accumulation not in ("default", "fast", "precise"):
        raise ValueError(f"scaled matmul: accumulation 'fast', 'precise' or 'default', got {accumulation!r}")
    if accumulation == "fast" and scaling == "blocks":
        raise ValueError("scaled matmul: blockwise scales are applied as each k-tile's sums are added in: "
                         "accumulation 'precise' (or 'default')")
    return accumulation == "precise" or scaling == "blocks"


def scaling_of(scale_a, scale_b) -> str:
    """The kind of scales (`SCALINGS`) fp8's scale_a and scale_b are, by their shapes alone: blockwise where they
    are 2-D, per tensor where each has one element, else per row (`_scaled_sizes` checks their extents)."""
    if scale_a.dim() == 2 or scale_b.dim() == 2:
        return "blocks"
    return "tensor" if scale_a.numel() == 1 and scale_b.numel() == 1 else "rows"


def _scaled_sizes(a, b, scale_a, scale_b, b_major: str) -> tuple[int, int, int, str]:
    """(M, N, K, `scaling_of` the scales) of ScaledMatmul's operands, or ValueError."""
    import torch

    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"scaled matmul: A and B are float8_e4m3fn, got {a.dtype} and {b.dtype}")
    if b_major not in ("kn", "nk") or a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"scaled matmul: 2-D A and B, b_major 'nk' (B [N, K]) or 'kn' (B [K, N]); got {b_major!r}")
    if not all(t.is_cuda and t.is_contiguous() for t in (a, b, scale_a, scale_b)):
        raise ValueError("scaled matmul: A, B and the scales are contiguous CUDA tensors")
    (m, depth), (n, b_depth) = a.shape, (b.shape if b_major == "nk" else b.shape[::-1])
    if b_depth != depth:
        raise ValueError(f"scaled matmul: A is {tuple(a.shape)} and B ({b_major}) {tuple(b.shape)}: the K extents "
                         f"differ")
    scaling, k_blocks, n_blocks = scaling_of(scale_a, scale_b), -(-depth // BLOCK), -(-n // BLOCK)
    extents = {"tensor": ((1,), (1,)), "rows": ((m,), (n,)), "blocks": ((m, k_blocks), (n_blocks, k_blocks))}
    shapes = (tuple(scale_a.shape), tuple(scale_b.shape))
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32 or not (
            shapes == extents[scaling] or scaling == "tensor" and scale_a.numel() == scale_b.numel() == 1):
        raise ValueError(f"scaled matmul: float32 scales of one element each, of [M] = [{m}] and [N] = [{n}], or "
                         f"blockwise [M, K / 128] = [{m}, {k_blocks}] and [N / 128, K / 128] = [{n_blocks}, "
                         f"{k_blocks}] (rounded up); got {scale_a.dtype} {shapes[0]} and {scale_b.dtype} {shapes[1]}")
    if scaling == "blocks" and b_major != "nk":
        raise ValueError("scaled matmul: blockwise scales take B [N, K] (b_layout 'nk')")
    return m, n, depth, scaling
