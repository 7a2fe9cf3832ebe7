"""Accuracy figures: MAPE, median and 90th-percentile absolute percentage error of energy, time and power per
partition, and interval coverage and width."""

from __future__ import annotations

import numpy as np
import pandas as pd

QUANTITIES = (("energy", "energy_j"), ("time", "time_s"), ("power", "power_w"))


def _p90(values: pd.Series) -> float:
    return float(np.percentile(values, 90))


def absolute_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """Absolute percentage errors `ape_energy`, `ape_time`, `ape_power` (%) of the pred_* columns against the measured."""
    return pd.DataFrame({f"ape_{q}": np.abs(frame[f"pred_{col}"].to_numpy(float) / frame[col].to_numpy(float) - 1) * 100
                         for q, col in QUANTITIES}, index=frame.index)


def error_table(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Per-partition errors (%) from columns energy_j/time_s/power_w (measured) and pred_* (estimated).

    `coverage` (% of rows whose measured energy lies in [lo_energy_j, hi_energy_j]) and `mean_width` (the interval's
    width relative to the estimate, %) are added when those columns are present; `time_coverage` likewise.
    """
    f = frame.assign(**absolute_errors(frame))
    columns = {"rows": ("ape_energy", "size")}
    for q, _ in QUANTITIES:
        columns.update({f"{q}_mape": (f"ape_{q}", "mean"), f"{q}_median_ape": (f"ape_{q}", "median"),
                        f"{q}_p90_ape": (f"ape_{q}", "p90")})
    if "lo_energy_j" in f:
        f["covered"] = ((f["energy_j"] >= f["lo_energy_j"]) & (f["energy_j"] <= f["hi_energy_j"])) * 100.0
        f["width"] = (f["hi_energy_j"] - f["lo_energy_j"]) / f["pred_energy_j"] * 100
        columns.update(coverage=("covered", "mean"), mean_width=("width", "mean"))
    if "lo_time_s" in f:
        f["time_covered"] = ((f["time_s"] >= f["lo_time_s"]) & (f["time_s"] <= f["hi_time_s"])) * 100.0
        columns.update(time_coverage=("time_covered", "mean"))
    key = by or "_all"
    if not by:
        f = f.assign(_all="all")
    # One aggregation per source column, then pick: pandas mislabels named aggregations that reuse a function.
    sources = sorted({c for c, _ in columns.values()})
    stats = f.groupby(key, dropna=False)[sources].agg(["size", "mean", "median", _p90])
    stats.columns = [f"{c}|{'p90' if s == '_p90' else s}" for c, s in stats.columns]
    out = pd.DataFrame({name: stats[f"{c}|{s}"] for name, (c, s) in columns.items()})
    return out.reset_index().rename(columns={key: "value"})
