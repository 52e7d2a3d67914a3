"""The bank-conflict model against the H200's counters: for each of many legal transfers (random ones, nested
and swizzled among them, the benchmark layouts and the synthesized ones of bench.py), a one-warp kernel that
does just that transfer; ncu counts the shared-memory wavefronts and the LDSM instructions, and their ratio must equal the model's.

    python benchmarks/banks_validation.py build DIR [CASES]     # needs MLIR
    ncu --csv --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__sass_inst_executed_op_ldsm.sum,\\
        l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__sass_inst_executed_op_stsm.sum \\
        python3 benchmarks/banks_validation.py launch DIR > DIR/ncu.csv          # on the GPU host
    python3 benchmarks/banks_validation.py compare DIR    # and its table into DIR/RESULTS.md
"""
from __future__ import annotations

import csv
import io
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python")]

LOAD_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
LOAD_INSTRUCTIONS = "smsp__sass_inst_executed_op_ldsm.sum"
STORE_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
FIXED = [("(4,8,4):(1,4@laneid,1@laneid)", layout) for layout in
         ("(4,8,4):(32,4,1)", "(4,8,4):(64,8,1)", "(4,8,4):(256,32,1)", "((2,2),8,4):((288,4),36,1)",
          "Sw<3,2,3> o ((2,2),8,4):((256,4),32,1)", "(4,8,4):(128,16,1)", "(4,8,4):(4,8,1)")]
FIXED.append(("(2,2,8,4):(8,2,4@laneid,1@laneid)", "(2,2,8,4):(128,8,16,1)"))


