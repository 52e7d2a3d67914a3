"""Load PTX and run kernels with cuda-python, on device arrays (torch, CuPy, JAX: anything with DLPack or the
CUDA Array Interface) without copies, or on numpy arrays copied in and out. Imports no MLIR: a GPU host needs
only this file's dependencies (cuda-python, numpy): the wheel installed without the `compiler` extra.

    with Runtime() as rt:
        module = rt.load_ptx(ptx)
        module.launch("gemm", [a, b, c, np.int64(m)], grid=(n // 128, m // 128), block=128,
                      stream=torch_stream(a))                      # torch tensors: no copy, torch's stream
        out_a, out_b = module.launch("matrix_kernel", [a, b], grid=1, block=32)  # numpy: copied back

`cuda.core` loads the code and reads device arrays (`StridedMemoryView`); the driver's `cuLaunchKernel`, called
through ctypes, launches (the parameters packed by ctypes: TMA tensor maps by value, `TensorMapValue`; a
`Launch` packed once by `LoadedModule.prepare`, its `Slot`s filled at each call); `cuda.bindings.driver` copies
between numpy arrays and device buffers. Every CUDA failure becomes a `CudaError` carrying the driver's message.
A launch copies nothing from the host, so it can be captured in a CUDA graph (torch.cuda.graph).
"""
from __future__ import annotations

import ctypes
import functools
import io
import sys
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np


