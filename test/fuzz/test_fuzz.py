"""The fuzzer's short seeded run, in CI: 300 malformed or unusual inputs through the drivers, and not one
crash, hang, traceback, internal error, unlocated error, odd exit status or accepted-but-unassembled PTX.
The long run is by hand: `python test/fuzz/fuzz.py --inputs 10000 --seed N`."""
import json

import fuzz


def test_short_seeded_fuzz_run_finds_nothing():
    result = fuzz.run(inputs=300, seed=7, timeout=60)
    assert not any(result["counts"].values()), json.dumps(result, indent=1)[:8000]
