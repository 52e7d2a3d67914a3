"""What the torch operators share (`ops`, `variant_ops`, `kvcache`): each device's launchers (`kernels_on`), the
registration of an operator on torch's dispatcher (`register_operator`), the operators made per epilogue or
variant (`custom_operators`), and whether a call may skip the dispatcher (`plain_call`).

No `from __future__ import annotations` here: torch reads the operators' schemas from their annotations.
"""
import functools
import threading

import torch

from mlir_tile.isa.targets import runs_warpgroup_kernels
from mlir_tile.kernels.flash import backward as flash_backward
from mlir_tile.kernels.flash import launch as flash_launch
from mlir_tile.kernels.gemm import hopper_ops, launch as gemm_launch, quantize
from mlir_tile.kernels.library import KernelLibrary
from mlir_tile.runtime import Runtime

lock = threading.Lock()
_per_device: dict = {}


class _Kernels:
    """One device's library and the two kernels' launchers on it."""

    def __init__(self, device_index: int):
        self.library = KernelLibrary(Runtime(device_index))
        self.matmul = gemm_launch.Matmul(self.library)
        self.unshipped = set()  # (dtype, shapes, layout, chain) whose ready-made chain this install lacks
        self._attention, self._attention_backward = None, None

    @functools.cached_property
    def scaled(self):
        return hopper_ops.ScaledMatmul(self.library)

    @functools.cached_property
    def quantize(self):
        """fp8 quantization by blocks (`gemm.quantize.Quantizer`)."""
        return quantize.Quantizer(self.library)

    @functools.cached_property
    def grouped(self):
        return hopper_ops.GroupedMatmul(self.library)

    @functools.cached_property
    def swiglu(self):
        return hopper_ops.SwigluMatmul(self.library)

    @property
    def attention(self):
        """The attention path picker of this device's library (`flash.launch.AttentionPaths`)."""
        if self._attention is None:
            self._attention = flash_launch.AttentionPaths(self.library)
        return self._attention

    @property
    def attention_backward(self):
        """Attention's backward on this device (`flash.backward.HopperAttentionBackward`): Hopper's path only."""
        if self._attention_backward is None:
            if not runs_warpgroup_kernels(self.library.chip):
                raise ValueError(f"attention: the backward runs on Hopper's path (sm_90), which this GPU "
                                 f"({self.library.chip}) has not")
            self._attention_backward = flash_backward.HopperAttentionBackward(self.library)
        return self._attention_backward


def kernels_on(device: torch.device) -> _Kernels:
    """The launchers of `device` (a CUDA device), made on first use."""
    if device.type != "cuda":
        raise ValueError(f"mlir_tile.kernels run on CUDA tensors, got tensors on {device}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    with lock:
        if index not in _per_device:
            _per_device[index] = _Kernels(index)
        return _per_device[index]


LIBRARY = torch.library.Library("mlir_tile", "FRAGMENT")


def no_backward(what: str):
    """A backward that says in one line that `what` has none yet."""
    def backward(ctx, *grads):
        raise NotImplementedError(what)
    return backward


def register_operator(name: str, function, *, fake, backward=None, setup_context=None, mutates_args=()):
    """`torch.ops.mlir_tile.<name>`: `function` its implementation, registered straight on torch's dispatcher
    for CUDA tensors (and CPU ones, which it refuses with a ValueError): torch.library.custom_op wraps it in
    Python layers that cost 6-8 us a call more on the H100's host (benchmarks/host_time.py); `fake` its
    outputs' shapes for torch.compile; `backward` its autograd formula, `setup_context` saving what that needs."""
    LIBRARY.define(name + torch.library.infer_schema(function, mutates_args=mutates_args))
    for device in ("CUDA", "CPU"):
        LIBRARY.impl(name, function, device)
    torch.library.register_fake(f"mlir_tile::{name}", fake, lib=LIBRARY)
    if backward is not None:
        torch.library.register_autograd(f"mlir_tile::{name}", backward, lib=LIBRARY,
                                        setup_context=setup_context or (lambda ctx, inputs, output: None))
    return getattr(torch.ops.mlir_tile, name).default


custom_operators: dict = {}  # (the operators made per epilogue or variant, by name: `register_operator` once)


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # (a weight is a Parameter)


def plain_call(*tensors) -> bool:
    """Whether a call may run the operator's implementation straight: eager (not traced by torch.compile, no
    torch function or dispatch mode such as FakeTensor's), plain CUDA tensors, no gradient asked for. The
    dispatcher's two Python hops (autograd, then the CUDA kernel) cost 13-15 us a call on the H100's host
    (benchmarks/host_time.py); everything else goes through `torch.ops.mlir_tile`, as the dispatcher wants."""
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled() or \
            torch._C._len_torch_dispatch_stack():
        return False
    grad = torch.is_grad_enabled()
    return all(x is None or (type(x) in _PLAIN and x.is_cuda and not (grad and x.requires_grad))
               for x in tensors)
