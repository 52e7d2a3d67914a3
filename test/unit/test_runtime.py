"""The runtime's host-side choices that need no GPU: `torch_stream` reads torch's current stream handle through
torch's raw accessor where torch has it, else through torch.cuda.current_stream (a stand-in torch module); a
tensor map no TMA coordinate could cross is refused before the driver is asked."""
import sys
import types

import pytest

from mlir_tile.runtime import Runtime, torch_stream
from mlir_tile.isa.tma import Box


class _Tensor:
    def get_device(self):
        return 3


def _torch(raw):
    streams = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=2000 + device))
    return types.SimpleNamespace(_C=types.SimpleNamespace(**({} if raw is None else {"_cuda_getCurrentRawStream": raw})),
                                 cuda=streams)


def test_torch_stream_takes_the_raw_handle_of_the_tensors_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _torch(lambda device: 1000 + device))
    assert torch_stream(_Tensor()) == 1003


def test_torch_stream_without_the_raw_accessor_asks_torch_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _torch(None))
    assert torch_stream(_Tensor()) == 2003


@pytest.mark.parametrize("shape", [(2**31, 64), (4, 2**31, 64), (16, 2**31)])
def test_a_tensor_map_past_32_bit_coordinates_is_refused(shape):
    """TMA's coordinates are signed 32-bit: an extent of 2^31 or more would leave elements no copy reaches (and
    the kernels count rows and tiles in 32 bits beneath that bound)."""
    stride = None if len(shape) == 2 else 2**40
    with pytest.raises(ValueError, match=r"extents below 2\^31 .* signed 32-bit"):
        Runtime.tensor_map(None, 0, shape, 128, Box(64, 64, 16, 128), stride)


@pytest.mark.parametrize("columns, element_bits, past", [(121, 16, "121 to 127"), (3, 32, "3 to 3"), (17, 8, "17 to 31"),
                                                         (1, 64, "1 to 1")])
