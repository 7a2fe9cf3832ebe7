"""Physics' power terms on a V100-PCIe's own DVFS sweep (NV-DVFS-Benchmark): does the catalog's V100-PCIe-16GB (its
idle a posted reading, its budget the card's 250 W) give that card's measured power?

    python experiments/volta_power.py [--json]

Rows: `../shared/data/external/nv-dvfs-benchmark-v100-rtx8000/v100-dvfs-real.csv`: 20 CUDA-SDK and Rodinia
applications, one kernel each, at 10 locked core clocks (405-1,380 MHz; memory 877 MHz; the 250 W default limit),
with their mean board power and DCGM activity ratios. No row is a workload physics can lower (the kernels are the
applications' own), so physics' power terms (`features.power.power_w`) are read with the measured activities in
place of physics' utilisations: FP32/FP64/FP16 pipe activity for the FMA term, SM-active for the SM and hot-static
terms, DRAM activity x bandwidth for the traffic (no L2 counter: that term is left out, so a shortfall is expected on
cache-heavy kernels). Printed per clock band for the card's posted idle and for others in its place (the V100-SXM2's
39.8 W, which stood in for it before 2026-12-04).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import numpy as np
import pandas as pd
from shared_data import EXTERNAL

from joulecast.data.gpus import IDLE_MAX_CLOCK_RATIO
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.features.power import power_w

DATA = EXTERNAL / "nv-dvfs-benchmark-v100-rtx8000" / "v100-dvfs-real.csv"
GPU = "v100-pcie-16gb"
IDLES_W = (24.0, 30.0, 39.8)   # the catalog's posted reading, between, the SXM2's
BANDS_MHZ = ((400, 800), (800, 1100), (1100, 1400))


def predicted_power_w(d: pd.DataFrame, idle_w: float | None = None) -> np.ndarray:
    """Physics' power terms for each row at its clock, with its measured activities (`idle_w`: the card's idle at
    its lowest clock in place of the catalog's, its idle at the maximum clock the catalog's ratio of it)."""
    spec = lookup_gpu(GPU)
    if idle_w is not None:
        spec = dataclasses.replace(spec, idle_power_w=idle_w, idle_power_max_clock_w=IDLE_MAX_CLOCK_RATIO * idle_w)
    clock = d["core_frequency"].to_numpy(float)
    pipes = (d["FP32A"] + 2 * d["FP64A"] + d["FP16A"]).to_numpy(float)  # FP64 at half the FP32 rate a pipe-cycle
    none = np.zeros(len(d))  # no tensor-core work (TENSO is 0 in every row), no L2 counter
    return power_w(spec, clock, none, pipes, none, d["SMACT"].to_numpy(float),
                   d["DRAMA"].to_numpy(float) * spec.memory_bandwidth_gbs * 1e9)


def table(d: pd.DataFrame) -> pd.DataFrame:
    """Per idle and clock band (and all rows): rows, power MAPE and bias (%)."""
    measured, clock = d["average_power"].to_numpy(float), d["core_frequency"].to_numpy(float)
    out = []
    for idle in IDLES_W:
        error = predicted_power_w(d, idle) / measured - 1
        for low, high in ((0, 10_000), *BANDS_MHZ):
            keep = (clock >= low) & (clock < high)
            out.append(dict(idle_w=idle, band=("all" if high == 10_000 else f"{low}-{high} MHz"),
                            rows=int(keep.sum()), power_mape=100 * float(np.abs(error[keep]).mean()),
                            power_bias=100 * float(error[keep].mean())))
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    frame = table(pd.read_csv(DATA))
    if args.json:
        print(json.dumps(frame.to_dict(orient="records"), indent=1))
        return 0
    print(f"{GPU}'s power terms on NV-DVFS-Benchmark's V100 rows (measured activities), MAPE and bias %, by the "
          f"idle at the lowest clock (the catalog's: {lookup_gpu(GPU).idle_power_w:g} W):")
    print(frame.pivot_table(index="band", columns="idle_w", values=["power_mape", "power_bias"], sort=False)
          .round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
