"""The fuzzer's worker: reads one JSON request a line and answers one JSON line. A text request ({"path",
"command"}) runs tile-opt or tile-translate in-process on the file; the answer is the exit status, everything
the run printed (file descriptors 1 and 2, so the C++ side's output is caught too) and, when tile-translate
made PTX, whether nvJitLink assembles it. A builder request ({"program": seed}) builds that random program
(builder_programs.run_program) and answers what escaped and whether it compiled. If a run kills the process,
the fuzzer sees it die and starts another worker."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from builder_programs import run_program
from mlir_tile.compiler.compile import ptx_chip
from mlir_tile.runtime.ptx import CompileError, cubin_of_ptx
from mlir_tile.tools import tile_opt, tile_translate

TOOLS = {"tile-opt": tile_opt.main, "tile-translate": tile_translate.main}


def run(request: dict, answers) -> dict:
    tool, *arguments = request["command"]
    scratch = Path(tempfile.mkdtemp(prefix="tile-fuzz-run-"))
    output = scratch / "out"
    arguments = arguments + [request["path"], "-o", str(output)]
    with open(scratch / "printed", "w+b") as printed:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(printed.fileno(), 1)
        os.dup2(printed.fileno(), 2)
        try:
            status = TOOLS[tool](arguments)
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException as error:  # noqa: BLE001 - the fuzzer counts what escapes the drivers
            print(f"Traceback (most recent call last): {type(error).__name__}: {error}", file=sys.stderr)
            status = 70
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
        printed.seek(0)
        text = printed.read().decode(errors="replace")
    answer = {"rc": status, "output": text}
    if tool == "tile-translate" and status == 0 and output.exists():
        for ptx in output.read_text().split(tile_translate.SEPARATOR):  # one text per gpu.module and target
            try:
                cubin_of_ptx(ptx, ptx_chip(ptx))
            except CompileError as error:
                answer["unassembled"] = str(error)[-2000:]
    for path in scratch.iterdir():
        path.unlink()
    scratch.rmdir()
    return answer


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.environ.setdefault("MLIR_TILE_NO_CACHE", "1")
    for line in sys.stdin:
        request = json.loads(line)
        answer = run_program(request["program"]) if "program" in request else run(request, answers)
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
