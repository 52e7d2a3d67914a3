"""The command line the kernels and the examples share (`python -m mlir_tile.kernels.gemm`, `.attention`,
examples/mma_tile.py, mma_s8.py, dynamic_shared.py): build the PTX here, run it on a GPU host (which has no
MLIR), or check the transfers on the reference model (no GPU, no MLIR)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Callable

from mlir_tile.runtime import CudaError

BUILT_WITH = "// mlir-tile example built with: "  # the PTX's first line where the example has build options
SHARED = ("demo", "ptx_out", "run_ptx", "emulate")


def main(doc: str, build_module: Callable, run_and_check: Callable[..., tuple[bool, str]],
         emulate: Callable[..., str] | None = None, shown: str = r"(ldmatrix|stmatrix|mma)\.",
         options: Callable[[argparse.ArgumentParser], tuple[str, ...]] | None = None) -> int:
    """--emulate: `emulate()`, printing the line it returns; --ptx-out FILE: the kernel's PTX (needs MLIR);
    --demo: the PTX's lines matching `shown`, then the GPU run where there is a GPU; --run-ptx FILE: the GPU
    run of FILE. `run_and_check(ptx)` runs the kernel and returns (whether its output is right, a line
    saying so). Exit status 1 when a GPU run is wrong.

    `options(parser)` adds the example's own options (element type, shape, ...) and returns the names of those
    the PTX is built for; then `build_module(**build)`, `run_and_check(ptx, **own)` and `emulate(**own)` take
    them as keywords (`build` those, `own` all of the example's). --ptx-out writes the build options into the
    PTX's first line, a comment, and --run-ptx takes them from there: a build option given on the command line
    that contradicts them is a usage error (exit status 2)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--demo", action="store_true", help="the kernel's transfers in the PTX; the GPU run if any")
    parser.add_argument("--ptx-out", help="write the PTX here (needs MLIR)")
    parser.add_argument("--run-ptx", help="run this PTX on the GPU (no MLIR needed)")
    if emulate is not None:
        parser.add_argument("--emulate", action="store_true", help="the transfers on the reference model (no GPU)")
    build_names = options(parser) if options is not None else ()
    unset = object()  # (argparse leaves an option's value alone where the namespace has one: given or not)
    arguments = parser.parse_args(namespace=argparse.Namespace(**{name: unset for name in build_names}))
    given = {name for name in build_names if getattr(arguments, name) is not unset}
    for name in set(build_names) - given:
        setattr(arguments, name, parser.get_default(name))
    own = {name: value for name, value in vars(arguments).items() if name not in SHARED}
    build = {name: own[name] for name in build_names}
    try:  # ValueError: what the example's kernels do not take; OSError: a file not read or written
        ptx = None
        if arguments.run_ptx:
            with open(arguments.run_ptx) as stream:
                ptx = stream.read()
            recorded = _built_with(ptx)
            for name, value in recorded.items():
                if name in given and own[name] != value:
                    parser.error(f"{arguments.run_ptx} was built with {_flag(name)} {value}, not {own[name]}: drop "
                                 f"the option or build the PTX with it")
            own.update((name, value) for name, value in recorded.items() if name in build)
        if getattr(arguments, "emulate", False):
            print(emulate(**own))
        if arguments.demo or arguments.ptx_out:
            from mlir_tile.compiler.compile import compile_to_ptx

            built = with_build_options(compile_to_ptx(build_module(**build)), build)
            if arguments.ptx_out:
                with open(arguments.ptx_out, "w") as stream:
                    stream.write(built)
            if arguments.demo:
                for line in built.splitlines():
                    if re.search(shown, line):
                        print(line.strip())
                from mlir_tile.runtime import gpu_available

                if gpu_available()[0] and ptx is None:
                    ptx = built
        if ptx is not None:
            passed, line = run_and_check(ptx, **own)
            print(line)
            return 0 if passed else 1
        return 0
    except (ValueError, OSError) as error:
        parser.error(str(error))
    except CudaError as error:  # no GPU, or the run failed: said, not a traceback
        print(f"GPU: {error}", file=sys.stderr)
        return 1


def add_fields(parser, config_type, exclude: tuple[str, ...], where: str) -> tuple[str, ...]:
    """An option for each field of the dataclass `config_type` but `exclude`: `--name VALUE` (ints, strings) or
    `--name` / `--no-name` (booleans), default None (the configuration's own; `where` says whose); returns their
    names. The configuration's one form on the command line: its fields, not a grammar of their own."""
    import dataclasses

    names = []
    for field in dataclasses.fields(config_type):
        if field.name in exclude:
            continue
        kind = field.type if isinstance(field.type, str) else field.type.__name__
        wording = f"{config_type.__name__}.{field.name} (default: {where})"
        if kind == "bool":
            parser.add_argument(_flag(field.name), action=argparse.BooleanOptionalAction, default=None, help=wording)
        else:
            parser.add_argument(_flag(field.name), type={"int": int, "str": str}[kind], default=None, help=wording)
        names.append(field.name)
    return tuple(names)


def given(fields: dict) -> dict:
    """The fields of `add_fields`' options that were given (not None)."""
    return {name: value for name, value in fields.items() if value is not None}


def with_build_options(ptx: str, build: dict) -> str:
    """The PTX as --ptx-out writes it: the build options in its first line, a comment, where there are any
    (those left at None, a configuration's fields not given, are not written: --run-ptx takes None for them)."""
    build = {name: value for name, value in build.items() if value is not None}
    return BUILT_WITH + json.dumps(build) + "\n" + ptx if build else ptx


def _built_with(ptx: str) -> dict:
    first = ptx.split("\n", 1)[0]
    return json.loads(first.removeprefix(BUILT_WITH)) if first.startswith(BUILT_WITH) else {}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
