# mlir-tile: `make demo` and `make test` are all a new user types; both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest cmake-check bench venv clean

$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[compiler,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/seed_example.py --demo

# The lit suite runs through CMake's check-tile target, which proves that target works.
test: $(STAMP)
	$(MAKE) cmake-check
	$(BIN)/python -m pytest -q -rs test/unit test/fuzz

cmake-check: $(STAMP)
	cmake -S . -B build -DPython3_EXECUTABLE=$(abspath $(BIN)/python) >/dev/null
	cmake --build build --target check-tile

lit: $(STAMP)
	$(BIN)/lit -sv test

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -rs test/unit test/fuzz

# Benchmarks, build side (see benchmarks/bench.py): kernels, compile latency (against NVRTC, installed
# here by the `bench` extra) and pass scaling into DIR, which then travels to a GPU host for
# `python3 benchmarks/bench.py run DIR` and `profile DIR`.
DIR ?= benchmarks/out
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[compiler,test,bench]'
	$(BIN)/python benchmarks/bench.py build $(DIR)
	$(BIN)/python benchmarks/bench.py scaling $(DIR)

clean:
	rm -rf build $(VENV)
