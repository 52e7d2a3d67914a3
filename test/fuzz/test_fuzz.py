"""The fuzzer's short seeded runs, in CI: 300 malformed or unusual inputs through the drivers, and not one
crash, hang, traceback, internal error, unlocated error, odd exit status or accepted-but-unassembled PTX; 160
random builder programs, and not one crash, hang, exception of the bindings or accepted-then-invalid program.
The long runs are by hand: `python test/fuzz/fuzz.py --inputs 10000 --seed N` and
`python test/fuzz/fuzz.py --channel builder --inputs 20000 --seed N --jobs 2 --timeout 60`."""
import json

import fuzz


def test_short_seeded_fuzz_run_finds_nothing():
    result = fuzz.run(inputs=300, seed=7, timeout=60)
    assert not any(result["counts"].values()), json.dumps(result, indent=1)[:8000]


def test_short_seeded_builder_run_finds_nothing():
    result = fuzz.run(inputs=160, seed=7, timeout=60, channel="builder", jobs=2)  # (250: 12 s of the 300 make test has)
    assert result["counts"] == dict.fromkeys(fuzz.BUILDER_CLASSES, 0), json.dumps(result, indent=1)[:8000]
