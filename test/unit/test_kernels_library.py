"""mlir_tile/kernels/library.py without a GPU: a kernel is taken from the shipped folder first, else from the
cache of this library's sources, else built with the compiler into that cache; where the compiler is missing,
the error names the extra to install. The chip per compute capability."""
from pathlib import Path

import pytest

from mlir_tile.kernels import library
from mlir_tile.kernels.library import KernelLibrary, KernelNotAvailable, chip_of


class FakeRuntime:
    def __init__(self):
        self.loaded = []

    def load_ptx(self, ptx, name):
        self.loaded.append((name, ptx))
        return name


def built():
    raise AssertionError("built although shipped or cached")


def test_the_shipped_kernel_comes_first_and_is_loaded_once(tmp_path):
    (tmp_path / "shipped" / "sm_90").mkdir(parents=True)
    (tmp_path / "shipped" / "sm_90" / "gemm_x.ptx").write_text("// shipped")
    runtime = FakeRuntime()
    kernels = KernelLibrary(runtime, "sm_90", shipped=tmp_path / "shipped", cache=tmp_path / "cache")
    assert kernels.module("gemm_x", built) == kernels.module("gemm_x", built) == "gemm_x"
    assert runtime.loaded == [("gemm_x", "// shipped")]


def test_a_kernel_not_shipped_is_built_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr("mlir_tile.compiler.compile.compile_to_ptx", lambda module: "// built " + module)
    kernels = KernelLibrary(FakeRuntime(), "sm_80", shipped=tmp_path / "none", cache=tmp_path / "cache")
    assert kernels.ptx("k", lambda: "module") == "// built module"
    assert (tmp_path / "cache" / "sm_80" / "k.ptx").read_text() == "// built module"
    assert kernels.ptx("k", built) == "// built module"  # from the cache now


def test_without_the_compiler_a_missing_kernel_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(library, "compiler_installed", lambda: False)
    kernels = KernelLibrary(FakeRuntime(), "sm_90", shipped=tmp_path, cache=tmp_path / "cache")
    with pytest.raises(KernelNotAvailable, match=r"gemm_y for sm_90 is not among .* compiler extra .*pip install 'WHEEL\[compiler\]'"):
        kernels.ptx("gemm_y", built)


def test_the_cache_is_per_source_digest_and_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", str(tmp_path))
    assert library.cache_folder() == tmp_path / "kernels" / library.source_digest()
    monkeypatch.setenv("MLIR_TILE_NO_CACHE", "1")
    assert library.cache_folder() is None


@pytest.mark.parametrize("capability, chip", [((9, 0), "sm_90"), ((8, 0), "sm_80"), ((8, 9), "sm_80"),
                                              ((10, 0), "sm_80"), ((12, 0), "sm_80")])
def test_the_chip_whose_ptx_a_device_runs(capability, chip):
    assert chip_of(capability) == chip


def test_a_device_before_ampere_is_refused():
    with pytest.raises(KernelNotAvailable, match="sm_80 or newer GPU; this one is sm_75"):
        chip_of((7, 5))


def test_the_source_digest_is_the_same_without_the_editable_install():
    """A checkout on PYTHONPATH alone (as a GPU host runs it, no editable install mapping `mlir_tile.dialect`
    and `.passes` to the folders beside python/) digests the same sources, so it finds the kernels cached
    here under the same folder."""
    import subprocess
    import sys

    from mlir_tile.kernels.library import source_digest

    bare = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, 'python'); "
                           "from mlir_tile.kernels.library import source_digest; print(source_digest())"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.strip() == source_digest()


def test_plans_keep_the_most_recent_and_make_each_once():
    """`common.Plans`: `of` makes a key's plan once; past `kept` the oldest is forgotten; threads adding at once
    leave exactly `kept`."""
    import threading

    from mlir_tile.kernels.common import Plans

    plans, made = Plans(kept=3), []
    for key in ("a", "b", "a", "c", "d"):
        plans.of(key, lambda key=key: made.append(key) or key.upper())
    assert made == ["a", "b", "c", "d"] and list(plans) == ["b", "c", "d"] and plans.of("d", None) == "D"
    many = Plans(kept=50)
    threads = [threading.Thread(target=lambda t=t: [many.keep((t, i), i) for i in range(500)]) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(many) == 50
