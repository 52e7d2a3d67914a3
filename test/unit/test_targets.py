"""The targets module against LLVM's NVPTX backend itself: the chips it knows, the lowest PTX version each
accepts, the PTX version ldmatrix needs; and the one validator's message."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlir_tile.isa import targets


def llc_path() -> str:
    import llvm

    return str(Path(list(llvm.__path__)[0]) / "bin" / "llc")


def llc_listing() -> str:
    listing = subprocess.run([llc_path(), "-mtriple=nvptx64-nvidia-cuda", "-mcpu=help"], capture_output=True,
                             text=True, check=True)
    return listing.stdout + listing.stderr


def llc_accepts(ir_text: str, chip: str, ptx: int, tmp_path) -> bool:
    source = tmp_path / "kernel.ll"
    source.write_text(ir_text)
    return subprocess.run([llc_path(), f"-mcpu={chip}", f"-mattr=+ptx{ptx}", str(source), "-o", os.devnull],
                          capture_output=True).returncode == 0


EMPTY_KERNEL = 'target triple = "nvptx64-nvidia-cuda"\ndefine ptx_kernel void @k() {\n  ret void\n}\n'
LDMATRIX_KERNEL = """target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x1.b16.p3(ptr addrspace(3))
define ptx_kernel void @k(ptr addrspace(3) %p, ptr addrspace(1) %o) {
  %v = call i32 @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x1.b16.p3(ptr addrspace(3) %p)
  store i32 %v, ptr addrspace(1) %o
  ret void
}
"""


def test_nvptx_chips_are_the_processors_llc_lists():
    """NVPTX_CHIPS is what the backend accepts: another chip would abort the process in codegen."""
    listed = set(re.findall(r"^\s+(sm_\w+)\s+- Select", llc_listing(), re.M))
    assert listed == targets.NVPTX_CHIPS


def test_chip_minimum_ptx_is_where_llc_starts_accepting_the_chip(tmp_path):
    """For each chip, llc accepts its CHIP_MINIMUM_PTX and stops the process one PTX version below it."""
    versions = sorted(int(v) for v in re.findall(r"^\s+ptx(\d+)\s", llc_listing(), re.M))
    assert set(targets.CHIP_MINIMUM_PTX) == targets.NVPTX_CHIPS
    for chip, minimum in targets.CHIP_MINIMUM_PTX.items():
        assert llc_accepts(EMPTY_KERNEL, chip, minimum, tmp_path), chip
        lower = [v for v in versions if v < minimum]
        if lower:
            assert not llc_accepts(EMPTY_KERNEL, chip, lower[-1], tmp_path), chip


def test_ldmatrix_needs_ptx_65(tmp_path):
    assert targets.MINIMUM_PTX["ldmatrix"] == 65
    assert llc_accepts(LDMATRIX_KERNEL, "sm_75", 65, tmp_path)
    assert not llc_accepts(LDMATRIX_KERNEL, "sm_75", 64, tmp_path)


@pytest.mark.parametrize("chip", ["sm_99", "sm_9", "compute_90", "90", "sm_90 -O0", "", None, 90, "sm_70", "sm_101"])
def test_one_validator_names_the_chip_and_the_known_chips(chip):
    problem = targets.chip_problem(chip)
    assert problem.startswith(f"'{chip}' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know; "
                              f"use one of sm_75, ")
    with pytest.raises(targets.TargetError, match="is not a chip"):
        targets.require_chip(chip)


def test_known_chips_start_at_the_minimum_architecture():
    assert targets.known_chips(90).startswith("sm_90, sm_90a, sm_100")
    assert targets.chip_problem(targets.DEFAULT_CHIP) is None and targets.architecture("sm_90a") == 90


def test_ptxas_chips_are_the_ones_ptxas_lists():
    """PTXAS_CHIPS is what CUDA 13.0's assembler takes (nvJitLink is the same assembler)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not on PATH")
    listing = subprocess.run([ptxas, "--help"], capture_output=True, text=True).stdout
    assert set(re.findall(r"'(sm_\w+)'", listing)) == targets.PTXAS_CHIPS


@pytest.mark.parametrize("features, ok", [("", True), ("+ptx80", True), (" +ptx90 ", True), ("cta", False),
                                           ("+ptx80,+ptx81", False), ("-ptx80x", False), ("\\1024", False)])
def test_only_one_ptx_feature_goes_to_llvm(features, ok):
    assert (targets.features_problem(features) is None) == ok


def test_an_sms_shared_memory_is_recorded_for_hopper_only():
    """sm_shared_bytes: the CUDA guide's 228 KB an SM on compute capability 9.0 (the resident blocks share it, each
    also holding SHARED_RESERVED_BYTES); other chips are refused rather than guessed."""
    assert targets.sm_shared_bytes("sm_90a") == 228 * 1024 and targets.SHARED_RESERVED_BYTES == 1024
    with pytest.raises(ValueError, match="recorded for sm_90, not sm_80"):
        targets.sm_shared_bytes("sm_80")
