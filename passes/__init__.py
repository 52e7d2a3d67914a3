"""The tile passes and pipelines, by name, and the code that runs a textual pipeline mixing them with
upstream passes.

Python-defined passes cannot be named in an upstream textual pipeline (`PassManager.parse` does not know
them), so a pipeline is split into its top-level elements: tile passes are added with
`PassManager.add(callable)`, named pipelines expand into elements, and everything else goes to
`PassManager.add(text)` unchanged. Each element runs as its own step, so a failure names its pass.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from mlir import ir, passmanager

from mlir_tile.passes.lower import lower_matrix_transfer
from mlir_tile.passes.target import set_nvvm_target
from mlir_tile.passes.verify import verify_matrix_transfer


@dataclass(frozen=True)
class PassInfo:
    argument: str
    run: Callable
    description: str
    options: dict = field(default_factory=dict)


PASSES = {
    info.argument: info
    for info in (
        PassInfo(
            "tile-verify-matrix-transfer",
            verify_matrix_transfer,
            "Check every tile.matrix_transfer against the ldmatrix/stmatrix legality contract",
        ),
        PassInfo(
            "tile-lower-matrix-transfer",
            lower_matrix_transfer,
            "Lower tile.matrix_transfer to nvvm.ldmatrix / nvvm.stmatrix (one per repeat)",
        ),
        PassInfo(
            "tile-set-nvvm-target",
            set_nvvm_target,
            "Give every gpu.module an #nvvm.target for the chip (replacing the chip of an existing one)",
            {"chip": "sm_90"},
        ),
    )
}

# Upstream conversions of a gpu.module body to the LLVM/NVVM dialects; bare pointers for static memref
# arguments, so a kernel takes one pointer per buffer. No canonicalize/cse: LLVM's optimizer makes the same
# PTX without them (checked on the spec example and every benchmark kernel), and they cost 10% of compile time.
_GPU_MODULE_TO_NVVM = (
    "gpu.module(convert-scf-to-cf, expand-strided-metadata, lower-affine, "
    "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1})"
)


def _tile_to_nvvm(options: dict) -> list[str]:
    return ["tile-verify-matrix-transfer", "tile-lower-matrix-transfer", _GPU_MODULE_TO_NVVM,
            "reconcile-unrealized-casts"]


def _tile_to_ptx(options: dict) -> list[str]:
    target = [f"tile-set-nvvm-target{{chip={options['chip']}}}"] if "chip" in options else []
    return target + _tile_to_nvvm(options) + ["gpu-module-to-binary{format=isa}"]


PIPELINES: dict[str, tuple[Callable[[dict], list[str]], str]] = {
    "tile-to-nvvm": (_tile_to_nvvm, "verify + lower + the upstream gpu.module conversions to LLVM/NVVM"),
    "tile-to-ptx": (_tile_to_ptx, "tile-to-nvvm + gpu-module-to-binary{format=isa}; option chip=sm_XX"),
}


def split_elements(text: str) -> list[str]:
    """Top-level elements of `a, b{x=1}, gpu.module(c, d)` (an outer `builtin.module(...)` is removed)."""
    text = text.strip()
    match = re.fullmatch(r"builtin\.module\((.*)\)", text, re.S)
    if match:
        text = match.group(1)
    elements, depth, current = [], 0, ""
    for char in text:
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' or '}}' in pass pipeline '{text}'")
        if char == "," and depth == 0:
            elements.append(current.strip())
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"unbalanced '(' or '{{' in pass pipeline '{text}'")
    if current.strip():
        elements.append(current.strip())
    return elements


def parse_element(element: str) -> tuple[str, dict]:
    match = re.fullmatch(r"([\w.\-]+)(?:\{(.*)\})?", element.strip(), re.S)
    if not match:
        return element, {}
    options = {}
    for item in (match.group(2) or "").split():
        key, _, value = item.partition("=")
        options[key] = value
    return match.group(1), options


def expand(elements: list[str]) -> list[str]:
    """Named pipelines replaced by their elements, recursively."""
    expanded = []
    for element in elements:
        name, options = parse_element(element)
        if name in PIPELINES:
            expanded += expand(PIPELINES[name][0](options))
        else:
            expanded.append(element)
    return expanded


def add_element(pm: passmanager.PassManager, element: str) -> None:
    name, options = parse_element(element)
    info = PASSES.get(name)
    if info is None:
        pm.add(element)
        return
    unknown = set(options) - set(info.options)
    if unknown:
        raise ValueError(
            f"pass '{name}' has no option(s) {', '.join(sorted(unknown))}"
            + (f"; options: {', '.join(info.options)}" if info.options else "; it takes no options")
        )
    options = {**info.options, **options}

    def run(op: ir.Operation, pass_) -> None:
        with op.context, op.location:  # Python passes are called with no context entered
            info.run(op, pass_, **options)

    pm.add(run, name=name, argument=name, description=info.description)


def step_manager(element: str, context: ir.Context) -> passmanager.PassManager:
    """A pass manager running one pipeline element on a builtin.module."""
    pm = passmanager.PassManager("builtin.module", context=context)
    add_element(pm, element)
    return pm
