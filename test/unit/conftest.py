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
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, with the reason, where there is none)")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("MLIR_TILE_CACHE_DIR"), ignore_errors=True)


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
