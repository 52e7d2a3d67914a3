"""The GPU differential bundle makes a round trip on the CPU: written here, run by the GPU side's runner
against a fake runtime that executes each case's transfer (as the manifest names it, widened or not) on the
ISA reference model. Every case passes (widened transfers, and transfers on views at random offsets); a fake
that flips one word is reported as a mismatch."""
import json

import pytest

from mlir_tile.models.reference import emulate
from mlir_tile.testing import difftest, difftest_runner


class FakeRuntime:
    """What run_bundle uses of mlir_tile.runtime.Runtime: load a PTX text, launch a kernel on numpy arrays."""

    name = "the reference model"

    def __init__(self, manifest, corrupt=None):
        self.cases = {case["kernel"]: case for case in manifest["cases"]}
        self.corrupt = corrupt

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def load_ptx(self, text, name):
        assert f".entry {name}(" in text  # the bundle's PTX holds the kernel the manifest names
        return self

    def launch(self, kernel, arrays, grid, block):
        case = self.cases[kernel]
        shared, registers = arrays[0].copy(), arrays[1].copy()
        assert grid == 1 and block == case["threads"] == len(registers)
        view = case["view_offset"]
        if case["opcode"].startswith("ldmatrix"):
            registers = emulate(case["opcode"], case["dst_layout"], case["src_layout"], registers, shared, case["scope"], view)
        else:
            shared = emulate(case["opcode"], case["dst_layout"], case["src_layout"], shared, registers, case["scope"], view)
        if kernel == self.corrupt:
            registers.flat[0] ^= 1
        return arrays[0], arrays[1], registers, shared


@pytest.fixture(scope="module", params=["widened", "views"])
def bundle(tmp_path_factory, request):
    directory = tmp_path_factory.mktemp("bundle")
    summary = difftest.write_bundle(directory, count=24, seed=11, widen=request.param == "widened",
                                    views=request.param == "views")
    # the widened kernels are checked against the written transfer's outputs; swizzled views against the
    # offsets from the buffer
    assert summary["widened" if request.param == "widened" else "swizzled views"] > 0
    return directory


def test_every_case_passes_on_the_reference_model(bundle, monkeypatch):
    manifest = json.loads((bundle / "manifest.json").read_text())
    monkeypatch.setattr(difftest_runner, "Runtime", lambda: FakeRuntime(manifest))
    results = difftest_runner.run_bundle(bundle)
    assert results == {"cases": 24, "passed": 24, "mismatches": [], "device": "the reference model"}


def test_a_wrong_word_is_a_reported_mismatch(bundle, monkeypatch, capsys):
    manifest = json.loads((bundle / "manifest.json").read_text())
    monkeypatch.setattr(difftest_runner, "Runtime", lambda: FakeRuntime(manifest, corrupt="case_3"))
    monkeypatch.setattr("sys.argv", ["difftest_runner", str(bundle)])
    assert difftest_runner.main() == 1
    printed = capsys.readouterr().out
    assert "MISMATCH case 3:" in printed and "1 register / 0 shared words differ" in printed
    assert "23 passed, 1 failed" in printed
