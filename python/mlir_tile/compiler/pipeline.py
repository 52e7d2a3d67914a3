"""Running a pipeline of tile and upstream passes on a module: named pipelines expanded, tile passes added as
Python callables and everything else as upstream text; on failure, replayed one element at a time, so that
the failure names its pass and can hand back the IR the failing pass received."""
from __future__ import annotations

import re

from mlir import ir, passmanager

from mlir_tile.compiler.diagnostics import PIPELINE_LOCATION, Diag, PipelineFailure
from mlir_tile.passes import PASSES, PIPELINES
from mlir_tile.passes.registry import Step
from mlir_tile.passes.remarks import take as take_reports
from mlir_tile.compiler.pipeline_text import parse_element, split_elements

def expand(elements: list) -> list:
    """Named pipelines replaced by their elements, recursively, and tile passes given as text turned into
    Steps (ValueError for an unknown option); upstream elements stay text."""
    expanded = []
    for element in elements:
        if isinstance(element, Step):
            name, values = element.name, element.values
        else:
            name, options = parse_element(element)
            definition = PIPELINES.get(name) or PASSES.get(name)
            values = definition.option_values(options) if definition else None
        if name in PIPELINES:
            expanded += expand(PIPELINES[name].elements(PIPELINES[name].values_of(PIPELINES[name].step_of(values))))
        elif name in PASSES:
            expanded.append(PASSES[name].step_of(values))
        else:
            expanded.append(element)
    return expanded


def element_text(element) -> str:
    """How a pipeline element is shown: its text."""
    return element.text if isinstance(element, Step) else element


def add_element(pm: passmanager.PassManager, element, anchors: tuple[str, ...] = ()) -> None:
    """One pipeline element, nested under `anchors` (op names, outermost first). A tile pass becomes a Python
    callable with its parsed options; a nested pipeline that holds tile passes (`gpu.module(a, tile-x, b)`)
    is split around them; anything else is upstream pipeline text, implicitly nested under the op its pass
    is restricted to, as mlir-opt does (`convert-gpu-to-nvvm` on a module runs on its gpu.modules)."""
    if isinstance(element, Step):
        definition = PASSES[element.name]
        pm.add(_python_pass(definition, definition.values_of(element), anchors), name=element.name, argument=element.name,
               description=definition.summary)
        return
    name, options = parse_element(element)
    definition = PASSES.get(name)
    if definition is not None:
        add_element(pm, definition.step_of(definition.option_values(options)), anchors)
        return
    if name in PIPELINES:
        raise ValueError(f"'{name}' is a pipeline over the builtin.module; it cannot be nested in {anchors[-1]}")
    nested = _NESTED.fullmatch(element.strip())
    if nested and _holds_tile_pass(element):
        upstream: list[str] = []
        for inner in split_elements(nested.group(2)) + [None]:
            if inner is not None and not _holds_tile_pass(inner):
                upstream.append(inner)
                continue
            if upstream:
                _add_upstream(pm, _nest(anchors + (nested.group(1),), ", ".join(upstream)))
                upstream = []
            if inner is not None:
                add_element(pm, inner, anchors + (nested.group(1),))
        return
    _add_upstream(pm, _nest(anchors, element))


_NESTED = re.compile(r"([\w.]+)\((.*)\)", re.S)
_RESTRICTED = re.compile(r"restricted to '([\w.]+)'")


def _holds_tile_pass(element: str) -> bool:
    name, _ = parse_element(element)
    if name in PASSES or name in PIPELINES:
        return True
    nested = _NESTED.fullmatch(element.strip())
    return bool(nested) and any(_holds_tile_pass(inner) for inner in split_elements(nested.group(2)))


def _nest(anchors: tuple[str, ...], text: str) -> str:
    for anchor in reversed(anchors):
        text = f"{anchor}({text})"
    return text


