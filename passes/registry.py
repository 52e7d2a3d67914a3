"""How tile passes and named pipelines declare themselves: each pass module declares its `PASS` (name,
summary, the function that runs it, typed options); the pipelines are declared here. `mlir_tile.passes`
collects them into PASSES and PIPELINES, which `tile-opt --list-passes` and the pipeline runner read.

Python-defined passes cannot be named in an upstream textual pipeline (`PassManager.parse` does not know
them), so the runner (`mlir_tile.compiler.pipeline`) adds them with `PassManager.add(callable)` and everything else
as text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mlir_tile.isa import targets


@dataclass(frozen=True)
class Option:
    """A pass or pipeline option: `parse` turns its text into the value (raising ValueError with the reason)."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str


@dataclass(frozen=True)
class Step:
    """A tile pass or pipeline with typed option values: how pipelines are built in Python, so that no value
    is formatted into pipeline text and parsed back. `text` is how it is shown (and written in a pipeline)."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def text(self) -> str:
        given = " ".join(f"{name}={str(value).lower() if isinstance(value, bool) else value}"
                         for name, value in self.options if value is not None)
        return f"{self.name}{{{given}}}" if given else self.name


class _Definition:
    def option_values(self, given: dict[str, str]) -> dict[str, Any]:
        """The typed values of options given as text (ValueError with the reason)."""
        return _option_values(self.name, self.options, given)

    def step(self, **values) -> Step:
        """This pass or pipeline with option values given as Python values, each checked as its option
        checks text (a chip must be a known chip)."""
        checked = self.option_values({name.replace("_", "-"): str(value).lower() if isinstance(value, bool)
                                      else str(value) for name, value in values.items() if value is not None})
        return self.step_of(checked)

    @property
    def defaults(self) -> dict[str, Any]:
        return {option.name: option.default for option in self.options}

    def step_of(self, values: dict[str, Any]) -> Step:
        """The Step of typed option values; those equal to their defaults are left out (as mlir-opt prints)."""
        return Step(self.name, tuple(sorted((name, value) for name, value in values.items()
                                            if value != self.defaults.get(name))))

    def values_of(self, step: Step) -> dict[str, Any]:
        """Every option's value in `step`, defaults included."""
        return {**self.defaults, **step.values}


@dataclass(frozen=True)
class PassDefinition(_Definition):
    name: str
    summary: str
    run: Callable  # run(op, pass_, **options)
    options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class PipelineDefinition(_Definition):
    name: str
    summary: str
    elements: Callable[[dict], list]  # the pipeline's elements (upstream text or Steps), given its option values
    options: tuple[Option, ...] = ()


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


# Upstream conversions of a gpu.module body to the LLVM/NVVM dialects (nvgpu's async copies first); bare
# pointers for static memref arguments, so a kernel takes one pointer per buffer. No canonicalize/cse: LLVM's optimizer makes the same
# PTX without them (checked on the spec example and every benchmark kernel), and they cost 10% of compile time.
# lower-affine runs again after expand-strided-metadata, which composes a subview of a dynamically placed
# subview with an affine.apply (left unconverted, it failed the translation to LLVM). convert-nvvm-to-llvm
# turns the NVVM ops that only exist as inline PTX (Hopper's mbarrier waits by parity and expected
# transactions, which TMA loads complete on) into it; the kernels before it compile to the same PTX.
_GPU_MODULE_TO_NVVM = (
    "gpu.module(convert-nvgpu-to-nvvm, lower-affine, convert-scf-to-cf, expand-strided-metadata, lower-affine, "
    "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1}, convert-nvvm-to-llvm)"
)


def _tile_to_nvvm(options: dict) -> list:
    # gpu.launch bodies become kernels in gpu.modules first, so that their transfers reach the PTX
    target = Step("tile-set-nvvm-target", (("chip", options["chip"]),) if options["chip"] else ())
    return ["gpu-kernel-outlining", target,
            Step("tile-check-nvptx"), Step("tile-verify-matrix-transfer"), Step("tile-lower-matrix-transfer"),
            _GPU_MODULE_TO_NVVM, Step("tile-extern-dynamic-shared"), Step("tile-grid-constant-tensor-maps"),
            "reconcile-unrealized-casts"]


def _tile_to_ptx(options: dict) -> list:
    return _tile_to_nvvm(options) + ["gpu-module-to-binary{format=isa}"]


TILE_TO_NVVM = PipelineDefinition("tile-to-nvvm", "verify + lower + the upstream gpu.module conversions to "
                                  "LLVM/NVVM", _tile_to_nvvm, (CHIP_OPTION,))
TILE_TO_PTX = PipelineDefinition("tile-to-ptx", "tile-to-nvvm + gpu-module-to-binary{format=isa}", _tile_to_ptx,
                                 (CHIP_OPTION,))
