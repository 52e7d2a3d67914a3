"""What the torch-side benchmarks share: the kernel modules and their PTX (the GPU host runs them from the
repository, without the compiler), timing calls with CUDA events, and profiling launches with ncu."""
from __future__ import annotations

import functools
import sys
from pathlib import Path


def library(runtime, folder: Path):
    """The kernels `build` wrote into `folder` (per chip, as the wheel ships them), for `runtime`'s device."""
    from mlir_tile.kernels.library import KernelLibrary

    return KernelLibrary(runtime, shipped=folder)


def flash_attention_4():
    """FlashAttention-4's `flash_attn_func` (q, k, v [batch, seq, heads, d]; its Hopper kernels on sm_90) where
    the folder `MLIR_TILE_FA4_SITE` names holds it (benchmarks/fa4_site.py), else None."""
    import os
    import site

    folder = os.environ.get("MLIR_TILE_FA4_SITE")
    if not folder:
        return None
    site.addsitedir(folder)
    from flash_attn.cute import flash_attn_func

    return flash_attn_func


SUSTAINED_WARMUP = 2.0  # seconds of all the calls back to back before timing: the chip at its loaded clock
ROUND_SECONDS = 0.025  # each call's share of a round: launches back to back for about this long


def sustained_interleaved(calls: dict, rounds: int = 15) -> tuple[dict, dict]:
    """Per call, the median over `rounds` of its time a launch, timed as a training loop issues work: every
    launch queued back to back on one stream with no synchronization, sleep or idle gap between them, rounds
    of all the calls taking turns (each round in its own shuffled order), each call's turn a run of launches
    lasting about ROUND_SECONDS between two CUDA events; after SUSTAINED_WARMUP seconds of the same, so that
    the chip runs at the clock it holds under this load, not an idle chip's boost. Returns (seconds a
    launch by name, the SM clock in MHz and the board's power in W while the rounds ran).

    Why shuffled: a turn runs at the clock the turn before it left (the power governor lags), so a fixed
    cyclic order, in which each call always follows the same one, biased the calls after a power-hungry one:
    one kernel timed under two names, after cuDNN and after a lighter kernel of ours, differed by 7-12%."""
    import random
    import time

    import torch

    names = list(calls)
    once = {}
    for name in names:  # each call's time alone, for its launches a turn
        calls[name]()
        torch.cuda.synchronize()
        begun = time.perf_counter()
        for _ in range(3):
            calls[name]()
        torch.cuda.synchronize()
        once[name] = (time.perf_counter() - begun) / 3
    launches = {name: max(2, round(ROUND_SECONDS / once[name])) for name in names}
    begun = time.perf_counter()
    while time.perf_counter() - begun < SUSTAINED_WARMUP:
        for name in names:
            for _ in range(launches[name]):
                calls[name]()
    events = []
    with _sampled_clock_and_power() as conditions:
        for round_ in range(rounds):
            for name in random.Random(round_).sample(names, len(names)):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(launches[name]):
                    calls[name]()
                end.record()
                events.append((name, start, end))
        torch.cuda.synchronize()
    times = {name: [] for name in names}
    for name, start, end in events:
        times[name].append(start.elapsed_time(end) / 1e3 / launches[name])
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}, conditions


