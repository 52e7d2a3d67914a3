"""What the torch-side benchmarks share: loading an example by path (the GPU host runs them from the
repository, without the compiler) and timing a call with CUDA events."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
    """examples/NAME.py as a module (registered, so that its dataclasses resolve their module)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def median_seconds(call, warmup: int, repeats: int) -> float:
    """The median of `repeats` CUDA-event-timed calls after `warmup` untimed ones, on torch's stream."""
    import torch

    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]