class CudaError(RuntimeError):
    pass


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when a CUDA device can be used, else (False, why not)."""
    try:
        from cuda.core import Device

        device = Device(0)
        device.set_current()
        return True, device.name
    except Exception as error:  # no driver, no device, no cuda-python: all mean "no GPU here"
        return False, f"{type(error).__name__}: {error}".strip()


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result):
    driver = _driver()
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(status)
        _, text = driver.cuGetErrorString(status)
        raise CudaError(f"{name.decode() if name else status}: {text.decode() if text else ''}")
    return values[0] if len(values) == 1 else values


@dataclass
class Timing:
    milliseconds: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.milliseconds))


class Runtime:
    """The current device, one stream, and the modules loaded on it."""

    def __init__(self, device: int = 0):
        try:
            from cuda.core import Device

            self.device = Device(device)
            self.device.set_current()
            self._threads = threading.local()  # (the threads this device's context was made current on)
            self._threads.current = True
            self.stream = self.device.create_stream()
            self._streams: dict = {}
            self._last_stream = (None, None)  # the stream object passed last, and its cuda.core Stream
        except Exception as error:
            raise CudaError(f"cannot use CUDA device {device}: {error}") from None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stream.sync()
        self.stream.close()

    @property
    def name(self) -> str:
        return self.device.name

    def on_this_thread(self) -> None:
        """The device's context current on the calling thread, where it was not yet: a call from another thread
        than the one that made the runtime (torch's autograd engine runs a backward on its own) found no context
        (CUDA_ERROR_INVALID_CONTEXT)."""
        if not getattr(self._threads, "current", False):
            self.device.set_current()
            self._threads.current = True

    def stream_of(self, stream):
        """A cuda.core Stream for `stream`: a cuda.core Stream, an object with `__cuda_stream__` (torch, CuPy
        streams) or a raw CUstream handle (an int)."""
        from cuda.core import Stream

        if isinstance(stream, Stream):
            return stream
        if stream is self._last_stream[0]:
            return self._last_stream[1]
        try:
            handle = stream if isinstance(stream, int) else stream.__cuda_stream__()[1]
            if handle not in self._streams:  # wrapping a foreign stream costs more than a launch
                self._streams[handle] = Stream.from_handle(handle)
            self._last_stream = (stream, self._streams[handle])
            return self._streams[handle]
        except Exception as error:
            raise CudaError(f"{stream!r} is no CUDA stream: {error}") from None

    def load_ptx(self, ptx: str | bytes, name: str = "module") -> "LoadedModule":
        """PTX, compiled for this device by the driver when a kernel is first looked up."""
        from cuda.core import ObjectCode

        text = ptx.encode() if isinstance(ptx, str) else ptx
        self.on_this_thread()
        try:
            code = ObjectCode.from_ptx(text, name=name)
        except Exception as error:
            raise CudaError(f"cannot load PTX '{name}': {error}{self._ptx_log(text)}") from None
        return LoadedModule(self, code, name, ptx=text)

    def load_cubin(self, cubin: bytes, name: str = "module") -> "LoadedModule":
        from cuda.core import ObjectCode

        return LoadedModule(self, ObjectCode.from_cubin(cubin, name=name), name)

    def _ptx_log(self, ptx: bytes) -> str:
        """The PTX compiler's log for `ptx` (the driver's load error names no line), as a message suffix."""
        from cuda.core import Program, ProgramOptions

        major, minor = self.device.compute_capability
        log = io.StringIO()
        try:
            Program(ptx.decode(), code_type="ptx", options=ProgramOptions(arch=f"sm_{major}{minor}")).compile(
                "cubin", logs=log)
        except Exception as error:
            return f"\nPTX compiler log:\n{(log.getvalue() or str(error)).strip()}"
        return f"\nPTX compiler log:\n{log.getvalue().strip()}" if log.getvalue().strip() else ""

    DEFAULT_DYNAMIC_SHARED = 48 * 1024  # what a kernel may use without opting in

    def allow_dynamic_shared(self, kernel, nbytes: int) -> None:
        """Let `kernel` use `nbytes` of dynamic shared memory: where they and its static shared memory pass 48
        KiB, CUDA wants the kernel's opt-in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); more than the
        device has is a CudaError that says so."""
        if not nbytes:
            return
        driver = _driver()
        static = _check(driver.cuKernelGetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.handle, self.device.device_id))
        if nbytes + static <= self.DEFAULT_DYNAMIC_SHARED:
            return
        limit = _check(driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device.device_id))
        if nbytes + static > limit:
            raise CudaError(f"{nbytes} bytes of dynamic shared memory (+{static} static) is more than the {limit} "
                            f"a block can have on {self.device.name}")
        _check(driver.cuKernelSetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes, kernel.handle,
            self.device.device_id))

    # ----- memory -----
    def to_device(self, array: np.ndarray):
        self.on_this_thread()
        array = np.ascontiguousarray(array)
        buffer = self.device.allocate(max(array.nbytes, 1), stream=self.stream)
        if array.nbytes:
            _check(_driver().cuMemcpyHtoDAsync(int(buffer.handle), array.ctypes.data, array.nbytes, int(self.stream.handle)))
        return buffer

    def tensor_map(self, address: int, shape: Sequence[int], row_stride_bytes: int, box,
                   matrix_stride_bytes: int | None = None, *, store: bool = False,
                   floats: bool = False, box_matrices: int = 1) -> "TensorMapValue":
        """The 128-byte CUtensorMap of a tiled TMA load (`cuTensorMapEncodeTiled`) from the row-major matrix of
        `shape` (rows, columns) at device `address` (16-byte aligned; rows `row_stride_bytes` apart, a multiple
        of 16) in boxes of `box` (`mlir_tile.isa.tma.Box`: its extents, element size and swizzle mode), elements
        past the matrix read as zeros, passed to the kernel by value (`TensorMapValue`).
        `shape` (matrices, rows, columns) with `matrix_stride_bytes`: a 3-D map over a stack of such matrices,
        its box one matrix's (a box stops at its matrix's last row), or with `box_matrices` box.rows /
        box_matrices rows of each of that many matrices, landing in the tile one matrix's rows after another's (a
        token's query heads, then the next token's: `sm90_varlen.PackedItems`). `store`: a map TMA stores write through,
        whose rows must be whole 16-byte chunks (`tma.check_store_rows`, ValueError otherwise): a store leaves
        the rows and columns past the matrix alone only then, since it writes a row's last chunk whole.
        `floats`: the elements typed float32 (32-bit boxes), as a TMA reduction's map must be (the hardware adds
        by the map's type; an untyped map's elements are moved, not added)."""
        from mlir_tile.isa.tma import check_store_rows

        if store:
            check_store_rows(shape[-1], box.element_bits)
        if len(shape) not in (2, 3) or (len(shape) == 3) != (matrix_stride_bytes is not None):
            raise ValueError(f"tensor_map: shape (rows, columns), or (matrices, rows, columns) with the matrices' "
                             f"stride; got {tuple(shape)}, {matrix_stride_bytes}")
        if box_matrices != 1 and (len(shape) != 3 or box_matrices < 1 or box.rows % box_matrices):
            raise ValueError(f"tensor_map: a box over {box_matrices} matrices takes a 3-D map and a box of a multiple "
                             f"of that many rows; got {tuple(shape)}, {box.rows} rows")
        if floats and box.element_bits != 32:
            raise ValueError(f"tensor_map: float32 elements are 32 bits, got a box of {box.element_bits}-bit ones")
        if any(extent >= 2**31 for extent in shape):  # (kernels' row and tile counts rely on it too)
            raise ValueError(f"tensor_map: extents below 2^31 (a TMA copy's coordinates are signed 32-bit: no "
                             f"element past that is reached), got {tuple(shape)}")
        driver = _driver()
        self.on_this_thread()  # (after the checks, which tests run without a device)
        kinds = {8: "UINT8", 16: "UINT16", 32: "UINT32", 64: "UINT64"}
        swizzles = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
        *matrices, rows, columns = shape
        strides = [row_stride_bytes] + ([matrix_stride_bytes] if matrices else [])
        tensor_map = _check(driver.cuTensorMapEncodeTiled(
            getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{'FLOAT32' if floats else kinds[box.element_bits]}"),
            len(shape),
            address, [driver.cuuint64_t(extent) for extent in (columns, rows, *matrices)],
            [driver.cuuint64_t(stride) for stride in strides],
            [driver.cuuint32_t(extent) for extent in (box.columns, box.rows // box_matrices,
                                                      *[box_matrices] * len(matrices))],
            [driver.cuuint32_t(1)] * len(shape),
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzles[box.swizzle_bytes]}"),
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        return TensorMapValue.from_buffer_copy(ctypes.string_at(tensor_map.getPtr(), ctypes.sizeof(TensorMapValue)))

    def to_host(self, buffer, like: np.ndarray) -> np.ndarray:
        result = np.empty_like(np.ascontiguousarray(like))
        if result.nbytes:
            _check(_driver().cuMemcpyDtoHAsync(result.ctypes.data, int(buffer.handle), result.nbytes, int(self.stream.handle)))
        self.stream.sync()
        return result


def torch_stream(tensor) -> int:
    """The handle of torch's current stream on `tensor`'s device, for `launch(stream=...)`: what
    torch.cuda.current_stream() names, without its cost (7.5 us of host time a call on the H200's host, more
    than a small kernel runs); Triton's launcher reads it the same way."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # private: a torch without it takes the public way
    device = tensor.get_device()
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


