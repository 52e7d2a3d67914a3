"""Load PTX and run kernels on numpy arrays with cuda-python. Imports no MLIR: a GPU host needs only
this file's dependencies (cuda-python, numpy).

    with Runtime() as rt:
        module = rt.load_ptx(ptx)
        out_a, out_b = module.launch("matrix_kernel", [a, b], grid=1, block=32)

`cuda.core` loads the code, launches and times; `cuda.bindings.driver` copies between numpy arrays and
device buffers (cuda.core buffers copy only between buffers). Every CUDA failure becomes a `CudaError`
carrying the driver's message.
"""
from __future__ import annotations

import io
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
            self.stream = self.device.create_stream()
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

    def load_ptx(self, ptx: str | bytes, name: str = "module") -> "LoadedModule":
        """PTX, compiled for this device by the driver when a kernel is first looked up."""
        from cuda.core import ObjectCode

        text = ptx.encode() if isinstance(ptx, str) else ptx
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
        """Let `kernel` use `nbytes` of dynamic shared memory: above 48 KiB CUDA wants the kernel's opt-in
        (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); more than the device has is a CudaError that says so."""
        if nbytes <= self.DEFAULT_DYNAMIC_SHARED:
            return
        driver = _driver()
        limit = _check(driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device.device_id))
        static = _check(driver.cuKernelGetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.handle, self.device.device_id))
        if nbytes + static > limit:
            raise CudaError(f"{nbytes} bytes of dynamic shared memory (+{static} static) is more than the {limit} "
                            f"a block can have on {self.device.name}")
        _check(driver.cuKernelSetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes, kernel.handle,
            self.device.device_id))

    # ----- memory -----
    def to_device(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        buffer = self.device.allocate(max(array.nbytes, 1), stream=self.stream)
        if array.nbytes:
            _check(_driver().cuMemcpyHtoDAsync(int(buffer.handle), array.ctypes.data, array.nbytes, int(self.stream.handle)))
        return buffer

    def to_host(self, buffer, like: np.ndarray) -> np.ndarray:
        result = np.empty_like(np.ascontiguousarray(like))
        if result.nbytes:
            _check(_driver().cuMemcpyDtoHAsync(result.ctypes.data, int(buffer.handle), result.nbytes, int(self.stream.handle)))
        self.stream.sync()
        return result


class LoadedModule:
    def __init__(self, runtime: Runtime, code, name: str, ptx: bytes | None = None):
        self.runtime, self.code, self.name, self.ptx = runtime, code, name, ptx
        self._kernels: dict = {}

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
    ) -> list:
        """Launch with numpy arrays (copied in, passed as pointers, copied back) and scalars (numpy
        scalar types, passed by value). Returns the arrays after the kernel, in argument order."""
        from cuda.core import LaunchConfig, launch

        runtime = self.runtime
        kernel = self.kernel(kernel_name)
        buffers, launch_arguments = [], []
        try:
            for argument in arguments:
                if isinstance(argument, np.ndarray):
                    buffer = runtime.to_device(argument)
                    buffers.append((buffer, argument))
                    launch_arguments.append(buffer)
                else:
                    launch_arguments.append(argument)
            runtime.allow_dynamic_shared(kernel, shared_bytes)
            config = LaunchConfig(grid=grid, block=block, shmem_size=shared_bytes)
            try:
                launch(runtime.stream, config, kernel, *launch_arguments)
                runtime.stream.sync()
            except Exception as error:
                raise CudaError(f"launch of '{kernel_name}' failed: {error}") from None
            return [runtime.to_host(buffer, like) for buffer, like in buffers]
        finally:
            for buffer, _ in buffers:
                buffer.close()

    def time(self, kernel_name: str, arguments: Sequence, *, grid=1, block=32, shared_bytes: int = 0,
             warmup: int = 3, repeats: int = 20) -> Timing:
        """Median-ready launch times in ms, measured with CUDA events around each launch after warm-up.
        Array arguments are copied to the device once and reused."""
        from cuda.core import EventOptions, LaunchConfig, launch

        runtime = self.runtime
        kernel = self.kernel(kernel_name)
        buffers = [runtime.to_device(a) if isinstance(a, np.ndarray) else None for a in arguments]
        launch_arguments = [b if b is not None else a for a, b in zip(arguments, buffers)]
        runtime.allow_dynamic_shared(kernel, shared_bytes)
        config = LaunchConfig(grid=grid, block=block, shmem_size=shared_bytes)
        timing = EventOptions(timing_enabled=True)
        try:
            for _ in range(warmup):
                launch(runtime.stream, config, kernel, *launch_arguments)
            times = []
            for _ in range(repeats):
                start = runtime.stream.record(options=timing)
                launch(runtime.stream, config, kernel, *launch_arguments)
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
