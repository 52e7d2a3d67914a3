"""compile_to_cubin: the spec example assembled by nvJitLink is an sm_90 cubin holding the kernel; bad input
is a CompileError, never a crash. (That the cubin computes the spec's table is checked on the GPU host:
`seed_example.py --run-cubin`.)"""
import re
import struct


import pytest

from mlir_tile.compiler.compile import compile_to_cubin, compile_to_ptx
from mlir_tile.runtime.ptx import CompileError, cubin_of_ptx

import seed_example  # noqa: E402

EM_CUDA = 190


def elf_sections(image: bytes) -> dict[str, bytes]:
    """Section name -> contents of a 64-bit little-endian ELF file."""
    assert image[:4] == b"\x7fELF" and image[4] == 2 and image[5] == 1, "not a 64-bit little-endian ELF file"
    section_offset, = struct.unpack_from("<Q", image, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", image, section_offset + i * entry_size) for i in range(count)]
    names = headers[names_index]
    name_table = image[names[4]: names[4] + names[5]]
    sections = {}
    for name, kind, _, _, offset, size, *_ in headers:
        label = name_table[name: name_table.index(b"\0", name)].decode()
        sections[label] = b"" if kind == 8 else image[offset: offset + size]  # SHT_NOBITS has no bytes
    return sections


@pytest.fixture(scope="module")
def spec_ptx() -> str:
    return compile_to_ptx(seed_example.build_module())


def test_cubin_is_an_sm90_elf_with_the_kernel(spec_ptx):
    cubin = cubin_of_ptx(spec_ptx, "sm_90")
    machine, = struct.unpack_from("<H", cubin, 0x12)
    assert machine == EM_CUDA
    sections = elf_sections(cubin)
    assert ".text.matrix_kernel" in sections and len(sections[".text.matrix_kernel"]) > 0
    assert ".nv.shared.matrix_kernel" in sections  # the kernel's 1 KiB of shared memory
    assert b"matrix_kernel" in sections[".strtab"]


def test_compile_to_cubin_is_compile_to_ptx_then_nvjitlink(spec_ptx):
    assert elf_sections(compile_to_cubin(seed_example.build_module()))[".text.matrix_kernel"] == \
        elf_sections(cubin_of_ptx(spec_ptx))[".text.matrix_kernel"]


def test_ptx_errors_carry_the_assembler_log(spec_ptx):
    with pytest.raises(CompileError, match=r"(?s)sm_90 failed: .*line \d+.*Not a name of any known instruction: 'ldmatrixx'"):
        cubin_of_ptx(spec_ptx.replace("ldmatrix.", "ldmatrixx."), "sm_90")


@pytest.mark.parametrize("chip", ["sm_9", "compute_90", "90", "sm_90 -O0", "sm_99"])
def test_malformed_or_unknown_chip_is_an_error_not_a_crash(spec_ptx, chip):
    """nvJitLink ends the process on some malformed names (sm_9): targets' one validator answers first."""
    with pytest.raises(CompileError, match=rf"chip '{re.escape(chip)}' is not a chip that both LLVM's NVPTX backend and CUDA 13.0's ptxas know"):
        cubin_of_ptx(spec_ptx, chip)


# ----- the cubin cache -----
@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, and a count of the times nvJitLink really assembles."""
    import mlir_tile.runtime.ptx as ptx_module

    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MLIR_TILE_NO_CACHE", raising=False)
    calls = []
    assemble = ptx_module._assemble

    def counting(ptx, chip):
        calls.append(chip)
        return assemble(ptx, chip)

    monkeypatch.setattr(ptx_module, "_assemble", counting)
    return tmp_path, calls


def cached_files(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def test_the_same_ptx_is_assembled_once(spec_ptx, cache):
    folder, calls = cache
    first = cubin_of_ptx(spec_ptx)
    assert cubin_of_ptx(spec_ptx) == first
    assert calls == ["sm_90"]
    assert len(cached_files(folder)) == 1 and cached_files(folder)[0].endswith(".cubin")


def test_the_chip_and_the_text_are_part_of_the_key(spec_ptx, cache):
    folder, calls = cache
    cubin_of_ptx(spec_ptx, "sm_90")
    cubin_of_ptx(spec_ptx, "sm_90a")
    cubin_of_ptx(spec_ptx + "\n// another kernel\n", "sm_90")
    assert calls == ["sm_90", "sm_90a", "sm_90"] and len(cached_files(folder)) == 3


def test_a_damaged_entry_is_assembled_again_and_replaced(spec_ptx, cache):
    folder, calls = cache
    good = cubin_of_ptx(spec_ptx)
    (entry,) = folder.rglob("*.cubin")
    entry.write_bytes(b"not a cubin")
    assert cubin_of_ptx(spec_ptx) == good and entry.read_bytes() == good
    assert len(calls) == 2


def test_failures_are_not_cached(spec_ptx, cache):
    folder, calls = cache
    for _ in range(2):
        with pytest.raises(CompileError):
            cubin_of_ptx(spec_ptx.replace("ldmatrix.", "ldmatrixx."))
    assert len(calls) == 2 and cached_files(folder) == []


def test_no_cache_when_turned_off(spec_ptx, cache, monkeypatch):
    folder, calls = cache
    monkeypatch.setenv("MLIR_TILE_NO_CACHE", "1")
    cubin_of_ptx(spec_ptx)
    cubin_of_ptx(spec_ptx)
    assert len(calls) == 2 and cached_files(folder) == []


def test_an_unwritable_cache_is_no_error(spec_ptx, cache, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache folder cannot be created below a file")
    monkeypatch.setenv("MLIR_TILE_CACHE_DIR", str(blocker))
    assert cubin_of_ptx(spec_ptx).startswith(b"\x7fELF")
    assert blocker.read_text().startswith("the cache folder")


def test_default_cache_folder_follows_xdg(monkeypatch, tmp_path):
    from mlir_tile.runtime.ptx import cache_directory

    monkeypatch.delenv("MLIR_TILE_CACHE_DIR", raising=False)
    monkeypatch.delenv("MLIR_TILE_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_directory() == tmp_path / "mlir-tile"
    monkeypatch.setenv("MLIR_TILE_NO_CACHE", "0")
    assert cache_directory() == tmp_path / "mlir-tile"
    monkeypatch.setenv("MLIR_TILE_NO_CACHE", "1")
    assert cache_directory() is None
