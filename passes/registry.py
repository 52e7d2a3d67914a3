"""How tile passes and named pipelines declare themselves: each pass module declares its `PASS` (name,
summary, the function that runs it, typed options); the pipelines are declared here. `mlir_tile.passes`
collects them into PASSES and PIPELINES, which `tile-opt --list-passes` and the pipeline runner read.

Python-defined passes cannot be named in an upstream textual pipeline (`PassManager.parse` does not know
them), so the runner (`mlir_tile.pipeline`) adds them with `PassManager.add(callable)` and everything else
as text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mlir_tile import targets


@dataclass(frozen=True)
class Option:
    """A pass or pipeline option: `parse` turns its text into the value (raising ValueError with the reason)."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str


@dataclass(frozen=True)
class PassDefinition:
    name: str
    summary: str
    run: Callable  # run(op, pass_, **options)
    options: tuple[Option, ...] = ()

    def option_values(self, given: dict[str, str]) -> dict[str, Any]:
        return _option_values(self.name, self.options, given)


@dataclass(frozen=True)
class PipelineDefinition:
    name: str
    summary: str
    elements: Callable[[dict], list[str]]  # the pipeline's elements, given its option values
    options: tuple[Option, ...] = ()

    def expand(self, given: dict[str, str]) -> list[str]:
        return self.elements(_option_values(self.name, self.options, given))


def _option_values(owner: str, options: tuple[Option, ...], given: dict[str, str]) -> dict[str, Any]:
    known = {option.name: option for option in options}
    unknown = sorted(set(given) - set(known))
    if unknown:
        accepted = f"options: {', '.join(known)}" if known else "it takes no options"
        raise ValueError(f"'{owner}' has no option {', '.join(unknown)}; {accepted}")
    values = {}
    for name, option in known.items():
        if name not in given:
            values[name] = option.default
            continue
        try:
            values[name] = option.parse(given[name])
        except ValueError as error:
            raise ValueError(f"'{owner}' option {name}={given[name]}: {error}") from None
    return values


def parse_boolean(text: str) -> bool:
    """An option's true/false (or 1/0), as mlir-opt spells booleans."""
    if text.lower() in ("1", "true"):
        return True
    if text.lower() in ("0", "false"):
        return False
    raise ValueError("expected true/false or 1/0")


CHIP_OPTION = Option("chip", targets.require_chip, None,
                     f"the chip for gpu.modules that name none (default {targets.DEFAULT_CHIP}); one that names "
                     f"another is an error")


# Upstream conversions of a gpu.module body to the LLVM/NVVM dialects; bare pointers for static memref
# arguments, so a kernel takes one pointer per buffer. No canonicalize/cse: LLVM's optimizer makes the same
# PTX without them (checked on the spec example and every benchmark kernel), and they cost 10% of compile time.
_GPU_MODULE_TO_NVVM = (
    "gpu.module(lower-affine, convert-scf-to-cf, expand-strided-metadata, "
    "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1})"
)


def _target(options: dict) -> list[str]:
    return [f"tile-set-nvvm-target{{chip={options['chip']}}}" if options["chip"] else "tile-set-nvvm-target"]


def _tile_to_nvvm(options: dict) -> list[str]:
    # gpu.launch bodies become kernels in gpu.modules first, so that their transfers reach the PTX
    return ["gpu-kernel-outlining"] + _target(options) + ["tile-check-nvptx", "tile-verify-matrix-transfer", "tile-lower-matrix-transfer", _GPU_MODULE_TO_NVVM,
                               "tile-extern-dynamic-shared", "reconcile-unrealized-casts"]


def _tile_to_ptx(options: dict) -> list[str]:
    return _tile_to_nvvm(options) + ["gpu-module-to-binary{format=isa}"]


TILE_TO_NVVM = PipelineDefinition("tile-to-nvvm", "verify + lower + the upstream gpu.module conversions to "
                                  "LLVM/NVVM", _tile_to_nvvm, (CHIP_OPTION,))
TILE_TO_PTX = PipelineDefinition("tile-to-ptx", "tile-to-nvvm + gpu-module-to-binary{format=isa}", _tile_to_ptx,
                                 (CHIP_OPTION,))
