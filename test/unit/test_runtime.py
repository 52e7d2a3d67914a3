"""The runtime's host-side choices that need no GPU: `torch_stream` reads torch's current stream handle through
torch's raw accessor where torch has it, else through torch.cuda.current_stream (a stand-in torch module)."""
import sys
import types

from mlir_tile.runtime import torch_stream


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
