"""How far physics misses a change of hardware: the reach a hypothetical GPU's interval takes for its change
(`joulecast.estimator.api.WHAT_IF_REACH`).

    python experiments/what_if_reach.py [--min-pairs N] [--json]

A what-if (`h100-sxm:memory_bandwidth_gbs*2`) reads physics' change on its base's learned level: its estimate is
physics on its specs, corrected as its base's same configuration is. What no row measures is how far physics' change
itself is off. The measured rows that show it are one workload on two real GPUs: physics moves its energy (time) by
log(physics on B / physics on A), the GPUs by log(measured on B / measured on A), and their difference is physics'
error in that change. Per pair of GPUs that ran MIN_PAIRS workloads or more in common (each workload's rows
averaged per GPU: EnergAIzer's A10 and A100-PCIe share 82 at 900 MHz), the 90 % quantile of |error| / |physics'
change| is the reach per unit of change that holds nine pairs in ten: a what-if moved by d in log reaches c x |d|
each way, joined in quadrature with its base's interval. Stated assumption: a change of one spec is missed at most
in proportion as a whole GPU's change is (A10 to A100 changes the architecture's SMs, the memory, the L2, the
clocks and the power limit at once), so the figure is a generous one for a single spec.
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
import pandas as pd
from shared_data import training_measurements

from joulecast.estimator.api import WHAT_IF_REACH
from joulecast.training.dataset import training_table

MIN_PAIRS = 20
QUANTITIES = {"energy": "energy_j", "time": "time_s"}


def pairs(rows: pd.DataFrame, min_pairs: int = MIN_PAIRS) -> pd.DataFrame:
    """Per pair of GPUs with `min_pairs` workloads in common and per quantity: the workloads, physics' median change
    (|log|), the 90 % quantile of its error (|log|) and of the error per unit of change (the reach)."""
    means = {gpu: part.groupby("workload_ref")[[*QUANTITIES.values(), *(f"physics_{c}" for c in QUANTITIES.values())]]
             .mean() for gpu, part in rows.groupby("gpu")}
    out = []
    for a, b in itertools.combinations(sorted(means), 2):
        both = means[a].join(means[b], how="inner", rsuffix="_b")
        if len(both) < min_pairs:
            continue
        for quantity, column in QUANTITIES.items():
            change = np.log(both[f"physics_{column}_b"] / both[f"physics_{column}"]).to_numpy()
            error = np.log(both[f"{column}_b"] / both[column]).to_numpy() - change
            out.append(dict(gpus=f"{a} / {b}", quantity=quantity, workloads=len(both),
                            median_change=float(np.median(np.abs(change))),
                            error_q90=float(np.quantile(np.abs(error), 0.9)),
                            reach=float(np.quantile(np.abs(error) / np.abs(change), 0.9))))
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-pairs", type=int, default=MIN_PAIRS, help="workloads two GPUs must share")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    table = pairs(training_table(training_measurements()).rows, args.min_pairs)
    if args.json:
        print(json.dumps(dict(pairs=table.to_dict(orient="records"), shipped=WHAT_IF_REACH), indent=1))
        return 0
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"\nshipped (joulecast.estimator.api.WHAT_IF_REACH): {WHAT_IF_REACH}: a what-if moved by d in log reaches "
          "c x |d| each way beyond its base's interval, in quadrature")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
