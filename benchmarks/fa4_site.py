"""FlashAttention-4 (CuTe DSL) on the GPU host as an anchor, from wheels fetched where there is a network
(../shared/notes/anchors.md): the small wheels installed into a folder, the two large libraries (carried as .xz,
the wheel's 92 MB being over what one device call carries) unpacked into their places.

    python3 benchmarks/fa4_site.py unpack XZ DEST          # call 1: a .xz carried alone, unpacked to DEST
    python3 benchmarks/fa4_site.py install WHEELS SITE X.so... # call 2: the wheels into SITE, the .so files placed

The benchmarks then find it through `MLIR_TILE_FA4_SITE=SITE` (`torch_timing.flash_attention_4`).
"""
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

# where each large library lies under the site folder (nvidia_cutlass_dsl's layout)
PLACES = {"_cutlass_ir": "nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/"
                         "_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so",
          "cute_dsl_runtime": "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so"}


def unpack(xz: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(xz) as source, open(destination, "wb") as target:
        shutil.copyfileobj(source, target, 1 << 24)


def install(wheels: Path, site: Path, libraries: list[Path]) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    *map(str, sorted(wheels.glob("*.whl")))], check=True)
    for library in libraries:
        name = next(key for key in PLACES if key in library.name)
        target = site / PLACES[name]
        target.parent.mkdir(parents=True, exist_ok=True)
        if library.suffix == ".xz":
            unpack(library, target)
        else:
            shutil.copyfile(library, target)


def main(argv: list[str]) -> int:
    if argv[:1] == ["unpack"] and len(argv) == 3:
        unpack(Path(argv[1]), Path(argv[2]))
    elif argv[:1] == ["install"] and len(argv) >= 3:
        install(Path(argv[1]), Path(argv[2]), [Path(x) for x in argv[3:]])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
