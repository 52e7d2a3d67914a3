"""GPU differential testing, run side (no MLIR): executes a bundle written by `mlir_tile.difftest` and
reports every mismatch against the reference model's expected outputs.

    python -m mlir_tile.testing.difftest_runner BUNDLE_DIR [--report report.json]

Exit status 0 when every case matches, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mlir_tile.runtime import Runtime


def run_bundle(directory: Path) -> dict:
    manifest = json.loads((directory / "manifest.json").read_text())
    arrays = np.load(directory / "arrays.npz")
    results = {"cases": 0, "passed": 0, "mismatches": []}
    with Runtime() as runtime:
        results["device"] = runtime.name
        for case in manifest["cases"]:
            index = case["index"]
            registers, shared = arrays[f"{index}_regs"], arrays[f"{index}_sm"]
            module = runtime.load_ptx((directory / case["ptx"]).read_text(), name=case["kernel"])
            _, _, registers_out, shared_out = module.launch(
                case["kernel"], [shared, registers, np.zeros_like(registers), np.zeros_like(shared)],
                grid=1, block=case["threads"])
            bad_registers = np.argwhere(registers_out != arrays[f"{index}_regs_expected"])
            bad_shared = np.argwhere(shared_out != arrays[f"{index}_sm_expected"])
            results["cases"] += 1
            if len(bad_registers) or len(bad_shared):
                results["mismatches"].append({**case, "register_mismatches": len(bad_registers),
                                              "first_register": bad_registers[:1].tolist(),
                                              "shared_mismatches": len(bad_shared),
                                              "first_shared": bad_shared[:1].tolist()})
            else:
                results["passed"] += 1
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--report")
    arguments = parser.parse_args()
    results = run_bundle(Path(arguments.bundle))
    for mismatch in results["mismatches"]:
        print(f"MISMATCH case {mismatch['index']}: {mismatch['opcode']} scope={mismatch['scope']} "
              f"dst={mismatch['dst_layout']} src={mismatch['src_layout']}: "
              f"{mismatch['register_mismatches']} register / {mismatch['shared_mismatches']} shared words differ")
    print(f"difftest on {results['device']}: {results['passed']} passed, {len(results['mismatches'])} failed")
    if arguments.report:
        Path(arguments.report).write_text(json.dumps(results, indent=1))
    return 0 if not results["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
