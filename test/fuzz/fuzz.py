"""The fuzzer: seeded malformed and unusual inputs through tile-opt and tile-translate, and random programs
through the Python builder, counting what a compiler must never do.

    python test/fuzz/fuzz.py --inputs 10000 --seed 1                       # the text channel's long run
    python test/fuzz/fuzz.py --channel builder --inputs 20000 --seed 2 --jobs 2 --timeout 60  # the builder's
    python test/fuzz/fuzz.py --inputs 150 --seed 7 --report r.json

The builder channel (builder_programs.py) builds random programs that call every public builder call with
plausible, junk and misplaced arguments (values of another kernel, of loops and branches that have ended)
and compiles what the builder accepted; it counts crash and hang as below, and:

- bindings exception: an exception other than BuilderError / ContractError escaped a builder call;
- accepted then invalid: compile_to_ptx or nvJitLink rejected a program the builder accepted.

The text channel:

Each input is a mutation of a real one (every .mlir under test/ and examples/): numbers swapped for extreme
ones, strings for odd ones (quotes, newlines, non-ASCII), layouts, opcodes, scopes, chips and PTX features
replaced, lines deleted or repeated, ops wrapped in thread- or warp-dependent control flow, deep nesting, several
gpu.modules, second (older or newer) NVVM targets and ROCDL/XeVM ones, raw NVVM matrix, mma and async-copy
instructions, gpu.launch bodies using values from outside and other block sizes, register storage with zero
or odd strides. A worker process runs the drivers in-process on each; the run counts, per class:

- crash: the worker died (an abort or a segfault; it is restarted);
- hang: no answer within the timeout (killed, restarted);
- traceback / internal error: a Python traceback or "internal error" in the output;
- unlocated: an error line without a file:line:col (or the pass pipeline, or the input file) in front;
- bad exit: an exit status other than 0 or 1;
- unassembled: tile-translate produced PTX (so every tile op passed the verifier) that nvJitLink rejects.

Exit status 1 when any class is non-zero. `test_fuzz.py` runs a short seeded run in CI.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")
CLASSES = ("crash", "hang", "traceback", "internal error", "unlocated", "bad exit", "unassembled")
BUILDER_CLASSES = ("crash", "hang", "bindings exception", "accepted then invalid")

EXTREME_NUMBERS = ["0", "-1", "1", "3", "7", "-32", "2147483647", "2147483648", "4294967296", "-2147483649",
                   "9223372036854775807", "99999999999999999999", "1073741824", "65536", "255", "256", "1024",
                   "1025", "48", "8589934592"]
ODD_STRINGS = ['""', '"\\n"', '"a b"', '"\\22"', '"üml"', '"ldmatrix.sync.aligned.m8n8.x4.shared.b16\\n"',
               '"sm_99"', '"thread"', '"cta"', '"warpgroup"', '"%"', '"' + "x" * 300 + '"']
OPCODES = ["ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16",
           "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x3.shared.b16",
           "ldmatrix.sync.aligned.m16n16.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 ", "ld"]
LAYOUT_PIECES = ["(4,8,4):(1,4@laneid,1@laneid)", "(4,8,4):(32,4,1)", "(2,2,8,4):(8,2,4@laneid,1@laneid)",
                 "(4,4,8,4):(1@warpid,1,4@laneid,1@laneid)", "(1073741824,8,4):(1,4@laneid,1@laneid)",
                 "(4,8,4):(1073741824,4,1)", "(4,8,4):(-32,4,1)", "((2,2),8,4):((1,2),4@laneid,1@laneid)",
                 "Sw<3,2,3> o (8,32):(32,1)", "(4,8,4):(1,4@lane,1@laneid)", "(" * 50, "(0,8,4):(1,1,1)",
                 "(64,4,8,4):(4,1,4@laneid,1@laneid)", "(4,8,4):(32,4,1@warpid)", "(4,8,4):(0,4,1)",
                 "(4,8,4):(0,4@laneid,1@laneid)", "(1,8,4):(0,4@laneid,1@laneid)", "(1,8,4):(0,4,1)"]
CHIPS = ["sm_50", "sm_70", "sm_75", "sm_80", "sm_90", "sm_90a", "sm_99", "sm_9", "", "gfx90a", "sm_100f"]
# Raw NVVM instructions that LLVM stops the process on below their chip (tile-check-nvptx must find each).
NVVM_OPS = [
    "nvvm.stmatrix %fz_p, %fz_v {layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>, "
    "eltType = #nvvm.ld_st_matrix_elt_type<b16>} : !llvm.ptr<3>, i32",
    "%fz_r = nvvm.ldmatrix %fz_p {num = 1 : i32, layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, "
    "n = 8>, eltType = #nvvm.ld_st_matrix_elt_type<b16>} : (!llvm.ptr<3>) -> i32",
    "%fz_r = nvvm.ldmatrix %fz_p {num = 1 : i32, layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 16, "
    "n = 16>, eltType = #nvvm.ld_st_matrix_elt_type<b8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>",
    "nvvm.stmatrix %fz_p, %fz_v {layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 16, n = 8>, "
    "eltType = #nvvm.ld_st_matrix_elt_type<b8>} : !llvm.ptr<3>, i32",
    "nvvm.cp.async.shared.global %fz_p, %fz_g, 16, cache = cg : !llvm.ptr<3>, !llvm.ptr<1>",
    "nvvm.cp.async.commit.group\nnvvm.cp.async.wait.group 0",
    "%fz_r = nvvm.mma.sync A[%fz_h, %fz_h, %fz_h, %fz_h] B[%fz_h, %fz_h] C[%fz_f, %fz_f, %fz_f, %fz_f] {layoutA = "
    "#nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : "
    "(vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>\n"
    "%fz_e = llvm.extractvalue %fz_r[0] : !llvm.struct<(f32, f32, f32, f32)>\nllvm.store %fz_e, %fz_g : f32, !llvm.ptr<1>",
    "%fz_r = nvvm.mma.sync A[%fz_h, %fz_h] B[%fz_h] C[%fz_f, %fz_f, %fz_f, %fz_f] {layoutA = #nvvm.mma_layout<row>, "
    "layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 8>} : (vector<2xf16>, vector<2xf16>, f32) "
    "-> !llvm.struct<(f32, f32, f32, f32)>\n%fz_e = llvm.extractvalue %fz_r[0] : !llvm.struct<(f32, f32, f32, f32)>\n"
    "llvm.store %fz_e, %fz_g : f32, !llvm.ptr<1>",
]
NVVM_VALUES = ("%fz_p = llvm.mlir.addressof @fz_sm : !llvm.ptr<3>\n%fz_g = llvm.mlir.zero : !llvm.ptr<1>\n"
               "%fz_v = arith.constant 7 : i32\n%fz_f = arith.constant 1.0 : f32\n"
               "%fz_h = arith.constant dense<1.0> : vector<2xf16>\n")
NVVM_GLOBAL = 'llvm.mlir.global internal @fz_sm() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<256 x i32>\n'
WRAPPERS = [
    ("%fz_t = gpu.thread_id x\n%fz_c = arith.constant 4 : index\n%fz_p = arith.cmpi ult, %fz_t, %fz_c : index\n"
     "scf.if %fz_p {\n", "}\n"),
    ("%fz_l = gpu.lane_id\nscf.index_switch %fz_l\ncase 1 {\n", "scf.yield\n}\ndefault {\n}\n"),
    ("scf.execute_region {\n", "scf.yield\n}\n"),
    ("%fz_0 = arith.constant 0 : index\n%fz_1 = arith.constant 1 : index\n%fz_n = gpu.lane_id\n"
     "scf.for %fz_i = %fz_0 to %fz_n step %fz_1 {\n", "}\n"),
    ('"fuzz.region"() ({\n', "}) : () -> ()\n"),
    ("affine.for %fz_a = 0 to 3 {\n", "}\n"),
    # branches that differ between warps only: a scope "warp" transfer may sit there, a "cta" one may not
    ("%fz_wt = gpu.thread_id x\n%fz_wc = arith.constant 32 : index\n%fz_ww = arith.divui %fz_wt, %fz_wc : index\n"
     "%fz_wz = arith.constant 0 : index\n%fz_wp = arith.cmpi eq, %fz_ww, %fz_wz : index\nscf.if %fz_wp {\n", "}\n"),
    ("%fz_st = gpu.thread_id x\n%fz_s5 = arith.constant 5 : index\n%fz_sw = arith.shrui %fz_st, %fz_s5 : index\n"
     "%fz_s0 = arith.constant 0 : index\n%fz_s1 = arith.constant 1 : index\nscf.for %fz_si = %fz_s0 to %fz_sw step %fz_s1 {\n",
     "}\n"),
    ("%fz_gs = gpu.subgroup_id : index\n%fz_g0 = arith.constant 0 : index\n%fz_gp = arith.cmpi eq, %fz_gs, %fz_g0 : index\n"
     "scf.if %fz_gp {\n", "}\n"),
]


def seeds() -> list[str]:
    files = sorted(p for p in list((REPO / "test").rglob("*.mlir")) + list((REPO / "examples").glob("*.mlir"))
                   if "Output" not in p.parts)
    texts = []
    for path in files:
        text = path.read_text(errors="replace")
        texts += [part for part in re.split(r"^// -----\s*$", text, flags=re.M) if "gpu.module" in part or "func" in part]
    return texts


def _replace_random(rng: random.Random, text: str, pattern: str, choices) -> str:
    matches = list(re.finditer(pattern, text))
    if not matches:
        return text
    match = rng.choice(matches)
    replacement = rng.choice(choices) if isinstance(choices, list) else choices(match)
    return text[: match.start()] + replacement + text[match.end():]


def mutate(rng: random.Random, text: str) -> str:
    """One to four random mutations of `text`."""
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(18)
        lines = text.split("\n")
        if kind == 0:
            text = _replace_random(rng, text, r"(?<![\w%@#.])-?\d+(?![\w.])", EXTREME_NUMBERS)
        elif kind == 1:
            text = _replace_random(rng, text, r'"[^"\n]*"', ODD_STRINGS)
        elif kind == 2:
            text = _replace_random(rng, text, r'#tile\.layout<"[^"]*">',
                                   lambda m: f'#tile.layout<"{rng.choice(LAYOUT_PIECES)}">')
        elif kind == 3:
            text = _replace_random(rng, text, r'opcode = "[^"]*"', lambda m: f'opcode = "{rng.choice(OPCODES)}"')
        elif kind == 4:
            text = _replace_random(rng, text, r'chip = "[^"]*"', lambda m: f'chip = "{rng.choice(CHIPS)}"')
            if rng.random() < 0.5:
                text = text.replace('#nvvm.target<chip', f'#nvvm.target<features = "+ptx{rng.choice([60, 78, 80, 88, 90, 91, 999])}", chip', 1)
            if rng.random() < 0.2:
                text = text.replace("#nvvm.target<", rng.choice(["#rocdl.target<", "#xevm.target<", "#nvvm.target<O = 7, "]), 1)
        elif kind == 5 and len(lines) > 2:
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif kind == 6 and len(lines) > 2:
            position = rng.randrange(len(lines))
            lines.insert(position, lines[position])
            text = "\n".join(lines)
        elif kind == 7:
            starts = [i for i, line in enumerate(lines) if '"tile.matrix_transfer"' in line]
            if starts:
                start = rng.choice(starts)
                end = next((i for i in range(start, len(lines)) if "->" in lines[i] and ")" in lines[i]), start)
                head, tail = rng.choice(WRAPPERS)
                lines[start:end + 1] = [head + "\n".join(lines[start:end + 1]) + "\n" + tail]
                text = "\n".join(lines)
        elif kind == 8:
            depth = rng.choice([10, 200, 1200, 5000])
            text = _replace_random(rng, text, r"gpu\.return", lambda m: "%fz_b = arith.constant true\n" +
                                   "scf.if %fz_b {\n" * depth + "}\n" * depth + "gpu.return")
        elif kind == 9:
            text = text + "\n" + text.replace("gpu.module @", "gpu.module @fz_")
        elif kind == 10:
            text = _replace_random(rng, text, r"known_block_size = array<i32: [^>]*>",
                                   lambda m: f"known_block_size = array<i32: {rng.choice(EXTREME_NUMBERS)}, "
                                             f"{rng.choice(['1', '0', '2', '64'])}, 1>")
        elif kind == 11:
            text = _replace_random(rng, text, r"memref<[^<>]*(?:<[^<>]*>[^<>]*)*>",
                                   lambda m: m.group(0).replace("xi32", rng.choice(["xsi32", "xf16", "xi64", "xf32", "xindex"]), 1)
                                   .replace(", 3>", rng.choice([", 3>", ", 5>", ", 1>", ">", ", 7>"]), 1))
        elif kind == 12:
            text = _replace_random(rng, text, r"alignment = \d+", lambda m: f"alignment = {rng.choice(['1', '8', '4294967296', '8589934592', '16'])}")
        elif kind == 13:
            position = rng.randrange(len(text) + 1)
            text = text[:position] + rng.choice(["{", "}", "(", ")", '"', "\x00", "é", "%", "^bb9:", "\n// -----\n"]) + text[position:]
        elif kind == 14:  # a second (older or newer) target: each one is compiled
            second = rng.choice(["sm_75", "sm_80", "sm_89", "sm_90", "sm_100a", "sm_120"])
            text = _replace_random(rng, text, r"#nvvm\.target<[^>]*>",
                                   lambda m: m.group(0) + f', #nvvm.target<chip = "{second}">')
        elif kind == 15:  # raw NVVM instructions beside (or instead of) the tile ops
            text = _replace_random(rng, text, r"gpu\.return", lambda m: NVVM_VALUES + rng.choice(NVVM_OPS) + "\ngpu.return")
            text = _replace_random(rng, text, r"gpu\.module @\w+[^{]*\{\n", lambda m: m.group(0) + NVVM_GLOBAL)
        elif kind == 16:  # a value of a gpu.launch body defined outside it, or a launch of another block size
            launch = next((i for i, line in enumerate(lines) if "gpu.launch" in line), None)
            inside = [i for i, line in enumerate(lines) if launch is not None and i > launch and
                      re.search(r"= (memref\.alloca|memref\.assume_alignment|arith\.constant)", line)]
            if inside:
                moved = lines.pop(rng.choice(inside))
                lines.insert(launch, moved)
                text = "\n".join(lines)
            text = _replace_random(rng, text, r"%c32 = arith\.constant 32", lambda m: f"%c32 = arith.constant {rng.choice(['16', '64', '128', '2048'])}")
        elif kind == 17:  # storage with zero or odd strides (every use of the type changed with it)
            found = re.findall(r"memref<\d+xi32, 5>", text)
            if found:
                old = rng.choice(found)
                extent = old[len("memref<"):old.index("x")]
                text = text.replace(old, rng.choice([f"memref<{extent}xi32, strided<[0]>, 5>",
                                                     f"memref<{extent}xi32, strided<[2]>, 5>",
                                                     f"memref<{extent}xi32, strided<[1], offset: 4>, 5>"]))
    return text


def modes(rng: random.Random) -> list[str]:
    """The driver command line for one input: which tool and pipeline."""
    return rng.choice([
        ["tile-opt", "--tile-verify-matrix-transfer"],
        ["tile-opt", "--tile-to-nvvm"],
        ["tile-opt", "--split-input-file", "--tile-to-nvvm"],
        ["tile-opt", "--split-input-file", "--verify-diagnostics", "--tile-verify-matrix-transfer"],
        ["tile-opt", "--pass-pipeline=builtin.module(gpu.module(tile-lower-matrix-transfer), canonicalize)"],
        ["tile-translate", "--mlir-to-ptx"],
        ["tile-translate", "--mlir-to-ptx"],
        ["tile-translate", "--split-input-file", "--mlir-to-ptx"],
    ])


_LOCATED = re.compile(r"^(?:\S+:\d+:\d+|<pass pipeline>|\S+\.mlir|<stdin>|tile-opt|tile-translate): (?:error|warning)")


def judge(answer: dict, output_file: Path) -> list[str]:
    """The classes an answer falls in (none for a good one)."""
    found = []
    output = answer["output"]
    if "Traceback (most recent call last)" in output:
        found.append("traceback")
    if "internal error" in output:
        found.append("internal error")
    if answer["rc"] not in (0, 1):
        found.append("bad exit")
    for line in output.splitlines():
        if re.search(r"\berror:", line) and not _LOCATED.match(line) and not line.startswith(" "):
            found.append("unlocated")
            break
    if answer.get("unassembled"):
        found.append("unassembled")
    return found


class Worker:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.process = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def ask(self, request: dict) -> dict | str:
        """The worker's answer, or "crash" / "hang"."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        if not ready:
            self.process.kill()
            self.process.wait()
            self.process = None
            return "hang"
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            self.process = None
            return "crash"
        return json.loads(line)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


