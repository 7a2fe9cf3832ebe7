"""A training step's host (issue 31): physics energy, time and power MAPE of the H200's measured training steps at
each autograd dispatch factor and overlap norm (`joulecast.features.arch.TRAINING_DISPATCH_FACTOR`,
`TRAINING_OVERLAP_NORM`), on the steps the shipped model trains on and on the held-out ones.

    python experiments/training_host.py [--json]

Rows: the H200's training steps, data/measurements/h200/h200-first (three: GPT-2 at batch 8, Qwen2-1.5B at 4,
Llama-3-8B at 1) and data/holdout (seven other models, batches and lengths), each at its collection's host dispatch
(18.0 us a launch). The shipped pair is the one of the grid whose time MAPE on the three is least; the seven are
scored, never chosen on. Before (factor 1, the 2-norm of an inference pass), the host-bound steps read far short.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
from gpu_transfer import HOLDOUT
from shared_data import training_measurements

from joulecast.data.store import load_store
from joulecast.features import arch
from joulecast.training.dataset import training_table

FACTORS = (1.0, 1.5, 2.0, 2.5, 3.0)
NORMS = (2.0, 4.0, 6.0, 8.0, 16.0)


@contextmanager
def training_host(factor: float, norm: float) -> Iterator[None]:
    before = arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM
    arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM = float(factor), float(norm)
    try:
        yield
    finally:
        arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM = before


def steps(measurements: pd.DataFrame) -> pd.DataFrame:
    """The H200's training-step rows of a measurement set."""
    return measurements[(measurements["gpu"].astype(str) == "h200") & (measurements["phase"] == "training")]


def errors(rows: pd.DataFrame, factor: float, norm: float) -> pd.DataFrame:
    """Per row: its model, batch and sequence, and physics' signed energy, time and power errors (%)."""
    with training_host(factor, norm):
        scored = training_table(rows).rows
    power = scored["physics_energy_j"] / scored["physics_time_s"]
    return pd.DataFrame({"model": scored["model"].astype(str), "batch": scored["batch"], "seq": scored["seq"],
                         "energy": 100 * (scored["physics_energy_j"] / scored["energy_j"] - 1),
                         "time": 100 * (scored["physics_time_s"] / scored["time_s"] - 1),
                         "power": 100 * (power / scored["power_w"] - 1)})


def grid(sets: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per set, factor and norm: the rows and their energy, time and power MAPE."""
    out = []
    for factor in FACTORS:
        for norm in NORMS:
            for name, rows in sets.items():
                e = errors(rows, factor, norm)
                out.append(dict(set=name, factor=factor, norm=norm, rows=len(e),
                                **{f"{c}_mape": float(e[c].abs().mean()) for c in ("energy", "time", "power")}))
    return pd.DataFrame(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sets = {"trained on": steps(training_measurements()), "held out": steps(load_store(HOLDOUT))}
    table = grid(sets)
    trained = table[table["set"] == "trained on"]
    best = trained.loc[trained["time_mape"].idxmin(), ["factor", "norm"]]
    shipped = (arch.TRAINING_DISPATCH_FACTOR, arch.TRAINING_OVERLAP_NORM)
    rows = {name: errors(r, *shipped).round(1).to_dict(orient="records") for name, r in sets.items()}
    if args.json:
        print(json.dumps({"grid": table.to_dict(orient="records"), "best_on_trained": best.to_dict(),
                          "shipped": dict(factor=shipped[0], norm=shipped[1]), "rows": rows}, indent=1))
        return 0
    print("physics MAPE % of the H200's training steps per autograd dispatch factor and overlap norm:")
    print(table.pivot_table(index=["factor", "norm"], columns="set",
                            values=["energy_mape", "time_mape", "power_mape"]).round(1).to_string())
    print(f"\nleast time MAPE on the steps trained on: factor {best['factor']:g}, norm {best['norm']:g}; "
          f"shipped: factor {shipped[0]:g}, norm {shipped[1]:g}")
    for name, r in rows.items():
        print(f"\n{name}, shipped pair (signed %):")
        print(pd.DataFrame(r).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