class TensorMapValue(ctypes.c_ubyte * 128):
    """A CUtensorMap's 128 bytes (`Runtime.tensor_map`), which a launch passes by value to a kernel's tensor-map
    parameter (the builder's `TensorMap`: `.param .align 64 .b8 [128]`)."""


@dataclass(frozen=True)
class _Shape:
    """A launch's grid and block (x, y, z), dynamic shared bytes and, for a cluster's or a dependent's launch,
    the driver's CUlaunchConfig with its attributes (its stream set at each launch)."""
    grid: tuple
    block: tuple
    shared_bytes: int
    extended: object = None


# Whether `prepare(..., dependent=True)` launches as the dependent of the kernel before it (a switch for measuring
# with and without; set before the launches are prepared)
DEPENDENT_LAUNCHES = True


def _launch_shape(grid, block, shared_bytes: int, cluster=None, dependent: bool = False) -> _Shape:
    """The launch shape of `grid` blocks of `block` threads; with `cluster` (CTAs a cluster, dividing the grid
    along each dimension) or `dependent` (programmatic stream serialization: the kernel may start before the one
    before it on its stream ends, and waits for it at `griddepcontrol.wait`, `Kernel.wait_for_prerequisites`) a
    CUlaunchConfig carrying those attributes."""
    grid3, block3 = (tuple(v) + (1,) * (3 - len(v)) if isinstance(v, (tuple, list)) else (v, 1, 1)
                     for v in (grid, block))
    dependent = dependent and DEPENDENT_LAUNCHES
    if cluster is None and not dependent:
        return _Shape(grid3, block3, shared_bytes)
    driver, attributes = _driver(), []
    if cluster is not None:
        cluster3 = tuple(cluster) + (1,) * (3 - len(cluster)) if isinstance(cluster, (tuple, list)) else (cluster, 1, 1)
        if any(g % c for g, c in zip(grid3, cluster3)):
            raise ValueError(f"launch: a grid of {grid3} blocks is no whole number of clusters of {cluster3}")
        attribute = driver.CUlaunchAttribute()
        attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster3
        attributes.append(attribute)
    if dependent:
        attribute = driver.CUlaunchAttribute()
        attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attribute.value.programmaticStreamSerializationAllowed = 1
        attributes.append(attribute)
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid3
    config.blockDimX, config.blockDimY, config.blockDimZ = block3
    config.sharedMemBytes = shared_bytes
    config.attrs, config.numAttrs = attributes, len(attributes)
    return _Shape(grid3, block3, shared_bytes, config)


