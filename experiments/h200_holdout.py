"""The H200 held-out test: estimators scored on H200 measurements none of them was trained on.

data/holdout/h200/h200-holdout holds 32 configurations measured on the lent H200 right after data/measurements'
h200-first (other batches, lengths and phases of the same models, and a few other kernels), and is kept out of every
training set. Scored here, per phase: physics alone; a model trained as `joulecast train --exclude-gpu h200` trains
(the project's own store and ../shared's EnergAIzer and ML.ENERGY sets, no H200 row: a GPU it knows by its specs
only, as a new GPU is); and the shipped model (trained with h200-first, since `joulecast retrain --gpu h200`
promoted it, with h200-prefill since 2026-12-04, and with h200-eager and h200-masked since that day's
twenty-second session). Their grouped cross-validation per GPU is printed side by side.

Usage: python experiments/h200_holdout.py   (about 1.5 minutes: one training)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from joulecast.cli import load_measurements
from joulecast.data.store import load_store
from joulecast.estimator.loading import load_estimator
from joulecast.training.audit import score_measurements
from joulecast.training.evaluate import error_table
from joulecast.training.train import cv_record, train

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "external"
COLUMNS = ["rows", "energy_mape", "time_mape", "power_mape", "coverage", "mean_width"]


def scores(holdout: pd.DataFrame, estimators: dict[str, object]) -> pd.DataFrame:
    """Each estimator's errors on the held-out rows, overall and per phase."""
    parts = []
    for name, estimator in estimators.items():
        frame, _ = score_measurements(holdout, estimator)
        for by in (None, "phase"):
            table = error_table(frame, by)
            parts.append(table.assign(estimator=name, value=table["value"] if by else "all"))
    out = pd.concat(parts, ignore_index=True)
    return out[["estimator", "value", *[c for c in COLUMNS if c in out]]]


def main() -> None:
    holdout = load_store(REPO / "data" / "holdout")
    measurements = load_measurements([str(REPO / "data" / "measurements")],
                                     [f"energaizer={SHARED / 'energaizer-artifact'}", f"mlenergy={SHARED}"])
    shipped = load_estimator(None)
    print(f"training a model without the {(measurements['gpu'] == 'h200').sum()} H200 rows of data/measurements "
          f"(on the other {(measurements['gpu'] != 'h200').sum()} measurements) ...", flush=True)
    trained = train(measurements, exclude_gpu=["h200"], log_mlflow=False, register=False)
    label = f"shipped ({'with' if 'h200' in shipped.gpus else 'no'} H200 rows)"
    table = scores(holdout, {"physics": "physics", "no H200 rows (zero-shot)": trained.model, label: shipped})
    pd.set_option("display.width", 160)
    print(f"\nheld-out H200 rows ({len(holdout)}, data/holdout): MAPE %, coverage % of the 90 % energy interval, "
          "mean interval width % of the estimate")
    print(table.round(2).to_string(index=False, na_rep="-"))
    zero, ships = pd.DataFrame(cv_record(trained.partitions)), pd.DataFrame(shipped.cv["meta"]["cv_partitions"])
    cv = pd.DataFrame({"no H200 rows": zero[zero["by"] == "gpu"].set_index("value")["energy_mape"],
                       label: ships[ships["by"] == "gpu"].set_index("value")["energy_mape"]})
    print("\ngrouped cross-validation by model family, energy MAPE % per GPU:")
    print(cv.round(2).to_string(na_rep="-"))


if __name__ == "__main__":
    main()
