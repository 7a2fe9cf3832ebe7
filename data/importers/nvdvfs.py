"""Importer for NV-DVFS-Benchmark: per-kernel average power and time over a core-clock sweep (V100, Quadro RTX 8000).

PATH is `shared/data/external/nv-dvfs-benchmark-v100-rtx8000` with `<gpu>-dvfs-{real,microbenchmark}.csv`.
One iteration is one kernel launch; `time` is nvprof's kernel time in milliseconds (PROVENANCE: unit not written,
magnitudes consistent with ms); energy = average board power x time. The settings files lock the core clock per row,
fix the memory clock and set power limits of 250 W (V100: the PCIe card's default; the SXM2's is 300 W, gpus.md)
and 260 W (RTX 8000). The CUDA-SDK and microbenchmark kernels are not transformer kernels: `kernel_list = none`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from joulecast.data.importers._common import find_files, read_csv
from joulecast.data.schema import conform

GPUS = {"v100": ("v100-pcie", 250.0), "rtx8000": ("quadro-rtx-8000", 260.0)}
COLUMNS = ("benchmark", "kernel", "argNo", "core_frequency", "memory_frequency", "average_power", "time")
NUMBERS = ("core_frequency", "memory_frequency", "average_power", "time")


def import_nvdvfs(path: str | Path) -> pd.DataFrame:
    """Read every `<gpu>-dvfs-<set>.csv` under PATH into the measurement schema."""
    frames = []
    for csv in find_files(Path(path), ("*-dvfs-real.csv", "*-dvfs-microbenchmark.csv"),
                          "shared/data/external/nv-dvfs-benchmark-v100-rtx8000"):
        token, _, kernel_set = csv.stem.partition("-dvfs-")
        if token not in GPUS:
            continue
        gpu, power_limit_w = GPUS[token]
        raw = read_csv(csv, COLUMNS, NUMBERS)
        time_s = raw["time"] / 1e3
        frames.append(pd.DataFrame(dict(
            measurement_id=[f"nvdvfs:{gpu}:{kernel_set}:{r.benchmark}:{r.kernel}:{r.argNo}:{r.core_frequency:g}MHz"
                            for r in raw.itertuples()],
            source="nvdvfs", provenance=[f"nv-dvfs-benchmark-v100-rtx8000/{csv.name} row {i + 2}"
                                         for i in range(len(raw))],
            kernel_list="none", model=raw["benchmark"] + ":" + raw["kernel"], model_family=raw["benchmark"],
            phase=kernel_set, batch=1, gpu=gpu, num_gpus=1, sm_clock_mhz=raw["core_frequency"],
            sm_clock_min_mhz=raw["core_frequency"], sm_clock_max_mhz=raw["core_frequency"],
            memory_clock_mhz=raw["memory_frequency"], power_limit_w=power_limit_w, iterations=1, repeats=1,
            time_s=time_s, energy_j=raw["average_power"] * time_s, power_w=raw["average_power"],
            method="power_samples",  # board power sampled every 100 ms (PROVENANCE)
        )))
    return conform(pd.concat(frames, ignore_index=True), f"import of {path}")