@functools.cache
def _driver_library():
    """The driver's library through ctypes, which the launches call: cuda.bindings' cuLaunchKernel parses its
    arguments in Python, which costs more host time than the driver's own launch."""
    library = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    library.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    library.cuLaunchKernelEx.argtypes = [ctypes.c_void_p] * 4
    return library


_EXTENDED = threading.Lock()  # (an extended launch's CUlaunchConfig is shared: its stream set, then launched)
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT: the calling thread has no current context yet


def _launch(kernel: int, shape: _Shape, stream: int, pointers) -> int:
    """cuLaunchKernel (cuLaunchKernelEx for a cluster's or a dependent's launch) of `kernel` (a CUkernel's handle)
    on stream handle `stream`, `pointers` the addresses of its parameters' values (a ctypes array), which the
    driver copies at the launch; the driver's CUresult."""
    library = _driver_library()
    if shape.extended is None:
        return library.cuLaunchKernel(kernel, *shape.grid, *shape.block, shape.shared_bytes, stream, pointers, None)
    with _EXTENDED:
        shape.extended.hStream = stream
        return library.cuLaunchKernelEx(shape.extended.getPtr(), kernel, pointers, None)


def _launched(runtime: "Runtime", kernel: int, shape: _Shape, stream: int, pointers) -> None:
    """`_launch`, after making the device's context current on a thread that had none; CudaError if it fails."""
    result = _launch(kernel, shape, stream, pointers)
    if result == INVALID_CONTEXT:
        runtime.on_this_thread()
        result = _launch(kernel, shape, stream, pointers)
    if result:
        _check(_driver().CUresult(result))


def _addresses(parameters: list):
    """The parameter block a launch takes: the addresses of `parameters` (ctypes values) in a ctypes array."""
    return (ctypes.c_void_p * len(parameters))(*map(ctypes.addressof, parameters))


class Slot:
    """A parameter of a prepared `Launch` given at each call: `kind` its ctypes type (ctypes.c_uint64 for a
    device address or an index, ctypes.c_float, ...), or `TensorMapValue` for a tensor map (passed by value: the
    parameter block points at the caller's 128 bytes, which must live until the call returns)."""

    def __init__(self, kind):
        self.kind = kind


POINTER = Slot(ctypes.c_uint64)  # a device address given at each call
TENSOR_MAP = Slot(TensorMapValue)  # a tensor map given at each call


class Launch:
    """One kernel's launch prepared once (`LoadedModule.prepare`): its shape, its fixed parameters packed, and
    its `Slot`s, the values given at each call (`launch(stream, *values)`). A call writes those into the
    parameter block and calls the driver: no argument is converted or checked again (a plan that reuses it
    checked them once). Thread-safe: the block is written and launched under a lock."""

    def __init__(self, module: "LoadedModule", kernel_name: str, arguments: Sequence, shape: _Shape):
        self.runtime, self.name, self.shape = module.runtime, kernel_name, shape
        self.kernel = int(module.kernel(kernel_name).handle)
        self._values = [argument.kind() if isinstance(argument, Slot) else _parameter(argument, None)
                        for argument in arguments]
        self._pointers = _addresses(self._values)
        self._slots = [(index, argument.kind is TensorMapValue) for index, argument in enumerate(arguments)
                       if isinstance(argument, Slot)]
        self._lock = threading.Lock()

    def __call__(self, stream: int, *values) -> None:
        """Launch on stream handle `stream` with `values` for the slots, in order: ints and floats, or the
        tensor maps (`TensorMapValue`)."""
        if len(values) != len(self._slots):
            raise CudaError(f"launch of '{self.name}': {len(self._slots)} values for its slots, got {len(values)}")
        with self._lock:
            pointers, parameters = self._pointers, self._values
            for (index, by_address), value in zip(self._slots, values):
                if by_address:
                    pointers[index] = ctypes.addressof(value)
                else:
                    parameters[index].value = value
            _launched(self.runtime, self.kernel, self.shape, stream, pointers)


_SCALARS = {np.dtype(np.bool_): ctypes.c_bool, np.dtype(np.int8): ctypes.c_int8, np.dtype(np.int16): ctypes.c_int16,
            np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint8): ctypes.c_uint8,
            np.dtype(np.uint16): ctypes.c_uint16, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.float32): ctypes.c_float,
            np.dtype(np.float64): ctypes.c_double}


