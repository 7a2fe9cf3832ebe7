"""Accuracy figures: MAPE of energy, time and power per partition, and interval coverage."""

from __future__ import annotations

import numpy as np
import pandas as pd


def error_table(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Per-partition MAPE (%) from columns energy_j/time_s/power_w (measured) and pred_* (estimated).

    Coverage (%) and mean relative width are added when `lo_energy_j`/`hi_energy_j` are present.
    """
    f = frame.assign(
        e_energy=np.abs(frame["pred_energy_j"] / frame["energy_j"] - 1) * 100,
        e_time=np.abs(frame["pred_time_s"] / frame["time_s"] - 1) * 100,
        e_power=np.abs(frame["pred_power_w"] / frame["power_w"] - 1) * 100)
    if "lo_energy_j" in f:
        f["covered"] = ((f["energy_j"] >= f["lo_energy_j"]) & (f["energy_j"] <= f["hi_energy_j"])) * 100.0
        f["width"] = (f["hi_energy_j"] - f["lo_energy_j"]) / f["pred_energy_j"] * 100
    grouped = f.groupby(by) if by else f.assign(_all="all").groupby("_all")
    agg = dict(rows=("e_energy", "size"), energy_mape=("e_energy", "mean"), time_mape=("e_time", "mean"),
               power_mape=("e_power", "mean"), energy_median_ape=("e_energy", "median"),
               energy_p90_ape=("e_energy", lambda s: float(np.percentile(s, 90))))
    if "covered" in f:
        agg.update(coverage=("covered", "mean"), mean_width=("width", "mean"))
    return grouped.agg(**agg).reset_index().rename(columns={by or "_all": "value"})
