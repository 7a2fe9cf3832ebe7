"""Importer for the Zeus (NSDI'23) trace: one training epoch's time and average power per (power limit x batch size).

PATH is `shared/data/external/zeus-nsdi23-powerlimit`, read through its verbatim `summary_power_<gpu>.csv` files.
One iteration is one epoch; energy = time x average power (the trace records the two). The GPUs (A40, P100,
Quadro RTX 6000, V100) keep the file's token as their name: the trace gives no exact SKU (only `a40` names a catalog
GPU). The rows carry no workload reference (`kernel_list = none`), so no residual trains on them;
`experiments/zeus_power_limits.py` scores the V100's and the A40's BERT-base epochs through `train_run` instead.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from joulecast.data.importers._common import find_files, read_csv
from joulecast.data.schema import conform

COLUMNS = ("dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch", "average_power")
NUMBERS = ("batch_size", "power_limit", "time_per_epoch", "average_power")


def import_zeus(path: str | Path) -> pd.DataFrame:
    """Read every `summary_power_<gpu>.csv` under PATH into the measurement schema."""
    frames = []
    for csv in find_files(Path(path), ("summary_power_*.csv",), "shared/data/external/zeus-nsdi23-powerlimit"):
        gpu = csv.stem.removeprefix("summary_power_")
        raw = read_csv(csv, COLUMNS, NUMBERS)
        frames.append(pd.DataFrame(dict(
            measurement_id=[f"zeus:{gpu}:{r.dataset}:{r.network}:bs{r.batch_size}:{r.optimizer}:pl{r.power_limit}"
                            for r in raw.itertuples()],
            source="zeus", provenance=[f"zeus-nsdi23-powerlimit/{csv.name} row {i + 2}" for i in range(len(raw))],
            kernel_list="none", model=raw["network"] + "/" + raw["dataset"], model_family=raw["network"],
            phase="training", batch=raw["batch_size"], gpu=gpu, num_gpus=1, power_limit_w=raw["power_limit"],
            iterations=1, repeats=1, time_s=raw["time_per_epoch"],
            energy_j=raw["time_per_epoch"] * raw["average_power"], power_w=raw["average_power"],
            method="power_samples",  # Zeus polls NVML power (these GPUs predate the energy counter)
        )))
    return conform(pd.concat(frames, ignore_index=True), f"import of {path}")
