"""The runtime's host-side choices that need no GPU: `torch_stream` reads torch's current stream handle through
torch's raw accessor where torch has it, else through torch.cuda.current_stream (a stand-in torch module); a
tensor map no TMA coordinate could cross is refused before the driver is asked."""
import sys
import types

import pytest

from mlir_tile.runtime import Runtime, torch_stream
from mlir_tile.tma import Box


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
