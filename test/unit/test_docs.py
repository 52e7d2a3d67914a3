"""Every code block of README.md and docs/*.md is run, so that none can rot. A block's kind is its info
string: `mlir` is verified by tile-verify-matrix-transfer; `python` blocks of a file run in order in one
process (`python gpu` ones only where there is a GPU); each line of an `sh` block runs in a scratch folder
that sees the repository's examples/, dialect/ and test/; a `console` block's `$ command` runs in the
repository and must print exactly the lines below it; `text` is a diagram or a grammar, not code."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlir_tile.compiler.diagnostics import PipelineFailure
from mlir_tile.compiler.pipeline import run_pipeline
from mlir_tile.tools.driver import Session

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
KINDS = {"mlir", "python", "sh", "console", "text"}
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def code_blocks():
    """(document, line, kind, info words, body) of every fenced block."""
    for document in DOCUMENTS:
        text = document.read_text()
        for match in _FENCE.finditer(text):
            words = match.group(1).split()
            line = text.count("\n", 0, match.start()) + 1
            yield document, line, words[0] if words else "", words[1:], match.group(2)


BLOCKS = list(code_blocks())


def blocks_of(kind):
    found = [b for b in BLOCKS if b[2] == kind]
    return pytest.mark.parametrize("block", found, ids=[f"{b[0].name}:{b[1]}" for b in found])


def environment():
    import mlir

    tools = [os.path.dirname(sys.executable), os.path.join(list(mlir.__path__)[0], "bin")]
    return {**os.environ, "PATH": os.pathsep.join(tools + [os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), str(REPO)])}


def test_every_block_says_what_it_is():
    untagged = [f"{b[0].name}:{b[1]}" for b in BLOCKS if b[2] not in KINDS]
    assert not untagged, f"blocks without a known kind ({', '.join(sorted(KINDS))}): {untagged}"
    assert {b[2] for b in BLOCKS} >= {"mlir", "python", "sh", "console"}


@blocks_of("mlir")
def test_mlir_block_verifies(block):
    document, line, _, _, body = block
    with Session() as session:
        try:
            run_pipeline(session.parse(body, f"{document.name}:{line}"), ["tile-verify-matrix-transfer"])
        except PipelineFailure as failure:
            pytest.fail(f"{document.name}:{line}: {failure}")


def test_the_readmes_ir_is_the_example_it_names():
    readme_ir = next(b[4] for b in BLOCKS if b[0].name == "README.md" and b[2] == "mlir")
    assert readme_ir == (REPO / "examples" / "spec_example.mlir").read_text()


@pytest.mark.parametrize("document", sorted({b[0] for b in BLOCKS if b[2] == "python"}), ids=lambda d: d.name)
def test_python_blocks_run(document, tmp_path):
    from mlir_tile.runtime import gpu_available

    with_gpu, _ = gpu_available()
    blocks = [b for b in BLOCKS if b[0] == document and b[2] == "python" and ("gpu" not in b[3] or with_gpu)]
    script = "\n".join(b[4] for b in blocks)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr


@blocks_of("sh")
def test_sh_block_runs(block, tmp_path):
    for folder in ("examples", "dialect", "test"):
        (tmp_path / folder).symlink_to(REPO / folder)
    for line in block[4].splitlines():
        command = line.strip()
        if not command or command.startswith("#"):
            continue
        if command.startswith("make "):
            continue  # `make demo` and `make test` are what CI itself runs
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment(), capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"


@blocks_of("console")
def test_console_block_prints_what_it_shows(block):
    lines = block[4].splitlines()
    assert lines and lines[0].startswith("$ "), "a console block starts with '$ command'"
    command, expected = lines[0][2:], lines[1:]
    result = subprocess.run(["bash", "-c", command], cwd=REPO, env=environment(), capture_output=True, text=True,
                            timeout=300)
    printed = (result.stdout + result.stderr).splitlines()
    assert [line.rstrip() for line in printed] == [line.rstrip() for line in expected]


def test_the_contract_in_docs_is_the_specification_formatted():
    shared = REPO.parent / "shared" / "spec" / "ldmatrix_stmatrix.md"
    if not shared.exists():
        pytest.skip(f"no {shared} beside this checkout to compare with")
    ours = [line for line in (REPO / "docs" / "ldmatrix_stmatrix.md").read_text().splitlines()
            if not line.startswith("> ")]  # the note on where the page comes from
    assert _words("\n".join(ours).replace("```text", "")) == _words(shared.read_text())[:-4]  # less the web page's
    # closing navigation: "ldmatrix / stmatrix", "Contents"


def _words(text: str) -> list[str]:
    """The words of a text without markdown's marks (headings, tables, code fences, dividers)."""
    return re.sub(r"[#|`]|---", " ", text).split()


def test_the_readme_and_the_makefile_state_how_many_kernels_the_wheel_ships():
    """The number `make wheel` builds, as the README and the Makefile state it, is the shipping list's."""
    from mlir_tile.kernels import ship

    shipped = sum(len(ship.kernels(chip)) for chip in ship.CHIPS)
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    assert re.search(rf"mlir_tile\.kernels\.ship`: {shipped} kernels", readme), shipped
    assert re.search(rf"into the package \({shipped},", makefile), shipped