def _add_upstream(pm: passmanager.PassManager, text: str) -> None:
    try:
        pm.add(text)
    except (ValueError, RuntimeError, ir.MLIRError) as error:
        restricted = _RESTRICTED.search(str(error))
        if not restricted:
            raise ValueError(str(error).strip().splitlines()[0]) from None
        pm.add(f"{restricted.group(1)}({text})")


def _python_pass(definition, values: dict, anchors: tuple[str, ...]):
    """The callable PassManager.add takes: the pass on the module, or on each op that `anchors` names
    (each directly nested in the one before, as an upstream nested pass manager runs)."""
    arguments = {name.replace("-", "_"): value for name, value in values.items()}  # warn-bank-conflicts

    def run(op: ir.Operation, pass_) -> None:
        with op.context, op.location:  # Python passes are called with no context entered
            for target in _anchored(op, anchors):
                definition.run(target, pass_, **arguments)
    return run


def _anchored(op: ir.Operation, anchors: tuple[str, ...]) -> list[ir.Operation]:
    found = [op]
    for anchor in anchors:
        found = [child.operation for parent in found for region in parent.regions for block in region.blocks
                 for child in block.operations if child.operation.name == anchor]
    return found


def step_manager(element, context: ir.Context) -> passmanager.PassManager:
    """A pass manager running one pipeline element on a builtin.module."""
    pm = passmanager.PassManager("builtin.module", context=context)
    add_element(pm, element)
    return pm


def run_pipeline(
    module: ir.Operation, elements: list, *, instrument=None, input_is_file: bool = True
) -> list[Diag]:
    """Run a pipeline of tile and upstream passes on a builtin.module operation, in place.

    The input is verified first, so invalid IR is reported as such rather than blamed on a pass. The
    pipeline runs in one pass manager (`instrument(manager)` may turn on IR printing or timing); only when it
    fails is it replayed step by step on a copy of the input, to name the failing pass and keep the IR that
    pass received (for the reproducer). When the input is not a file (a module built in Python), even the
    first step's input is kept. Returns the remarks and warnings the tile passes reported."""
    try:
        steps = expand(elements)
        manager = passmanager.PassManager("builtin.module", context=module.context)
        for element in steps:
            add_element(manager, element)
    except ValueError as error:
        raise PipelineFailure(None, [Diag("error", PIPELINE_LOCATION, None, None, f"invalid pass pipeline: {error}")]) from None
    try:
        module.verify()
    except ir.MLIRError as error:
        raise PipelineFailure(None, Diag.from_error(error)) from None
    # Python callbacks (the tile passes, the diagnostic handlers) must not be reached from MLIR's worker
    # threads: with threading on, a nested pipeline over several gpu.modules called them without the GIL.
    module.context.enable_multithreading(False)
    if instrument is not None:
        instrument(manager)
    saved = module.clone()  # 20x cheaper than printing; only used to replay a failure
    take_reports()
    try:
        manager.run(module)
        return [Diag.from_location(severity, location, message) for severity, location, message in take_reports()]
    except (ir.MLIRError, RuntimeError):
        pass
    take_reports()
    _run_steps(saved, steps, keep_first_input=not input_is_file)
    raise PipelineFailure(element_text(steps[-1]), [Diag("error", PIPELINE_LOCATION, None, None,
                                           "the pipeline failed, but no single step did")])


def _run_steps(module: ir.Operation, steps: list[str], keep_first_input: bool) -> None:
    """Each element as its own step; raises PipelineFailure naming the first step that fails."""
    for position, element in enumerate(steps):
        before = module.get_asm(enable_debug_info=True) if position or keep_first_input else None
        try:
            step_manager(element, module.context).run(module)
        except ir.MLIRError as error:
            raise PipelineFailure(element_text(element), Diag.from_error(error), before) from None
        except RuntimeError as error:  # a Python pass raised: report it as that pass's failure
            message = str(error).strip().splitlines()[-1]
            raise PipelineFailure(element_text(element), [Diag("error", PIPELINE_LOCATION, None, None, f"internal error: {message}")], before) from None