class _sampled_clock_and_power:
    """nvidia-smi's SM clock and board power every 50 ms while the block runs: the medians of the middle half
    of the samples, into the dict the block is given."""

    def __enter__(self) -> dict:
        import subprocess

        self.sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                         "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        self.conditions = {}
        return self.conditions

    def __exit__(self, *failure) -> None:
        import statistics

        self.sampler.terminate()
        rows = [tuple(map(float, line.split(","))) for line in self.sampler.communicate()[0].splitlines() if "," in line]
        middle = rows[len(rows) // 4: max(len(rows) // 4 + 1, 3 * len(rows) // 4)]
        if middle:
            self.conditions.update({"SM MHz": statistics.median(r[0] for r in middle),
                                    "W": statistics.median(r[1] for r in middle), "samples": len(middle)})


def graph_microseconds(call, calls: int = 30, samples: int = 7) -> float:
    """A call's time in us as a CUDA graph of `calls` calls of it replays (an engine's decode step: the kernels'
    own, no host), the median of `samples` replays; `call` run once first (its plans made)."""
    import statistics

    import torch

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    start, end, times = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(samples):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(times)


def clock_and_power(work) -> dict:
    """`work()`'s TFLOP/s, with the SM clock (MHz) and the board's power (W) meanwhile: nvidia-smi sampled every
    50 ms, the median of the middle half of the samples (the H200 lowers its clock to stay under its power
    limit, so a rate is read beside the clock it ran at)."""
    with _sampled_clock_and_power() as conditions:
        rate = work()
    return {"TFLOP/s": round(rate, 1), **conditions}


SUSTAINED = 3.0  # seconds a workload of the `clocks` commands runs back to back


def sustained_rate(call, flop: float, seconds: float = SUSTAINED) -> float:
    """TFLOP/s of `call` (`flop` each) launched back to back for `seconds`, synchronizing every 10 calls."""
    import time

    import torch

    call()
    torch.cuda.synchronize()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            call()
        calls += 10
        torch.cuda.synchronize()
    return calls * flop / (time.perf_counter() - start) / 1e12


# what a main loop's shared-memory traffic and stalls are: instructions, wavefronts (128 B each), bank conflicts
# (this ncu counts no wavefronts of LDGSTS's shared writes of their own, but their conflicts) and the average
# warps stalled per issue, by reason (ncu's names)
PROFILE_METRICS = {
    "ldsm": "smsp__sass_inst_executed_op_ldsm.sum",
    "ldgsts": "smsp__sass_inst_executed_op_ldgsts.sum",
    "shared loads": "smsp__sass_inst_executed_op_shared_ld.sum",
    "shared stores": "smsp__sass_inst_executed_op_shared_st.sum",
    "load wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "store wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "ldgsts bank conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum",
    "load bank conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "shared pipe %": "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "tensor pipe %": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "wgmma pipe %": "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue active %": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "dram read bytes": "dram__bytes_read.sum",
    "duration ns": "gpu__time_duration.sum",
    "dram %": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "L2 hit %": "lts__t_sector_hit_rate.pct",
    **{f"stall {reason}": f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
       for reason in ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
                      "not_selected", "lg_throttle", "dispatch_stall", "selected")},
}


def profile_launches(argv: list[str], kernel_regex: str, launches: int) -> list[dict]:
    """PROFILE_METRICS of the first `launches` kernels matching `kernel_regex` that `argv` (a Python script
    and its arguments) runs, under ncu with the clocks left alone; metrics this ncu does not know are left out
    (and named under "unknown")."""
    import csv
    import io
    import subprocess

    known = _ncu_metric_names()
    metrics = {name: m for name, m in PROFILE_METRICS.items() if m.split(".")[0] in known}
    command = ["ncu", "--clock-control", "none", "--csv", "--kernel-name", f"regex:{kernel_regex}", "--launch-count",
               str(launches), "--metrics", ",".join(metrics.values()), sys.executable, *argv]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    by_launch: dict[int, dict] = {}
    names = {m: name for name, m in metrics.items()}
    for row in csv.DictReader(io.StringIO(output[output.index('"ID"'):])):
        value = row["Metric Value"].replace(",", "")
        entry = by_launch.setdefault(int(row["ID"]), {"kernel": row["Kernel Name"][:60]})
        try:
            entry[names[row["Metric Name"]]] = float(value)
        except ValueError:
            entry[names[row["Metric Name"]]] = value
    unknown = sorted(set(PROFILE_METRICS) - set(metrics))
    return [dict(entry, unknown=unknown) for _, entry in sorted(by_launch.items())]


@functools.cache
def _ncu_metric_names() -> frozenset:
    """The base metric names this ncu knows (asked once: each profiled launch would ask again)."""
    import subprocess

    return frozenset(subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True, check=True).stdout.split())
