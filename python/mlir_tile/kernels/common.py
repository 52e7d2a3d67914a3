"""What the kernel families share (importing no kernel): epilogues' arms and operands, the Hopper kernels'
shared-memory and register budgets, the stored tile of a TMA-store epilogue, the tensor maps kept for launches."""
from __future__ import annotations

from functools import partial

from mlir_tile.isa.targets import REGISTER_FILE, WARPGROUP_CHIP, max_shared_bytes
from mlir_tile.kernels.epilogues import Epilogue

HALF = 2  # bytes of a 16-bit element
LOG2E = 1.4426950408889634  # log2(e): softmaxes run in the log2 domain (exp2)


def for_each_arm(k, epilogue, extras, sizes, emit, group=None) -> None:
    """`emit(finish)` emits the store code, `finish(value, row, column)` the epilogue on one accumulator (None
    where there is none): once, or for a `Choice` once per arm, inside the branch where its selector holds
    (one branch a thread around the whole epilogue). `group`: a grouped GEMM's tile's group (`Epilogue.apply`)."""
    if epilogue is None:
        emit(None)
        return
    operands = epilogue.operands
    if isinstance(epilogue, Epilogue):
        emit(partial(_apply, k, epilogue, sizes, extras, operands, group))
        return
    selector = extras[[operand.name for operand in operands].index(epilogue.selector)]
    for code, arm in enumerate(epilogue.arms):
        with k.if_(k.compare("eq", selector, code)):
            emit(partial(_apply, k, arm, sizes, extras, operands, group))


def _apply(k, epilogue, sizes, extras, operands, group, value, row, column):
    return epilogue.apply(k, value, row, column, *sizes, extras, operands, group)


def operand_parameters(epilogue, element: str) -> list:
    """The kernel parameters of an epilogue's operands: arrays of C's element, fp32 scalars."""
    from mlir_tile.builder import Global

    kinds = {"scalar": "f32", "integer": "index"}
    return [kinds.get(operand.kind) or Global(element, alignment=HALF) for operand in epilogue.operands]


def operand_slots(operands) -> list:
    """The launch slots (`runtime.Slot`) of an epilogue's or a variant's operands, as `operand_parameters` types
    their kernel parameters: fp32 scalars, 64-bit integers, arrays' addresses."""
    import ctypes

    from mlir_tile.runtime import POINTER, Slot

    return [Slot(ctypes.c_float) if operand.kind == "scalar" else POINTER for operand in operands]


def epilogue_suffix(epilogue: Epilogue | None) -> str:
    if epilogue is None:
        return ""
    name = "".join(c if c.isalnum() or c in "_-" else "-" for c in epilogue.name)
    return f"_{name}_{epilogue.fingerprint}"


SWIZZLE_COLUMNS = 64  # 16-bit elements in a 128-byte swizzle's row: a box's width
BARRIER_BYTES = 1024  # the mbarriers' static shared memory, as ptxas lays it out beside the dynamic


def check_shared(kernel: str, config, shared_bytes: int, fix: str) -> None:
    """ValueError where `config`'s dynamic shared memory and the mbarriers' BARRIER_BYTES exceed a block's on
    sm_90a."""
    if shared_bytes + BARRIER_BYTES > max_shared_bytes(WARPGROUP_CHIP):
        raise ValueError(f"{kernel}: {config} needs {shared_bytes} bytes of shared memory and its barriers' "
                         f"{BARRIER_BYTES}, more than the {max_shared_bytes(WARPGROUP_CHIP)} a block may use on sm_90a: "
                         f"{fix}")


