"""The H200 held-out test: estimators scored on H200 measurements none of them was trained on.

data/holdout/h200/h200-holdout holds 32 configurations measured on the lent H200 right after data/measurements'
h200-first (other batches, lengths and phases of the same models, and a few other kernels), and is kept out of every
training set. Scored here, per phase: physics alone; the shipped model, which has seen no H200 row (a GPU it knows
by its specs only); and a candidate trained as `joulecast train` trains by default (the project's own store with
h200-first, and ../shared's EnergAIzer and ML.ENERGY sets). The candidate's grouped cross-validation per GPU is
printed beside the shipped model's (`joulecast retrain --gpu h200` gates on a paired baseline instead: the same
training without the H200, on the candidate's folds).

Usage: python experiments/h200_holdout.py   (about 1.5 minutes: one training)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from joulecast.cli import load_measurements
from joulecast.data.store import load_store
from joulecast.estimator.audit import score_measurements
from joulecast.estimator.loading import load_estimator
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
    print(f"training a candidate on {len(measurements)} measurements "
          f"({(measurements['gpu'] == 'h200').sum()} of them H200 rows from h200-first) ...", flush=True)
    trained = train(measurements, log_mlflow=False, register=False)
    candidate = trained.model
    table = scores(holdout, {"physics": "physics", "shipped (no H200 rows)": shipped,
                             "candidate (with h200-first)": candidate})
    pd.set_option("display.width", 160)
    print(f"\nheld-out H200 rows ({len(holdout)}, data/holdout): MAPE %, coverage % of the 90 % energy interval, "
          "mean interval width % of the estimate")
    print(table.round(2).to_string(index=False, na_rep="-"))
    before, after = pd.DataFrame(shipped.cv["meta"]["cv_partitions"]), pd.DataFrame(cv_record(trained.partitions))
    cv = pd.DataFrame({"shipped": before[before["by"] == "gpu"].set_index("value")["energy_mape"],
                       "candidate": after[after["by"] == "gpu"].set_index("value")["energy_mape"]})
    print("\ngrouped cross-validation by model family, energy MAPE % per GPU:")
    print(cv.round(2).to_string(na_rep="-"))


if __name__ == "__main__":
    main()
