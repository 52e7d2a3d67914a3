# lit configuration for mlir-tile: IR tests (Dialect/, Transforms/, Conversion/) and Python builder tests
# (python/). Tools come from the Python environment running lit (the repository's .venv).
import os
import shutil
import sys

import lit.formats

config.name = "mlir-tile"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "unit", "fuzz", "Output", "Inputs", "conftest.py", "gpu_inputs.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo = os.path.dirname(config.test_source_root)
bin_dir = os.path.dirname(sys.executable)
import mlir  # noqa: E402  (the bindings' package also carries mlir-opt)

mlir_bin = os.path.join(list(mlir.__path__)[0], "bin")
config.environment["PATH"] = os.pathsep.join([bin_dir, mlir_bin, config.environment.get("PATH", "")])
config.environment["PYTHONPATH"] = os.pathsep.join([os.path.join(repo, "examples"), repo])
config.environment["MLIR_TILE_CACHE_DIR"] = os.path.join(config.test_exec_root, "cubin-cache")  # not ~/.cache

config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%irdl", os.path.join(repo, "dialect", "tile.irdl.mlir")))
config.substitutions.append(("%examples", os.path.join(repo, "examples")))

if shutil.which("ptxas"):
    config.available_features.add("ptxas")
