"""Running a pipeline of tile and upstream passes on a module: named pipelines expanded, tile passes added as
Python callables and everything else as upstream text; on failure, replayed one element at a time, so that
the failure names its pass and can hand back the IR the failing pass received."""
from __future__ import annotations

from mlir import ir, passmanager

from mlir_tile.diagnostics import PIPELINE_LOCATION, Diag, PipelineFailure
from mlir_tile.passes import PASSES, PIPELINES
from mlir_tile.pipeline_text import parse_element

def expand(elements: list[str]) -> list[str]:
    """Named pipelines replaced by their elements, recursively (ValueError for an unknown option)."""
    expanded = []
    for element in elements:
        name, options = parse_element(element)
        if name in PIPELINES:
            expanded += expand(PIPELINES[name].expand(options))
        else:
            expanded.append(element)
    return expanded


def add_element(pm: passmanager.PassManager, element: str) -> None:
    """A tile pass as a Python callable with its parsed options; anything else as upstream pipeline text."""
    name, options = parse_element(element)
    definition = PASSES.get(name)
    if definition is None:
        pm.add(element)
        return
    values = definition.option_values(options)

    def run(op: ir.Operation, pass_) -> None:
        with op.context, op.location:  # Python passes are called with no context entered
            definition.run(op, pass_, **values)

    pm.add(run, name=name, argument=name, description=definition.summary)


def step_manager(element: str, context: ir.Context) -> passmanager.PassManager:
    """A pass manager running one pipeline element on a builtin.module."""
    pm = passmanager.PassManager("builtin.module", context=context)
    add_element(pm, element)
    return pm


def run_pipeline(
    module: ir.Operation, elements: list[str], *, instrument=None, input_is_file: bool = True
) -> None:
    """Run a pipeline of tile and upstream passes on a builtin.module operation, in place.

    The input is verified first, so invalid IR is reported as such rather than blamed on a pass. The
    pipeline runs in one pass manager (`instrument(manager)` may turn on IR printing or timing); only when it
    fails is it replayed step by step on a copy of the input, to name the failing pass and keep the IR that
    pass received (for the reproducer). When the input is not a file (a module built in Python), even the
    first step's input is kept."""
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
    try:
        manager.run(module)
        return
    except (ir.MLIRError, RuntimeError):
        pass
    _run_steps(saved, steps, keep_first_input=not input_is_file)
    raise PipelineFailure(steps[-1], [Diag("error", PIPELINE_LOCATION, None, None,
                                           "the pipeline failed, but no single step did")])


def _run_steps(module: ir.Operation, steps: list[str], keep_first_input: bool) -> None:
    """Each element as its own step; raises PipelineFailure naming the first step that fails."""
    for position, element in enumerate(steps):
        before = module.get_asm(enable_debug_info=True) if position or keep_first_input else None
        try:
            step_manager(element, module.context).run(module)
        except ir.MLIRError as error:
            raise PipelineFailure(element, Diag.from_error(error), before) from None
        except RuntimeError as error:  # a Python pass raised: report it as that pass's failure
            message = str(error).strip().splitlines()[-1]
            raise PipelineFailure(element, [Diag("error", PIPELINE_LOCATION, None, None, f"internal error: {message}")], before) from None