def _text_request(rng: random.Random, corpus: list[str], scratch: Path, index: int) -> tuple[dict, str]:
    text = mutate(rng, rng.choice(corpus))
    path = scratch / f"input_{index}.mlir"
    path.write_text(text, errors="surrogateescape")
    return {"path": str(path), "command": modes(rng)}, text


def judge_program(answer: dict) -> list[str]:
    """The builder channel's classes of an answer."""
    return (["bindings exception"] if answer["escaped"] else []) + (["accepted then invalid"] if answer["invalid"] else [])


def run(inputs: int, seed: int, timeout: float = 10.0, keep: Path | None = None, channel: str = "text",
        jobs: int = 1) -> dict:
    """`inputs` inputs of one channel, through `jobs` worker processes; the counts per class and examples.
    Input i is the seed's i-th draw whatever the jobs (drawn in order, when a worker is free)."""
    rng = random.Random(seed)
    corpus = seeds() if channel == "text" else []
    classes = CLASSES if channel == "text" else BUILDER_CLASSES
    counts = {name: 0 for name in classes}
    examples: dict[str, list] = {name: [] for name in classes}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tile-fuzz-") as scratch:
        def draw(index: int) -> tuple[dict, str | None]:
            if channel == "text":
                return _text_request(rng, corpus, Path(scratch), index)
            return {"program": seed * 1_000_003 + index}, None

        def record(index: int, request: dict, text: str | None, found) -> None:
            classes_found = [found] if isinstance(found, str) else (
                judge(found, Path(request["path"])) if channel == "text" else judge_program(found))
            for name in classes_found:
                counts[name] += 1
                if len(examples[name]) < 5:
                    examples[name].append({"request": request, "input": (text or "")[:4000],
                                           "answer": found if isinstance(found, str) else
                                           {k: (v[-2000:] if isinstance(v, str) else v) for k, v in found.items()}})
                if keep is not None and text is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / f"{name.replace(' ', '_')}_{index}.mlir").write_text(text)
            if "path" in request:
                Path(request["path"]).unlink()

        _in_workers(draw, record, inputs, jobs, timeout)
    return {"channel": channel, "inputs": inputs, "seed": seed, "seconds": round(time.time() - started, 1),
            "counts": counts, "examples": {k: v for k, v in examples.items() if v}}


