"""Shared pytest setup: the `gpu` marker skips cleanly, with the reason shown, where no GPU is usable;
cubins are cached in a temporary folder, not the user's cache."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    os.environ["MLIR_TILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="mlir-tile-cubin-cache-")
    if "PYTEST_XDIST_WORKER" not in os.environ:  # (the run's one process, or xdist's controller: its workers inherit it)
        os.environ[SHARED_PTX] = tempfile.mkdtemp(prefix="mlir-tile-test-ptx-")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, with the reason, where there is none)")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("MLIR_TILE_CACHE_DIR"), ignore_errors=True)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(os.environ.pop(SHARED_PTX, ""), ignore_errors=True)


SHARED_PTX = "MLIR_TILE_TEST_SHARED_PTX"


def shared_ptx(name: str, build) -> str:
    """The PTX of `build()` (a kernel's module), built once in this test run across its workers (xdist's two
    processes built the same kernels for different tests): kept under `name` in the run's folder, written whole
    or not at all."""
    return _shared(name, build)[1]


def shared_mlir(name: str, build) -> str:
    """The module `build()` makes, as text before its lowering: kept beside `shared_ptx`'s PTX of it."""
    return _shared(name, build)[0]


def _shared(name: str, build) -> tuple[str, str]:
    """(the module's text, its PTX), built once in the run (the text written first: the PTX's file says both are
    there)."""
    from mlir_tile.compiler.compile import compile_to_ptx

    folder = os.environ.get(SHARED_PTX)
    paths = None if folder is None else [Path(folder) / f"{name}.{kind}" for kind in ("mlir", "ptx")]
    if paths is not None and paths[1].is_file():
        return paths[0].read_text(), paths[1].read_text()
    module = build()
    built = [str(module)]
    built.append(compile_to_ptx(module))
    for path, text in zip(paths or [], built):
        partial = path.with_suffix(f".{os.getpid()}.part")
        partial.write_text(text)
        partial.replace(path)
    return built[0], built[1]


def pytest_collection_modifyitems(config, items):
    from mlir_tile.runtime import gpu_available

    available, why = gpu_available()
    if available:
        return
    skip = pytest.mark.skip(reason=f"no CUDA GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def filecheck(tmp_path):
    """filecheck(text, checks): FileCheck (the `filecheck` of the compiler extra) of `text` against the CHECK
    lines `checks`; an AssertionError with FileCheck's report when they do not match."""
    import subprocess
    import sys

    def check(text: str, checks: str) -> None:
        (tmp_path / "checks").write_text(checks)
        tool = Path(sys.executable).with_name("filecheck")
        ran = subprocess.run([str(tool if tool.exists() else "filecheck"), str(tmp_path / "checks")], input=text,
                             capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr[-4000:]
    return check
