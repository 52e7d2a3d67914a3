"""The tile passes and pipelines, by name: the passes (`verify`, `lower`, `target`, ...) and their
declarations (`registry`); the IR analyses they share with the builder are `mlir_tile.analysis`."""
from mlir_tile.passes import banks, check_nvptx, extern_shared, grid_constants, lower, target, verify, widen
from mlir_tile.passes.registry import TILE_TO_NVVM, TILE_TO_PTX, PassDefinition, PipelineDefinition

PASSES: dict[str, PassDefinition] = {p.name: p for p in (verify.PASS, lower.PASS, target.PASS, check_nvptx.PASS, extern_shared.PASS,
                                                   grid_constants.PASS, banks.PASS, widen.PASS)}
PIPELINES: dict[str, PipelineDefinition] = {p.name: p for p in (TILE_TO_NVVM, TILE_TO_PTX)}