def test_a_store_map_whose_rows_are_not_whole_16_byte_chunks_is_refused(columns, element_bits, past):
    """[tma-store-chunks]: a TMA store writes a row's last 16-byte chunk whole, so it would write the elements
    past the matrix that share it (a column slice's neighbours, a padded pitch); the map is refused before any
    driver call, and a load map of the same matrix is not."""
    box = Box(8, 128 // element_bits, element_bits, 0)
    with pytest.raises(ValueError, match=rf"\[tma-store-chunks\] .* rows of {columns} elements .* the elements {past} "
                                         r"past the matrix written too"):
        Runtime.tensor_map(None, 0, (64, columns), 256, box, store=True)
    with pytest.raises(ValueError, match=r"extents below 2\^31"):  # (the load map goes on to the next check)
        Runtime.tensor_map(None, 0, (2**31, columns), 256, box)


def test_a_store_map_of_whole_chunks_passes_the_store_rule():
    from mlir_tile.isa.tma import check_store_rows

    for columns, element_bits in ((120, 16), (4, 32), (16, 8), (2, 64), (8, 16)):
        check_store_rows(columns, element_bits)


def test_launch_parameters_are_the_bytes_the_kernels_parameters_hold():
    """`_parameter`: a tensor map's 128 bytes as they are (by value); a Python int as 64 bits (two's complement);
    numpy scalars at their width (f16 by its bits); a Python float as a double; a torch-like CUDA tensor and a
    cuda.core Buffer as their pointers; anything else a CudaError naming its type."""
    import ctypes

    import numpy as np

    from mlir_tile.runtime import CudaError, TensorMapValue, _parameter

    encoded = TensorMapValue.from_buffer_copy(bytes(range(128)))
    assert _parameter(encoded, None) is encoded and ctypes.sizeof(encoded) == 128
    as_bytes = lambda value: bytes(memoryview(value))
    assert as_bytes(_parameter(-1, None)) == b"\xff" * 8
    assert as_bytes(_parameter(np.int32(-2), None)) == np.int32(-2).tobytes()
    assert as_bytes(_parameter(np.float32(1.5), None)) == np.float32(1.5).tobytes()
    assert as_bytes(_parameter(np.float16(1.5), None)) == np.float16(1.5).tobytes()
    assert as_bytes(_parameter(0.25, None)) == np.float64(0.25).tobytes()
    tensor = types.SimpleNamespace(is_cuda=True, data_ptr=lambda: 0x7F0000001000)
    assert _parameter(tensor, None).value == 0x7F0000001000
    from cuda.core import Buffer  # (`Runtime.to_device`'s, a numpy array's copy: its pointer)

    assert _parameter(Buffer.from_handle(0x7F0000002000, 64), object()).value == 0x7F0000002000
    with pytest.raises(CudaError, match="cannot pass a str to a kernel"):
        _parameter("x", None)


def test_a_prepared_launch_fills_its_slots_and_keeps_its_fixed_parameters(monkeypatch):
    """`Launch`: the fixed parameters packed once (as `_parameter` packs them), each call's values written into
    their slots (an address, an fp32, a tensor map by its bytes), the driver handed the block's addresses; a
    call with the wrong number of values is a CudaError; a thread without the device's context gets it made
    current and the launch tried again (CUDA_ERROR_INVALID_CONTEXT, then success)."""
    import ctypes

    import numpy as np

    import mlir_tile.runtime as runtime_module
    from mlir_tile.runtime import INVALID_CONTEXT, POINTER, TENSOR_MAP, CudaError, Launch, Slot, TensorMapValue, _launch_shape

    launched, results = [], []

    def fake_launch(kernel, shape, stream, pointers):
        sizes = [128, 8, 8, 4, 8]  # (the kernel's parameters' bytes, in order)
        launched.append((kernel, stream, [ctypes.string_at(pointers[i], size) for i, size in enumerate(sizes)]))
        return results.pop(0) if results else 0

    made_current = []
    runtime = types.SimpleNamespace(on_this_thread=lambda: made_current.append(True))
    module = types.SimpleNamespace(runtime=runtime, kernel=lambda name: types.SimpleNamespace(handle=0xBEEF))
    monkeypatch.setattr(runtime_module, "_launch", fake_launch)
    launch = Launch(module, "k", [TENSOR_MAP, POINTER, 7, Slot(ctypes.c_float), np.int64(-3)], _launch_shape(4, 128, 0))
    first, second = (TensorMapValue.from_buffer_copy(bytes([i] * 128)) for i in (1, 2))
    launch(11, first, 0x7F0000001000, 1.5)
    launch(12, second, 0x7F0000002000, -2.0)
    assert [(kernel, stream) for kernel, stream, _ in launched] == [(0xBEEF, 11), (0xBEEF, 12)]
    expected = [[bytes([1] * 128), (0x7F0000001000).to_bytes(8, "little"), (7).to_bytes(8, "little"),
                 np.float32(1.5).tobytes(), np.int64(-3).tobytes()],
                [bytes([2] * 128), (0x7F0000002000).to_bytes(8, "little"), (7).to_bytes(8, "little"),
                 np.float32(-2.0).tobytes(), np.int64(-3).tobytes()]]
    assert [block for _, _, block in launched] == expected
    with pytest.raises(CudaError, match="3 values for its slots, got 2"):
        launch(13, first, 0x7F0000001000)
    results[:] = [INVALID_CONTEXT, 0]
    launch(14, first, 0x7F0000001000, 1.5)
    assert made_current == [True] and [stream for _, stream, _ in launched[-2:]] == [14, 14]


def test_a_cluster_launch_counts_its_grid_in_blocks_and_refuses_a_partial_cluster():
    from mlir_tile.runtime import _launch_shape

    shape = _launch_shape((8, 2), 384, 1024, cluster=2)
    assert (shape.grid, shape.block, shape.shared_bytes) == ((8, 2, 1), (384, 1, 1), 1024)
    assert (shape.extended.gridDimX, shape.extended.attrs[0].value.clusterDim.x) == (8, 2)
    assert _launch_shape(5, 128, 0).extended is None
    with pytest.raises(ValueError, match=r"a grid of \(5, 1, 1\) blocks is no whole number of clusters of \(2, 1, 1\)"):
        _launch_shape(5, 128, 0, cluster=2)


def test_a_dependent_launch_carries_programmatic_stream_serialization_beside_a_cluster(monkeypatch):
    """`prepare(..., dependent=True)`'s shape: cuLaunchKernelEx's config with the programmatic stream serialization
    attribute (after the cluster's where there is one), none where `DEPENDENT_LAUNCHES` is off."""
    import mlir_tile.runtime as runtime
    from mlir_tile.runtime import _driver, _launch_shape

    ids = _driver().CUlaunchAttributeID
    shape = _launch_shape(6, 256, 0, dependent=True)
    assert shape.extended.numAttrs == 1 and shape.extended.gridDimX == 6
    assert shape.extended.attrs[0].id == ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert shape.extended.attrs[0].value.programmaticStreamSerializationAllowed == 1
    both = _launch_shape(8, 384, 0, cluster=2, dependent=True).extended
    assert [a.id for a in both.attrs] == [ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                          ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    monkeypatch.setattr(runtime, "DEPENDENT_LAUNCHES", False)
    assert _launch_shape(6, 256, 0, dependent=True).extended is None
