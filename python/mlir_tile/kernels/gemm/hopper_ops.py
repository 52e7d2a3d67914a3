"""The Hopper-only GEMM launchers (sm_90's library): fp8's `ScaledMatmul` (per tensor, per row, blockwise; fast
or precise accumulation), fused SwiGLU (`SwigluMatmul`) and the grouped GEMMs of a mixture of experts
(`GroupedMatmul`: masked and contiguous), each checking what it is given in one line."""
from __future__ import annotations

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.common import MapOperand, Plans, TensorMaps, operand_slots
from mlir_tile.kernels.gemm import sm90
from mlir_tile.kernels.gemm.launch import TMA_ADDRESS_BYTES, _HopperPlan, checked_operands
from mlir_tile.kernels.gemm.sm90 import boxes
from mlir_tile.kernels.gemm.sm90_tiles import (BLOCK, grouped_config, grouped_gradient_configs,
                                               scaled_config, swiglu_config)
from mlir_tile.runtime import POINTER, TENSOR_MAP


class _HopperOperator:
    """What the Hopper-only launchers share: the library (sm_90's, else ValueError naming `operator`), the tensor
    maps, the plans, the SMs, and a plan's launch of one kernel over A, B and C maps."""
    operator = "hopper gemm"

    def __init__(self, library):
        if not runs_warpgroup_kernels(library.chip):
            raise ValueError(f"{self.operator}: runs on Hopper's path (sm_90), not {library.chip}")
        self.library, self.maps, self.plans = library, TensorMaps(library.runtime), Plans()
        self.sms = library.runtime.device.properties.multiprocessor_count

    def launched(self, element: str, config, maps: list, m: int, n: int, depth: int, extras=(),
                 order_rows: int | None = None, epilogue=None) -> "_HopperPlan":
        """The plan of `config`'s kernel (with `epilogue`, its operands' slots last) on an M x N x K product through
        `maps` (A's, B's and C's), the kernel's parameters after the sizes `extras` (their types, or constants
        baked in), its grid the C tiles of `order_rows` x N (M x N unless given)."""
        module = self.library.module(sm90.kernel_name(element, config, epilogue),
                                     lambda: sm90.build_module(element, config, epilogue=epilogue))
        extras = [*extras, *(operand_slots(epilogue.operands) if epilogue is not None else [])]
        launch = module.prepare(sm90.KERNEL, [TENSOR_MAP] * 3 + [m, n // config.unit, depth // config.k_unit, *extras],
                                grid=config.grid(order_rows or m, n, self.sms), block=config.threads, shared_bytes=config.shared_bytes)
        return _HopperPlan(config, m, n, launch, maps)

    @staticmethod
    def _launch(plan, a, b, c, extras: list):
        """`plan` on torch tensors A, B and C on torch's current stream (A and B copied onto 16 bytes where off
        them), each address moved back by the bytes its map starts before the tensor (`_HopperPlan.before`);
        returns C."""
        from mlir_tile.runtime import torch_stream

        a, b = (t.clone() if t.data_ptr() % TMA_ADDRESS_BYTES else t for t in (a, b))
        plan(*(t.data_ptr() - before for t, before in zip((a, b, c), plan.before)), extras, torch_stream(a))
        return c


def _sixteen_bit(operator: str, x, w) -> str:
    """x's and w's element (f16, bf16), one dtype, else ValueError naming `operator`."""
    import torch

    element = {torch.float16: "f16", torch.bfloat16: "bf16"}.get(x.dtype)
    if element is None or w.dtype != x.dtype:
        raise ValueError(f"{operator}: x and w of one dtype, float16 or bfloat16; got {x.dtype} and {w.dtype}")
    return element


class SwigluMatmul(_HopperOperator):
    """silu(x W_gate^T) * (x W_up^T) in one GEMM on Hopper's path (`HopperConfig.swiglu`): x [M, K] and w [2F, K],
    W_gate's and W_up's rows interleaved a block of 8 at a time (`moe_ops.swiglu_weights`), f16 or bf16, C [M, F] of
    x's dtype, the gate and up products never written. K a multiple of 8, F of 8; on torch's current stream.
    ValueError for what the kernel does not take."""
    operator = "swiglu_mm"

    def __call__(self, x, w):
        import torch

        element = _sixteen_bit(self.operator, x, w)
        if x.dim() != 2 or w.dim() != 2 or w.shape[1] != x.shape[1]:
            raise ValueError(f"swiglu_mm: x [M, K] and w [2F, K]; got {tuple(x.shape)} and {tuple(w.shape)}")
        (m, depth), n = x.shape, w.shape[0]
        if n % 16 or depth % 8 or not all(t.is_cuda and t.is_contiguous() for t in (x, w)):
            raise ValueError(f"swiglu_mm: contiguous CUDA tensors, w's rows a multiple of 16 (swiglu_weights' "
                             f"interleaved blocks) and K of 8; got {tuple(x.shape)} and {tuple(w.shape)}")
        if 0 in (m, n, depth):  # (K 0: silu(0) 0 = 0)
            return torch.zeros(m, n // 2, dtype=x.dtype, device=x.device)
        plan = self.plans.of((element, m, n, depth), lambda: self._plan(element, m, n, depth))
        return self._launch(plan, x, w, torch.empty(m, n // 2, dtype=x.dtype, device=x.device), [])

    def _plan(self, element: str, m: int, n: int, depth: int) -> "_HopperPlan":
        config = swiglu_config(element)
        box = boxes(config)
        maps = [MapOperand(self.maps, (m, depth), 2 * depth, box["a"]),
                MapOperand(self.maps, (n, depth), 2 * depth, box["b"]),
                MapOperand(self.maps, (m, n // 2), n, box["c"], store=True)]
        return self.launched(element, config, maps, m, n, depth)


class GroupedMatmul(_HopperOperator):
    """The grouped GEMMs of a mixture of experts on Hopper's path (`HopperConfig.grouped`): w [E, N, K] (each
    expert's weights, as F.linear lays them), 16-bit (C of x's dtype) or e4m3 with DeepGEMM's blockwise scales
    (scale_x a row's 1 x 128 blocks of K, scale_w [E, N / 128, K / 128]; C bf16); ValueError for what they do not
    take:
    - masked (decode, DeepGEMM's masked layout): x [E, T, K] and counts int32 [E]; C [E, T, N] whose group e's
      first counts[e] rows are x[e] w[e]^T (rows past a count: unspecified, as the layout has it), T a multiple of
      128 (a tile's rows);
    - contiguous (training, prefill; torch._grouped_mm's): x [tokens, K] sorted by expert and offsets int32 [E],
      expert e's rows [offsets[e - 1], offsets[e]) (from 0): C [tokens, N], each expert's rows x's times its w^T
      (rows past offsets[E - 1]: zeros; offsets out of order: the rows two experts claim get either's product,
      never a write outside C); its gradients, `input_gradient` and `weight_gradient`.
    The counts and offsets are read by the kernel, so a CUDA graph holds the call."""
    operator = "grouped_mm"

    def __call__(self, x, w, counts=None, *, offsets=None, scale_x=None, scale_w=None, epilogue=None, operands=()):
        """`epilogue` (an `epilogues.Epilogue`, which `moe_ops.grouped_mm` takes on the contiguous form;
        `operands` in its order: row operands [tokens], e.g. `epilogues.row_scale`'s router weights, column ones
        [N] shared by the experts, "group_column" ones [E, N] an expert's own, e.g. `epilogues.expert_bias`,
        matrix ones [tokens, N]) applied to each product before it is rounded."""
        import torch

        contiguous = offsets is not None
        element, (groups, rows, n, depth), vector = self._checked(x, w, counts, offsets)
        config = grouped_config(element, contiguous, epilogue)
        scales = self._scales(scale_x, scale_w, x, groups, n, depth) if element == "e4m3" else []
        if n % config.unit or depth % config.k_unit:
            raise ValueError(f"grouped_mm: N a multiple of {config.unit} and K of {config.k_unit} (TMA's rows on 16 "
                             f"bytes), got N {n}, K {depth}")
        shape, dtype = (rows, n) if contiguous else (groups, rows, n), torch.bfloat16 if scales else x.dtype
        if 0 in (groups, rows, n, depth):
            return torch.zeros(shape, dtype=dtype, device=x.device)
        out = torch.empty(shape, dtype=dtype, device=x.device)  # (masked: rows past a count unspecified)
        form = "contiguous" if contiguous else "masked"
        arguments = checked_operands(epilogue, operands, rows, n, out, groups) if epilogue is not None else []
        plan = self.plans.of((element, form, groups, rows, n, depth, epilogue),
                             lambda: self._plan(element, config, form, groups, rows, n, depth, epilogue))
        return self._launch(plan, x, w, out, [s.data_ptr() for s in scales] + [vector.data_ptr()] + arguments)

    def input_gradient(self, grad, w, offsets):
        """The contiguous form's dx [tokens, K]: each expert's rows of grad [tokens, N] times its w [N, K] (B [K,
        N] read as it lies, through a 3-D map over w whose boxes stop at an expert's last row)."""
        import torch

        element, (tokens, n), (groups, _, depth) = self._gradient_operands(grad, w, offsets)
        if w.shape[1] != n:
            raise ValueError(f"grouped_mm: grad [tokens, N] and w [E, N, K], got {tuple(grad.shape)} and "
                             f"{tuple(w.shape)}")
        if 0 in (tokens, depth) or groups == 0 or n == 0:
            return torch.zeros(tokens, depth, dtype=grad.dtype, device=grad.device)
        config = grouped_gradient_configs(element)[0]
        out = torch.empty(tokens, depth, dtype=grad.dtype, device=grad.device)
        plan = self.plans.of((element, "dx", groups, tokens, depth, n),
                             lambda: self._plan(element, config, "dx", groups, tokens, depth, n))
        return self._launch(plan, grad, w, out, [offsets.data_ptr()])

    def weight_gradient(self, grad, x, offsets):
        """The contiguous form's dw [E, N, K]: expert e's grad rows [N x its tokens] times its x rows (both read
        as they lie, A [tokens, N] as [K, M] and x as [K, N], the reduction each expert's tokens: `ragged_k`);
        zeros for an expert without tokens."""
        import torch

        element, (tokens, n), (groups,) = self._gradient_operands(grad, x, offsets)
        depth = x.shape[1]
        if x.dim() != 2 or x.shape[0] != tokens:
            raise ValueError(f"grouped_mm: grad [tokens, N] and x [tokens, K], got {tuple(grad.shape)} and "
                             f"{tuple(x.shape)}")
        if 0 in (groups, n, depth) or tokens == 0:
            return torch.zeros(groups, n, depth, dtype=grad.dtype, device=grad.device)
        config = grouped_gradient_configs(element)[1]
        out = torch.empty(groups, n, depth, dtype=grad.dtype, device=grad.device)
        plan = self.plans.of((element, "dw", groups, tokens, n, depth),
                             lambda: self._plan(element, config, "dw", groups, tokens, n, depth))
        return self._launch(plan, grad, x, out, [offsets.data_ptr()])

    def _gradient_operands(self, grad, other, offsets) -> tuple:
        """(the element, grad's [tokens, N], the experts' extents: w's [E, N, K], or (E,) beside x) of a
        gradient's operands: 16-bit of one dtype, contiguous on the GPU, rows on 16 bytes, offsets int32 [E];
        else ValueError."""
        import torch

        element = _sixteen_bit(self.operator, grad, other)
        experts = tuple(other.shape) if other.dim() == 3 else tuple(offsets.shape[:1])
        if (grad.dim() != 2 or not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32
                or tuple(offsets.shape) != experts[:1] or grad.shape[1] % 8 or other.shape[-1] % 8
                or not all(t.is_cuda and t.is_contiguous() for t in (grad, other, offsets))):
            raise ValueError(f"grouped_mm's gradients: contiguous CUDA tensors, grad [tokens, N], offsets int32 [E], "
                             f"N and K multiples of 8; got grad {tuple(grad.shape)}, {tuple(other.shape)}, offsets "
                             f"{getattr(offsets, 'dtype', offsets)} {tuple(getattr(offsets, 'shape', ()))}")
        return element, tuple(grad.shape), experts

    def _checked(self, x, w, counts, offsets) -> tuple:
        """(the element, (E, T or tokens, N, K), the counts or offsets) of a call, or ValueError."""
        import torch

        contiguous = offsets is not None
        fp8 = x.dtype == torch.float8_e4m3fn and w.dtype == x.dtype
        element = "e4m3" if fp8 else _sixteen_bit(self.operator, x, w)
        if (counts is None) != contiguous:
            raise ValueError("grouped_mm: the masked layout's counts or the contiguous one's offsets, one of them")
        if x.dim() != (2 if contiguous else 3) or w.dim() != 3 or w.shape[2] != x.shape[-1] or (
                not contiguous and w.shape[0] != x.shape[0]):
            raise ValueError(f"grouped_mm: x [E, T, K] (masked) or [tokens, K] (contiguous) and w [E, N, K]; got "
                             f"{tuple(x.shape)} and {tuple(w.shape)}")
        (groups, n, depth), rows = w.shape, x.shape[-2]
        vector, name = (offsets, "offsets") if contiguous else (counts, "counts")
        tile_rows = 1 if contiguous else grouped_config(element).bm  # (a masked group's T: whole tiles)
        if (not isinstance(vector, torch.Tensor) or vector.dtype != torch.int32 or vector.shape != (groups,)
                or rows % tile_rows or not all(t.is_cuda and t.is_contiguous() for t in (x, w, vector))):
            raise ValueError(f"grouped_mm: contiguous CUDA tensors, {name} int32 [E] = [{groups}]"
                             f"{'' if contiguous else f', T a multiple of {tile_rows}'}; got x {tuple(x.shape)}, w "
                             f"{tuple(w.shape)}, {name} {getattr(vector, 'dtype', vector)} "
                             f"{tuple(getattr(vector, 'shape', ()))}")
        return element, (groups, rows, n, depth), vector

    @staticmethod
    def _scales(scale_x, scale_w, x, groups: int, n: int, depth: int) -> list:
        """fp8's blockwise scales, checked: float32 scale_x [*x's rows, K / 128] and scale_w [E, N / 128, K / 128]
        (rounded up), contiguous on x's device; else ValueError."""
        import torch

        k_blocks, n_blocks = -(-depth // BLOCK), -(-n // BLOCK)
        wanted = ((*x.shape[:-1], k_blocks), (groups, n_blocks, k_blocks))
        given = [getattr(s, "shape", None) for s in (scale_x, scale_w)]
        if (any(not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or not s.is_contiguous()
                or s.device != x.device for s in (scale_x, scale_w)) or tuple(given[0]) != wanted[0]
                or tuple(given[1]) != wanted[1]):
            raise ValueError(f"grouped_mm: float8_e4m3fn takes blockwise float32 scales, scale_x {list(wanted[0])} and "
                             f"scale_w {list(wanted[1])} (blocks of 128, rounded up); got {given[0]} and {given[1]}")
        return [scale_x, scale_w]

    def _plan(self, element: str, config, form: str, groups: int, rows: int, n: int, depth: int,
              epilogue=None) -> "_HopperPlan":
        """The launch plan of `form`: "masked" (A [E x T, K], B [E x N, K], C [E x T, N]), "contiguous" (A [tokens,
        K], B [E x N, K], C through `ragged`'s map: `sm90_grouped.clipped_store_at`), "dx" (A grad [tokens, N], B
        w [E, N, K] as a 3-D map of [K, N]s, C as contiguous's) or "dw" (`rows` the tokens, N x `depth` the
        product: A grad and B x through `ragged` maps of BK rows, C [E, N, K]). The kernel's last parameter: T
        (masked), else E."""
        bm, bk, size = config.bm, config.bk, config.element_bits // 8
        box, (m, product_n, product_depth) = boxes(config), (n, depth, rows) if form == "dw" else (
            (rows if form != "masked" else groups * rows), n, depth)

        def ragged(tensor_rows: int, columns: int, box_rows: int, which: str, element_bytes: int = 2):
            """The 3-D map over [tensor_rows, columns] whose matrix j's row i is its row j + i - box_rows (its
            address box_rows rows before the tensor's), and those bytes."""
            stride = element_bytes * columns
            return (MapOperand(self.maps, (tensor_rows + 1, box_rows, columns), stride, box[which], stride,
                               store=which == "c"), box_rows * stride)

        if form == "dw":
            maps = [ragged(rows, n, bk, "a"), ragged(rows, depth, bk, "b"),
                    (MapOperand(self.maps, (groups, n, depth), 2 * depth, box["c"], 2 * n * depth, store=True), 0)]
        else:
            a_map = (MapOperand(self.maps, (m, product_depth), size * product_depth, box["a"]), 0)
            b_map = ((MapOperand(self.maps, (groups, product_depth, n), 2 * n, box["b"], 2 * product_depth * n), 0)
                     if form == "dx" else (MapOperand(self.maps, (groups * n, product_depth), size * product_depth,
                                                      box["b"]), 0))
            c_map = (ragged(m, n, bm, "c") if form != "masked" else
                     (MapOperand(self.maps, (m, n), 2 * n, box["c"], store=True), 0))
            maps = [a_map, b_map, c_map]
        order_rows = {"masked": m, "dw": groups * bm * -(-m // bm)}.get(form, bm * (-(-m // bm) + groups + 1))
        k_extent = config.k_unit * -(-product_depth // config.k_unit)  # (dw: the tokens rounded up)
        plan = self.launched(element, config, [map_ for map_, _ in maps], m, product_n, k_extent,
                             (POINTER,) * (2 * (config.element_bits == 8) + 1) + (rows if form == "masked" else groups,),
                             order_rows=order_rows, epilogue=epilogue)
        plan.before = [before for _, before in maps]
        return plan


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
        """`accumulation` (`precise_of`): "fast" (wgmma's fp8 sums in the accumulators, cuBLASLt's
        use_fast_accum), "precise" or "default" (each k-tile's sums added into fp32: cuBLASLt's default)."""
        import torch

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
        # TMA takes matrices on 16 bytes: an out off them is written through a fresh C and copied into it
        c = out.new_empty(out.shape) if out.data_ptr() % TMA_ADDRESS_BYTES else out
        addresses, _held = kernel_scales(plan.config, scale_a, scale_b)  # (held until launched)
        self._launch(plan, a, b, c, addresses)
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
    `accumulation` asks ("fast", "precise"; "default" is precise, as cuBLASLt's default accumulates: its RMS
    error is cuBLASLt default's, fast's 1.2-2.1x it at K 2624-16384 on an H100, docs/notes/fp8-moe-plan.md).
    Blockwise scales are applied as each k-tile is added in: always precise."""
    if accumulation not in ("default", "fast", "precise"):
        raise ValueError(f"scaled matmul: accumulation 'fast', 'precise' or 'default', got {accumulation!r}")
    if accumulation == "fast" and scaling in ("blocks", "row_blocks"):
        raise ValueError("scaled matmul: blockwise scales are applied as each k-tile's sums are added in: "
                         "accumulation 'precise' (or 'default')")
    return accumulation != "fast"


def scaling_of(scale_a, scale_b, n: int) -> str:
    """The kind of scales (`SCALINGS`) fp8's scale_a and scale_b of an M x N product are, by their shapes alone:
    blockwise where they are 2-D (scale_b one a row's 1 x 128 blocks where it has N > 1 rows, else one a 128 x
    128 block), per tensor where each has one element, else per row (`_scaled_sizes` checks their extents)."""
    if scale_a.dim() == 2 or scale_b.dim() == 2:
        return "row_blocks" if n > 1 and scale_b.shape[0] == n else "blocks"
    return "tensor" if scale_a.numel() == 1 and scale_b.numel() == 1 else "rows"


def kernel_scales(config, scale_a, scale_b) -> tuple[list, object]:
    """(the scales' addresses as `config`'s kernel reads them, a tensor the caller holds until the launch, or
    None): with B's rows' 1 x 128 blocks scale_b [N, K / 128] laid out MN-major and padded to whole tiles, [K /
    128, N rounded up to BN] (`sm90_fused.column_scales_at`: each of a thread's columns at a constant offset), a
    fresh tensor (freed after the launch: torch's allocator reuses it in stream order)."""
    import torch.nn.functional as F

    if not config.row_blocks:
        return [scale_a.data_ptr(), scale_b.data_ptr()], None
    n = scale_b.shape[0]
    columns = F.pad(scale_b.t(), (0, -(-n // config.bn) * config.bn - n)).contiguous()
    return [scale_a.data_ptr(), columns.data_ptr()], columns


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
    scaling, k_blocks, n_blocks = scaling_of(scale_a, scale_b, n), -(-depth // BLOCK), -(-n // BLOCK)
    extents = {"tensor": ((1,), (1,)), "rows": ((m,), (n,)), "blocks": ((m, k_blocks), (n_blocks, k_blocks)),
               "row_blocks": ((m, k_blocks), (n, k_blocks))}
    shapes = (tuple(scale_a.shape), tuple(scale_b.shape))
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32 or not (
            shapes == extents[scaling] or scaling == "tensor" and scale_a.numel() == scale_b.numel() == 1):
        raise ValueError(f"scaled matmul: float32 scales of one element each, of [M] = [{m}] and [N] = [{n}], or "
                         f"blockwise [M, K / 128] = [{m}, {k_blocks}] and [N / 128, K / 128] = [{n_blocks}, "
                         f"{k_blocks}] or [N, K / 128] = [{n}, {k_blocks}] (rounded up); got {scale_a.dtype} "
                         f"{shapes[0]} and {scale_b.dtype} {shapes[1]}")
    if scaling in ("blocks", "row_blocks") and b_major != "nk":
        raise ValueError("scaled matmul: blockwise scales take B [N, K] (b_layout 'nk')")
    return m, n, depth, scaling
