"""The house's rules, read off the source (issue 58): folders are layers and imports point down only, no import
circle anywhere (imports inside functions counted), a kernel family's sm80 and sm90 siblings never import each
other and its configuration data imports no kernel, the chip's name only in `isa/targets.py`, no module over
600 lines."""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"mlir_tile": REPO / "python" / "mlir_tile", "mlir_tile.dialect": REPO / "dialect",
         "mlir_tile.passes": REPO / "passes"}
# lowest first: a module may import its own layer's and those before it, never a later one's
LAYERS = ["algebra", "isa", "contract", "models", "tiling", "runtime", "dialect", "analysis", "passes", "compiler",
          "builder", "kernels", "testing", "tools"]


def _modules() -> dict:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            name = ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set:
    """The mlir_tile modules `name` imports, anywhere in it (a package's parent excepted)."""
    imported = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mlir_tile"):
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names if alias.name.startswith("mlir_tile")]
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name and not name.startswith(target + "."):
                imported.add(target)
    return imported


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_imports_point_down_the_layers():
    upward = [(name, target) for name, targets in GRAPH.items() for target in targets
              if _layer(name) is not None and _layer(target) is not None and _layer(target) > _layer(name)]
    assert not upward, upward


def test_no_import_circle():
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in GRAPH:
        if name not in index:
            visit(name)
    assert not circles, circles


@pytest.mark.parametrize("family", ["gemm", "flash"])
def test_a_familys_siblings_stand_apart_and_its_configurations_import_no_kernel(family):
    prefix = f"mlir_tile.kernels.{family}."
    for a, b in (("sm80", "sm90"), ("sm90", "sm80")):
        assert prefix + b not in GRAPH[prefix + a]
    for data in ("sm80_tiles", "sm90_tiles"):
        kernels = {prefix + kernel for kernel in ("sm80", "sm90", "launch")}
        assert not GRAPH[prefix + data] & kernels, GRAPH[prefix + data]
    assert not any(name.startswith(prefix) for name in GRAPH["mlir_tile.kernels.common"])


def test_the_chips_name_is_written_in_targets_alone():
    written = [f"{path.relative_to(REPO)}:{number}" for name, path in MODULES.items()
               if not name.endswith("isa.targets") and name.startswith("mlir_tile.")
               and not name.startswith(("mlir_tile.passes", "mlir_tile.dialect"))
               for number, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bsm_\d\d", line)
               and '"sm_' in line]
    assert not written, written


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(REPO)): count for path in MODULES.values()
            if (count := len(path.read_text().splitlines())) > 600}
    assert not long, long


INDEX_ARITHMETIC = r"\barith\.(addi|subi|muli|divui|divsi|remui|remsi|maxui|minui|maxsi|minsi|index_cast|index_castui)\b"


def test_the_kernels_hold_no_raw_index_arithmetic():
    """Rows, tiles, stages and byte offsets in the kernels are tensors, the schedule's objects or index values
    with Python's operators (`builder.integers.Int`), never `arith` ops written by hand."""
    written = [f"{path.relative_to(REPO)}:{number}" for name, path in MODULES.items()
               if name.startswith("mlir_tile.kernels.")
               for number, line in enumerate(path.read_text().splitlines(), 1) if re.search(INDEX_ARITHMETIC, line)]
    assert not written, written