def cases(count: int, seed: int = 5) -> list[dict]:
    from mlir_tile.testing.random_transfers import random_transfer

    from bench import SYNTHESIS_CONFIGS

    found = [{"opcode": f"ldmatrix.sync.aligned.m8n8.x{_matrix_count(r)}.shared.b16", "registers": r, "shared": s}
             for r, s in FIXED]
    found += [{"opcode": c.opcode, "registers": c.registers, "shared": c.shared, "slots": c.slots, "name": c.name}
              for c in SYNTHESIS_CONFIGS]  # the layouts mlir_tile.tiling.synthesize picks: conflict-free on the chip too?
    rng = random.Random(seed)
    stores = 0
    while len(found) < count:
        case = random_transfer(rng)
        if case.scope == "warp" and (case.is_load or stores < count // 4):
            stores += not case.is_load
            found.append({"opcode": case.opcode, "registers": str(case.register_layout),
                          "shared": str(case.shared_layout), "slots": case.slots})
    return found


def _matrix_count(registers: str) -> int:
    from mlir_tile.algebra.layout import Layout

    return Layout.parse(registers).sizes[-3]


def build(directory: Path, count: int) -> None:
    from mlir import ir
    from mlir.dialects import arith

    from mlir_tile import contract
    from mlir_tile.models.banks import transfer_wavefronts
    from mlir_tile.builder import Kernel, transfer
    from mlir_tile.compiler.compile import compile_to_ptx
    from mlir_tile.algebra.layout import Layout

    directory.mkdir(parents=True, exist_ok=True)
    manifest = []
    for index, case in enumerate(cases(count)):
        registers, shared = Layout.parse(case["registers"]), Layout.parse(case["shared"])
        slots = case.get("slots") or (max(registers.offset(*c) for c in registers.coordinates()) + 1)
        words = -(-shared.cosize // 32) * 32
        with Kernel(f"case_{index}", [f"memref<32x{slots}xi32>"], context=ir.Context()) as k:
            (out,) = k.arguments
            sm = k.shared("sm", words, alignment=max(128, contract.aligned_for(shared)))
            regs = k.registers(slots)
            if case["opcode"].startswith("ldmatrix"):
                transfer(case["opcode"], regs, sm, dst_layout=registers, src_layout=shared)
                for slot in range(slots):
                    k.store(k.load(regs, [slot]), out, [k.lane_id(), slot])
            else:  # stores: registers from the lane, then one word read back so that the stores stay
                lane = k.lane_id()
                for slot in range(slots):
                    k.store(arith.index_cast(ir.IntegerType.get_signless(32), lane), regs, [slot])
                transfer(case["opcode"], sm, regs, dst_layout=shared, src_layout=registers)
                k.barrier()
                k.store(k.load(sm, [lane]), out, [lane, 0])
        checked = contract.verdict(contract.Query.of_layouts(case["opcode"], registers, shared, register_slots=slots, shared_words=words,
                                           base_alignment=max(128, contract.aligned_for(shared)))).require()
        model = transfer_wavefronts(checked)
        (directory / f"case_{index}.ptx").write_text(compile_to_ptx(k.module))
        manifest.append({**case, "index": index, "slots": slots, "predicted_per_instruction": model.total / model.instructions,
                         "instructions": model.instructions, "minimum": model.minimum})
    (directory / "cases.json").write_text(json.dumps(manifest, indent=1))


def launch(directory: Path) -> None:
    import numpy as np

    from mlir_tile.runtime import Runtime

    with Runtime() as runtime:
        for case in json.loads((directory / "cases.json").read_text()):
            module = runtime.load_ptx((directory / f"case_{case['index']}.ptx").read_text(), name=f"case_{case['index']}")
            module.launch(f"case_{case['index']}", [np.zeros((32, case["slots"]), np.uint32)], grid=1, block=32)


def compare(directory: Path) -> None:
    text = (directory / "ncu.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"'):])))
    measured: dict = {}
    for row in rows:
        text = row["Metric Value"].replace(",", "")
        value = float(text) if text != "n/a" else None  # the H200 has no STSM instruction counter
        measured.setdefault(row["Kernel Name"], {})[row["Metric Name"]] = value
    cases_ = json.loads((directory / "cases.json").read_text())
    table, equal = [], 0
    for case in cases_:
        counters = measured[f"case_{case['index']}"]
        if case["opcode"].startswith("ldmatrix"):
            ratio = counters[LOAD_WAVEFRONTS] / counters[LOAD_INSTRUCTIONS]
        else:  # no STSM instruction counter: divide by the instructions the kernel issues (one warp, known)
            ratio = counters[STORE_WAVEFRONTS] / case["instructions"]
        same = abs(ratio - case["predicted_per_instruction"]) < 1e-9
        equal += same
        parts = case["opcode"].split(".")
        table.append({"shared": case["shared"], "opcode": ".".join(parts[:1] + parts[4:-2]),  # ldmatrix.x4.trans
                      "registers": case["registers"], "name": case.get("name", ""), "instructions": case["instructions"],
                      "predicted": case["predicted_per_instruction"], "measured": ratio, "equal": same})
    (directory / "comparison.json").write_text(json.dumps(table, indent=1))
    for row in table:
        print(f"{row['opcode']} {row['shared']:45} predicted {row['predicted']:6.2f} measured {row['measured']:6.2f} {'' if row['equal'] else 'DIFFERENT'}")
    summary = f"{equal} of {len(table)} layouts: predicted wavefronts per instruction equal the counters"
    print(summary)
    from bench import replace_sections

    replace_sections(directory, None, {"The bank-conflict model, layout by layout (issue 14, part 1)": [
        "", f"`benchmarks/banks_validation.py` ({len(table)} one-warp kernels, ncu on the H200): **{summary}**. "
        "Wavefronts per instruction: predicted by `mlir_tile.models.banks`, measured = the load (store) wavefront counter "
        "over the LDSM count (the kernel's known STSM count). Synthesized = a layout of the synthesis table.", "",
        "| transfer | shared layout | registers | instructions | predicted | measured | equal |", "|---|---|---|---|---|---|---|",
        *map(_markdown_row, table)]})


def _markdown_row(row: dict) -> str:
    transfer = f"{row['opcode']} (synthesized: {row['name']})" if row["name"] else row["opcode"]
    return (f"| {transfer} | `{row['shared']}` | `{row['registers']}` | {row['instructions']} | {row['predicted']:g} | "
            f"{row['measured']:g} | {'yes' if row['equal'] else 'NO'} |")


def main() -> None:
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "build":
        build(directory, int(sys.argv[3]) if len(sys.argv) > 3 else 64)
    elif command == "launch":
        launch(directory)
    elif command == "compare":
        compare(directory)
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
