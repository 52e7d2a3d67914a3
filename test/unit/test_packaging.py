"""The package as a wheel carries every module of the source tree, and the pure modules import without MLIR."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PURE = ["algebra.layout", "contract", "isa.targets", "isa.atoms", "isa.tma", "isa.wgmma", "isa.fp8", "isa.halves",
        "models.address_plan", "models.coverage", "models.banks", "models.widen", "models.reference", "tiling.tiled",
        "tiling.fragments", "tiling.synthesize", "tiling.byte_transpose", "compiler.pipeline_text", "tools.cli",
        "runtime", "runtime.ptx", "testing.difftest_runner", "tools.commands", "kernels", "kernels.gemm.launch", "kernels.gemm.__main__", "kernels.common",
        "kernels.flash.launch", "kernels.flash.__main__", "kernels.epilogues", "kernels.library", "kernels.command_line", "kernels.ship"]


def test_the_wheel_holds_every_module_and_the_dialect_definition(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True)
    (wheel,) = tmp_path.glob("mlir_tile-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {f"mlir_tile/{p.relative_to(REPO / 'python' / 'mlir_tile')}" for p in (REPO / "python" / "mlir_tile").rglob("*.py")}
    sources |= {f"mlir_tile/dialect/{p.name}" for p in (REPO / "dialect").glob("*.py")}
    sources |= {f"mlir_tile/passes/{p.name}" for p in (REPO / "passes").glob("*.py")}
    sources |= {f"mlir_tile/dialect/{p.name}" for p in (REPO / "dialect").glob("*.irdl.mlir")}
    assert sources - names == set()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert sorted(runtime) == ["cuda-python", "numpy"]  # a GPU host installs the runtime without MLIR
    assert any(r.startswith("xtc-mlir-python-bindings") and 'extra == "compiler"' in r for r in requires)


BLOCK_MLIR = (
    "import sys, importlib.abc\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'mlir' or name.startswith('mlir.'):\n"
    "            raise ImportError('mlir is blocked: ' + name)\n"
    "sys.meta_path.insert(0, Block())\n"
)


@pytest.mark.parametrize("command", ["tile_opt", "tile_translate", "mlir_opt"])
def test_a_compiler_command_without_the_compiler_says_which_extra_it_needs(command):
    """A runtime-only install still has the console scripts: each says in one line what to install."""
    program = BLOCK_MLIR + f"from mlir_tile.tools import commands\nsys.exit(commands.{command}())\n"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    name = command.replace("_", "-")
    assert (result.returncode, result.stdout) == (1, "") and result.stderr == (
        f"{name}: needs the MLIR compiler, which this install does not have; install mlir-tile with its compiler "
        f"extra (pip install 'WHEEL[compiler]', or pip install -e '.[compiler]' in the source tree)\n")


def test_a_compiler_command_with_the_compiler_runs_its_tool():
    result = subprocess.run([sys.executable, "-c", "import sys\nfrom mlir_tile.tools import commands\n"
                             "sys.argv = ['tile-opt', '--version']\nsys.exit(commands.tile_opt())"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("tile-opt (mlir-tile"), result.stderr


def test_the_pure_modules_import_with_mlir_blocked():
    """The runtime side (a GPU host) has no MLIR: these modules must not reach for it."""
    program = BLOCK_MLIR + (
        f"for name in {PURE!r}:\n"
        "    importlib.import_module('mlir_tile.' + name)\n"
        "print('imported', len(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", "import importlib\n" + program], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_builder_imports_no_pass():
    """Layers point one way: the builder (and the checked transfer) stand on mlir_tile.analysis, not on the
    passes, which stand on it too."""
    program = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('mlir_tile.passes'):\n"
        "            raise ImportError('the passes are blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from mlir_tile.builder import Kernel, transfer\n"
        "with Kernel('k', [], block=(32, 1, 1)) as k:\n"
        "    transfer('ldmatrix.sync.aligned.m8n8.x4.shared.b16', k.registers(4), k.shared('s', 512),\n"
        "             dst_layout='(4,8,4):(1,4@laneid,1@laneid)', src_layout='(4,8,4):(32,4,1)')\n"
        "    k.dynamic_shared(128)\n"
        "print('built')\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "built\n", result.stderr