def _parameter(argument, wait_on):
    """A launch parameter as a ctypes value: a tensor map's bytes; a device array's pointer; a Python int as a
    64-bit value; a numpy scalar at its own width (f16 by its bits); a Python float as a double; a ctypes value
    as it is.

    On the producer's stream (`wait_on` None) the pointer is read from a torch tensor's data_ptr() or the CUDA
    Array Interface (the cheap path: no synchronization is needed); otherwise cuda.core's StridedMemoryView reads
    it (DLPack or the interface) and makes `wait_on` wait for the producer's work first."""
    if isinstance(argument, (TensorMapValue, ctypes._SimpleCData)):
        return argument
    if isinstance(argument, int) and not isinstance(argument, bool):
        return ctypes.c_uint64(argument % 2**64)
    if isinstance(argument, np.generic):
        if argument.dtype == np.float16:
            return ctypes.c_uint16(int(argument.view(np.uint16)))
        if argument.dtype not in _SCALARS:
            raise CudaError(f"cannot pass a {argument.dtype} scalar to a kernel")
        return _SCALARS[argument.dtype](argument.item())
    if isinstance(argument, float):
        return ctypes.c_double(argument)
    if wait_on is None:
        if getattr(argument, "is_cuda", False) and hasattr(argument, "data_ptr"):  # torch: no dict to build
            return ctypes.c_uint64(argument.data_ptr())
        interface = getattr(argument, "__cuda_array_interface__", None)
        if interface is not None:
            return ctypes.c_uint64(interface["data"][0])
    from cuda.core import Buffer

    if isinstance(argument, Buffer):  # (`Runtime.to_device`'s)
        return ctypes.c_uint64(int(argument.handle))
    if hasattr(argument, "__cuda_array_interface__") or hasattr(argument, "__dlpack__"):
        from cuda.core.utils import StridedMemoryView

        read = getattr(StridedMemoryView, "from_any_interface", StridedMemoryView)
        try:
            view = read(argument, stream_ptr=int(wait_on.handle) if wait_on is not None else -1)
            device = view.is_device_accessible
        except Exception as error:
            raise CudaError(f"cannot pass a {type(argument).__name__} to a kernel: {error}") from None
        if not device:
            raise CudaError(f"{type(argument).__name__} lives in host memory: pass a device array or a numpy array")
        return ctypes.c_uint64(view.ptr)
    raise CudaError(f"cannot pass a {type(argument).__name__} to a kernel")


