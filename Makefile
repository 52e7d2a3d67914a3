# mlir-tile: `make demo` and `make test` are all a new user types; both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest cmake-check bench venv clean gpu-inputs kernels wheel

$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[compiler,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/seed_example.py --demo

# The lit suite runs through CMake's check-tile target, which proves that target works. pytest runs a worker
# per core (pytest-xdist); `make pytest ARGS="-m 'not slow'"` leaves out the end-to-end kernel builds.
test: $(STAMP)
	$(MAKE) cmake-check
	$(BIN)/python -m pytest -q -rs -n auto test/unit test/fuzz

cmake-check: $(STAMP)
	cmake -S . -B build -DPython3_EXECUTABLE=$(abspath $(BIN)/python) >/dev/null
	cmake --build build --target check-tile

# The PTX the GPU tests run (test/unit/test_runtime_gpu.py), built here; carry build/gpu-inputs to a GPU host.
gpu-inputs: $(STAMP)
	$(BIN)/python test/gpu_inputs.py build/gpu-inputs

# The kernels `mlir_tile.kernels` may pick, for sm_90 and sm_80, into the package (684, 20-25 minutes on
# two cores; kept between runs), then the wheel that ships them into dist/: `pip install dist/mlir_tile-*.whl`
# on a GPU host runs matmul and attention without the compiler.
kernels: $(STAMP)
	$(BIN)/python -m mlir_tile.kernels.ship

wheel: kernels
	rm -rf build/lib build/bdist.* dist  # (setuptools packs what an older build left in build/lib)
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -w dist .

lit: $(STAMP)
	$(BIN)/lit -sv test

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -rs -n auto $(ARGS) test/unit test/fuzz

# Benchmarks, build side (see benchmarks/bench.py): kernels, compile latency (against NVRTC, installed
# here by the `bench` extra) and pass scaling into DIR, which then travels to a GPU host for
# `python3 benchmarks/bench.py run DIR` and `profile DIR`.
DIR ?= benchmarks/out
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[compiler,test,bench]'
	$(BIN)/python benchmarks/bench.py build $(DIR)
	$(BIN)/python benchmarks/bench.py scaling $(DIR)

clean:
	rm -rf build dist $(VENV) python/mlir_tile/kernels/shipped
