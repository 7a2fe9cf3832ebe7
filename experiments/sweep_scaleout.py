"""A sweep of 1,000,000 configurations in this process against a LocalCluster of two workers on 127.0.0.1: wall time
(what scale-out buys), this process's CPU time (what it keeps for itself), configurations a second, and whether both
give the same points. Physics estimates (the hybrid's trees would take minutes here). Usage:
python experiments/sweep_scaleout.py [--configurations N]"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from joulecast.data.executors import executor
from joulecast.estimator.sweep import grid, sweep


def configurations(n: int) -> pd.DataFrame:
    """llama-3-8b prefill over five GPUs, four dtypes, batches 1-500 and 100 lengths (64-6,400 tokens)."""
    batches = max(1, n // (5 * 4 * 100))
    configs, skipped = grid("llama-3-8b", "prefill", gpus=["a10", "a100-pcie-40gb", "h100-sxm", "h200", "l40s"],
                            batches=list(range(1, batches + 1)), seqs=list(range(64, 6401, 64)),
                            dtypes=["bf16", "fp16", "fp32", "tf32"])
    assert not skipped
    return configs


def timed(configs: pd.DataFrame, scheduler: str | None) -> tuple[pd.DataFrame, float, float, str]:
    with executor(scheduler, workers=2 if scheduler == "local" else None) as run:  # in-process takes no workers
        wall, cpu = time.perf_counter(), time.process_time()
        result = sweep(configs, estimator="physics", run=run)
        return result.points, time.perf_counter() - wall, time.process_time() - cpu, run.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configurations", type=int, default=1_000_000)
    configs = configurations(parser.parse_args().configurations)
    rows = {}
    for scheduler in (None, "local"):
        points, wall, cpu, name = timed(configs, scheduler)
        rows[name] = points
        print(f"{name:<28} {len(configs):>10,} configurations: {wall:7.1f} s wall ({len(configs) / wall:>8,.0f} a "
              f"second), {cpu:6.1f} s CPU in this process")
    here, there = rows.values()
    same = here.equals(there)
    print(f"the same points both ways: {same}" + ("" if same else
          f" (largest relative difference in energy {np.max(np.abs(there['energy_j'] / here['energy_j'] - 1)):.2e})"))


if __name__ == "__main__":
    main()