class LoadedModule:
    def __init__(self, runtime: Runtime, code, name: str, ptx: bytes | None = None):
        self.runtime, self.code, self.name, self.ptx = runtime, code, name, ptx
        self._kernels: dict = {}
        self._configs: dict = {}  # launch configurations by (kernel, grid, block, shared bytes)

    def kernel(self, name: str):
        if name not in self._kernels:
            try:
                self._kernels[name] = self.code.get_kernel(name)
            except Exception as error:
                log = self.runtime._ptx_log(self.ptx) if self.ptx is not None else ""
                raise CudaError(f"module '{self.name}': cannot get kernel '{name}': {error}{log}") from None
        return self._kernels[name]

    def launch(
        self,
        kernel_name: str,
        arguments: Sequence,
        *,
        grid=1,
        block=32,
        shared_bytes: int = 0,
        stream=None,
        cluster=None,
    ) -> list:
        """Launch `kernel_name` with `grid` x `block` threads and `shared_bytes` of dynamic shared memory;
        `cluster`: CTAs a thread block cluster (an int or (x, y, z), dividing `grid`), as a kernel built with
        `Kernel(..., cluster=...)` requires.

        Arguments, in the kernel's parameter order:
        - device arrays (DLPack or CUDA Array Interface producers: torch, CuPy, JAX): their pointer, no copy;
        - Python ints: a 64-bit value (a raw device pointer, or an `index` parameter);
        - numpy scalars (np.int32(4), np.float32(1)): by value, at their own width;
        - tensor maps (`Runtime.tensor_map`'s `TensorMapValue`): their 128 bytes by value;
        - numpy arrays: copied to the device, passed as pointers, copied back after the kernel.
        With device arrays only, the launch is asynchronous, on `stream` (an object with `__cuda_stream__`,
        such as torch.cuda.current_stream(), or a stream handle) or else on the runtime's stream, which first
        waits for the producers' work on the arrays. With numpy arrays it waits for the kernel and returns the
        arrays after it, in argument order (else an empty list)."""
        runtime = self.runtime
        runtime.on_this_thread()
        kernel = int((self._kernels.get(kernel_name) or self.kernel(kernel_name)).handle)
        shape = self._config(kernel_name, grid, block, shared_bytes, cluster)
        if stream is None or not isinstance(stream, int):
            on = runtime.stream if stream is None else runtime.stream_of(stream)
            handle = int(on.handle)
        else:
            on, handle = None, stream
        wait_on = runtime.stream if stream is None else None
        if not any(isinstance(argument, np.ndarray) for argument in arguments):
            parameters = [_parameter(argument, wait_on) for argument in arguments]
            try:  # device arrays and values only: nothing to copy, nothing to wait for
                _launched(runtime, kernel, shape, handle, _addresses(parameters))
            except Exception as error:
                raise CudaError(f"launch of '{kernel_name}' failed: {error}") from None
            return []
        on = on or runtime.stream_of(stream)
        buffers, parameters = [], []
        try:
            for argument in arguments:
                if isinstance(argument, np.ndarray):
                    buffer = runtime.to_device(argument)
                    buffers.append((buffer, argument))
                    argument = buffer
                parameters.append(_parameter(argument, wait_on))
            try:
                _launched(runtime, kernel, shape, handle, _addresses(parameters))
                on.sync()
            except Exception as error:
                raise CudaError(f"launch of '{kernel_name}' failed: {error}") from None
            return [runtime.to_host(buffer, like) for buffer, like in buffers]
        finally:
            for buffer, _ in buffers:
                buffer.close()

    def prepare(self, kernel_name: str, arguments: Sequence, *, grid=1, block=32, shared_bytes: int = 0,
                cluster=None, dependent: bool = False) -> Launch:
        """`kernel_name`'s launch prepared once (`Launch`): `arguments` as `launch` takes them (no numpy arrays),
        with a `Slot` (`POINTER`, `TENSOR_MAP`, `Slot(ctypes.c_float)`, ...) for each value given at every call.
        `dependent`: launched as the dependent of the kernel before it on its stream (`_launch_shape`; the kernel
        waits for that one before it reads what it wrote, `Kernel.wait_for_prerequisites`)."""
        self.runtime.on_this_thread()
        return Launch(self, kernel_name, arguments, self._config(kernel_name, grid, block, shared_bytes, cluster,
                                                                 dependent))

    def _config(self, kernel_name: str, grid, block, shared_bytes: int, cluster=None,
                dependent: bool = False) -> _Shape:
        """The launch shape (`_launch_shape`), made (and the kernel's dynamic shared memory allowed) once."""
        dependent = dependent and DEPENDENT_LAUNCHES
        try:
            key = (kernel_name, grid, block, shared_bytes, cluster, dependent)
            config = self._configs.get(key)
        except TypeError:  # a list
            key = (kernel_name, str(grid), str(block), shared_bytes, str(cluster), dependent)
            config = self._configs.get(key)
        if config is None:
            self.runtime.allow_dynamic_shared(self.kernel(kernel_name), shared_bytes)
            config = self._configs[key] = _launch_shape(grid, block, shared_bytes, cluster, dependent)
        return config

    def time(self, kernel_name: str, arguments: Sequence, *, grid=1, block=32, shared_bytes: int = 0,
             warmup: int = 3, repeats: int = 20, cluster=None) -> Timing:
        """Median-ready launch times in ms, measured with CUDA events around each launch after warm-up.
        Arguments as for `launch`; numpy arrays are copied to the device once and reused."""
        from cuda.core import EventOptions

        runtime = self.runtime
        kernel = int(self.kernel(kernel_name).handle)
        buffers = [runtime.to_device(a) if isinstance(a, np.ndarray) else None for a in arguments]
        parameters = [_parameter(a if b is None else b, runtime.stream) for a, b in zip(arguments, buffers)]
        pointers = _addresses(parameters)
        shape, handle = self._config(kernel_name, grid, block, shared_bytes, cluster), int(runtime.stream.handle)
        timing = EventOptions(timing_enabled=True)
        try:
            for _ in range(warmup):
                _launched(runtime, kernel, shape, handle, pointers)
            times = []
            for _ in range(repeats):
                start = runtime.stream.record(options=timing)
                _launched(runtime, kernel, shape, handle, pointers)
                end = runtime.stream.record(options=timing)
                end.sync()
                times.append(float(end - start))
            return Timing(times)
        except Exception as error:
            raise CudaError(f"timing '{kernel_name}' failed: {error}") from None
        finally:
            for buffer in buffers:
                if buffer is not None:
                    buffer.close()