def raised_registers(threads: int, producer: int, consumers: int) -> int:
    """What each consumer thread of a warp-specialized block raises its registers to (setmaxnreg.inc): the
    entry count (the register file over the block, in multiples of 8) and its share of what the producer
    warpgroup gave back going down to `producer`; asking for more waits forever."""
    entry = REGISTER_FILE // threads // 8 * 8
    return (entry + (entry - producer) // consumers) // 8 * 8


def boxed_tile(rows: int, columns: int, element_bits: int = 16):
    """A rows x columns tile (row, column) as TMA writes boxes of rows x 128 bytes side by side, 128-byte swizzled
    (K-major for wgmma where a row is K)."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.isa.tma import Box

    width = 1024 // element_bits
    swizzle = Box(8, width, element_bits, 128).layout.swizzle
    return Layout((rows, (width, columns // width)), (width, (1, rows * width)), swizzle)


def transposed(tile):
    """A (rows, columns) tile layout read as (columns, rows), each element where it lies: wgmma's MN-major
    operand of a tile TMA writes in rows (B [K, N] of [N, K]-shaped boxes, A [K, M]), or TMA's boxes of an
    MN-major one."""
    from mlir_tile.algebra.layout import Layout

    return Layout((tile.shape[1], tile.shape[0]), (tile.stride[1], tile.stride[0]), tile.swizzle)


def stored_tile(rows: int, columns: int, box_columns: int = SWIZZLE_COLUMNS, swizzle_bytes: int = 128) -> dict:
    """A 16-bit rows x columns tile as TMA stores read it ("c": boxes of rows x `box_columns` side by side,
    `swizzle_bytes`-swizzled), its 32-bit words as stmatrix writes them ("c_words", `words_of`), and one
    warpgroup's 64 rows of those words from its first word ("c_band"), proven to be every 64-row band's layout."""
    from mlir_tile.algebra.layout import Layout
    from mlir_tile.algebra.words import words_of
    from mlir_tile.isa.tma import Box

    swizzle, boxes_of = Box(64, box_columns, 16, swizzle_bytes).layout.swizzle, columns // box_columns
    c = Layout((rows, (box_columns, boxes_of)), (box_columns, (1, rows * box_columns)), swizzle)
    c_words = words_of(c, 2)
    words = box_columns // 2
    c_band = Layout((64, (words, boxes_of)), (words, (1, rows * words)), c_words.swizzle)
    for group in range(rows // 64):
        if any(c_band.offset(r, w) + 64 * words * group != c_words.offset(64 * group + r, w)
               for r in range(64) for w in range(words * boxes_of)):
            raise ValueError(f"row band {group}'s rows of {c_words} are not {c_band} from its first word")
    return {"c": c, "c_words": c_words, "c_band": c_band}


def output_element(element: str) -> str:
    """C's element type for inputs of `element`: bf16 for fp8 (as torch._scaled_mm's out_dtype), else theirs."""
    return "bf16" if element == "e4m3" else element


class TensorMaps:
    """The tensor maps Hopper kernels are launched with (passed by value), one per (address, shape, strides, box,
    store), the `kept` most recent kept: a training loop's weights and buffers come back at the same addresses,
    so each is encoded once (`cuTensorMapEncodeTiled` costs more host time than the rest of a launch)."""

    def __init__(self, runtime, kept: int = 256):
        from collections import OrderedDict

        self.runtime, self.kept, self.maps = runtime, kept, OrderedDict()

    def __call__(self, tensor, box, store: bool = False):
        """The map of 2-D row-major CUDA `tensor` (rows on 16 bytes, 16-byte aligned) in boxes of `box`
        (`runtime.TensorMapValue`); of a 3-D one, a stack of such matrices (`Runtime.tensor_map`'s 3-D map).
        `store`: a map the kernel's TMA stores write through (`Runtime.tensor_map(store=True)`)."""
        size = tensor.element_size()
        return self.at(tensor.data_ptr(), _map_spec(tuple(tensor.shape), tensor.stride(-2) * size, box,
                                                     tensor.stride(0) * size if tensor.dim() == 3 else None, store))

    def at(self, address: int, spec: tuple):
        """The map of the matrix (or stack) at device `address` laid out as `spec` says (`_map_spec`)."""
        key = (address, spec)
        found = self.maps.pop(key, None)
        if found is None:
            shape, row_stride_bytes, box, matrix_stride_bytes, store, floats, box_matrices = spec
            found = self.runtime.tensor_map(address, shape, row_stride_bytes, box, matrix_stride_bytes, store=store,
                                            floats=floats, box_matrices=box_matrices)
        self.maps[key] = found
        while len(self.maps) > self.kept:
            self.maps.popitem(last=False)
        return found


def _map_spec(shape: tuple, row_stride_bytes: int, box, matrix_stride_bytes, store: bool, floats: bool = False,
              box_matrices: int = 1) -> tuple:
    """What a tensor map encodes besides its address: `Runtime.tensor_map`'s arguments (the device's, implied)."""
    return shape, row_stride_bytes, box, matrix_stride_bytes, store, floats, box_matrices


class MapOperand:
    """One operand's tensor maps in a launch plan, whose shape, strides and box are fixed: the map at a given
    address, the last one at hand (a loop's weights, and a freed output's block, come back at one address), the
    others through the shared `TensorMaps`."""

    def __init__(self, maps: TensorMaps, shape: tuple, row_stride_bytes: int, box, matrix_stride_bytes=None,
                 store: bool = False, floats: bool = False, box_matrices: int = 1):
        self.maps = maps
        self.spec = _map_spec(tuple(shape), row_stride_bytes, box, matrix_stride_bytes, store, floats, box_matrices)
        self.last = (None, None)

    def __call__(self, address: int):
        last_address, found = self.last
        if address != last_address:
            found = self.maps.at(address, self.spec)
            self.last = (address, found)
        return found


def on_16_bytes(x):
    """`x`, or a copy of it where its data lies off 16 bytes (a view: x[1:], narrow, split): the kernels copy
    16-byte chunks (cp.async, TMA), and torch's allocator lays a fresh tensor on 512 bytes."""
    return x.clone() if x.is_cuda and x.data_ptr() % 16 else x


class Plans(dict):
    """Launch plans by key, the `kept` most recently made kept: a model whose number of rows changes each step
    makes a plan a length, which would otherwise pile up. A lookup is a dict's; adding one (`keep`) holds a lock,
    so that threads adding at once do not evict under each other."""

    def __init__(self, kept: int = 1024):
        import threading

        super().__init__()
        self.kept, self._adding = kept, threading.Lock()

    def of(self, key, make):
        """The plan of `key`, made by `make()` where there is none (what `make` raises, raised)."""
        plan = self.get(key)
        return self.keep(key, make()) if plan is None else plan

    def keep(self, key, plan):
        """`plan` kept for `key` (the oldest forgotten past `kept`); returns it."""
        with self._adding:
            if len(self) >= self.kept:
                del self[next(iter(self))]
            self[key] = plan
        return plan


def allocator(shape, dtype, device):
    """A function making uninitialized contiguous tensors of `shape` and `dtype` on `device` at
    torch.empty_like's host cost, about half of torch.empty's on the H100's host (its argument parsing): from
    a prototype that repeats one element (stride 0: empty_like lays out a tensor with overlapping elements
    contiguously), so it holds no more memory than that element."""
    import torch

    return partial(torch.empty_like, torch.empty(1, dtype=dtype, device=device).expand(*shape))