def _in_workers(draw, record, inputs: int, jobs: int, timeout: float) -> None:
    """Each input drawn (in order), asked of a worker and recorded, `jobs` worker processes at once (one thread
    each); drawing and recording hold a lock, asking does not."""
    indices = iter(range(inputs))
    lock = threading.Lock()

    def drain() -> None:
        worker = Worker(timeout)
        while True:
            with lock:
                index = next(indices, None)
                if index is None:
                    break
                request, text = draw(index)
            found = worker.ask(request)
            with lock:
                record(index, request, text, found)
        worker.stop()

    threads = [threading.Thread(target=drain) for _ in range(max(1, jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds an input may take")
    parser.add_argument("--report", help="write the counts and examples as JSON here")
    parser.add_argument("--keep", help="keep every failing input in this folder")
    parser.add_argument("--channel", choices=("text", "builder"), default="text",
                        help="text: inputs through the tools; builder: random programs through the builder")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    arguments = parser.parse_args()
    result = run(arguments.inputs, arguments.seed, arguments.timeout, Path(arguments.keep) if arguments.keep else None,
                 arguments.channel, arguments.jobs)
    if arguments.report:
        Path(arguments.report).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("channel", "inputs", "seed", "seconds", "counts")}))
    return 1 if any(result["counts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
