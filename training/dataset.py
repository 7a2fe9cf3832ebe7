"""The training table: measurement rows joined with their physics estimate and workload features.

A row is usable when its workload can be rebuilt (`workload_ref`) and is all the work its run did, its GPU is in the
catalog (so that it has spec features and a physics estimate), it ran on one GPU, and it is not a failed run. The rest
are counted by reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from joulecast.data.gpus import catalog as gpu_catalog
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.data.schema import COLLECTOR_SOURCE
from joulecast.estimator.api import HOST_RANGE_COLUMNS, host_range_of, range_reach
from joulecast.estimator.residual import TARGETS
from joulecast.features.design import design_matrix, setting_groups
from joulecast.features.refs import resolve

log = logging.getLogger(__name__)
NO_WORKLOAD = "no workload (kernel list none)"  # a row no estimate can lower (a whole job's, an application's own)


@dataclass
class TrainingTable:
    X: pd.DataFrame            # features, one row per usable measurement
    rows: pd.DataFrame         # the measurement rows (same order) plus physics_time_s, physics_energy_j and physics
                               # at the measured hosts' range ends (`estimator.api.HOST_RANGE_COLUMNS`)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def y_time(self) -> np.ndarray:
        return np.log(self.rows["time_s"].to_numpy(float) / self.rows["physics_time_s"].to_numpy(float))

    @property
    def y_energy(self) -> np.ndarray:
        return np.log(self.rows["energy_j"].to_numpy(float) / self.rows["physics_energy_j"].to_numpy(float))

    def host_reach(self, keep: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Per target, the `keep` rows' log reach of an unstated host (n x 2: physics at the fast end over its point,
        at most 0, and at the slow end, at least 0; 0 and 0 where the row's collection stated its host, or launched
        through CUDA graphs): the spread an estimate of such a machine joins to its interval (`estimator.api.combine`),
        on which the conformal margins are calibrated (`training.residual.ResidualModel.fit`'s `reach`)."""
        rows = self.rows[keep]
        ranges = host_range_of(rows)
        if ranges is None:  # a table of no rows
            return {target: np.zeros((len(rows), 2)) for target in TARGETS}
        return {target: np.column_stack(range_reach(ends, rows[point].to_numpy(float)))
                for target, ends, point in zip(TARGETS, ranges, ("physics_time_s", "physics_energy_j"))}


def usable(measurements: pd.DataFrame, *, partial: bool = False) -> tuple[pd.DataFrame, dict[str, int]]:
    """The usable rows and, per reason, how many were dropped. `partial=True` keeps rows whose kernel list lacks part
    of the run's work, for studies of that work (experiments/serving_overhead.py); never for training."""
    known = set(gpu_catalog())
    reasons = {
        "failed run": measurements["flag_failed_run"].to_numpy(bool),
        NO_WORKLOAD: measurements["workload_ref"].isna().to_numpy(),
        # Its residual would measure the work left out of its kernel list, not how physics errs on what the list
        # holds (joulecast.data.importers.mlenergy.PARTIAL_RELEASES). The shipped model (no H200 rows) on the H200
        # holdout (experiments/h200_holdout.py), energy MAPE with -> without ML.ENERGY v3's rows: 46.0 -> 18.5 %,
        # prefills 74.2 -> 25.9 %, against physics' 17.3 / 21.2 %.
        "kernel list partial (the run did more work)": measurements["kernel_list"].eq("partial").to_numpy(bool)
        & (not partial),
        "GPU not in the catalog": ~measurements["gpu"].isin(known).to_numpy(),
        "several GPUs": (measurements["num_gpus"].fillna(1) > 1).to_numpy(),
    }
    keep = np.ones(len(measurements), bool)
    dropped = {}
    for reason, mask in reasons.items():
        dropped[reason] = int((keep & mask).sum())
        keep &= ~mask
    return measurements[keep].reset_index(drop=True), {k: v for k, v in dropped.items() if v}


def dropped_text(dropped: dict[str, int]) -> str:
    """`usable`'s dropped rows by reason, in words ('failed run: 13, GPU not in the catalog: 1,609'), or 'none'
    (before, the dict's repr reached the user)."""
    return ", ".join(f"{reason}: {n:,}" for reason, n in dropped.items() if n) or "none"


def setting_of(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The clock a row was locked at (NaN = none: the default boost clock) and its power limit.

    Imported rows give a locked clock as their minimum clock. The collector never sets one; where it measured a GPU
    throttling (power or heat), its clocks fell because of the limit, which the physics' power-cap solve reproduces
    from the default clock, so the row has no lock. Otherwise its highest clock is the one the GPU was left at (a
    lock someone else set, or the boost clock).
    """
    clock = rows["sm_clock_min_mhz"].to_numpy(float).copy()
    own = (rows["source"] == COLLECTOR_SOURCE).to_numpy(bool)  # the rows the collector measured
    throttled = rows["flag_throttled"].to_numpy(bool)
    clock[own] = np.where(throttled[own], np.nan, rows["sm_clock_max_mhz"].to_numpy(float)[own])
    return clock, rows["power_limit_w"].to_numpy(float)


def training_table(measurements: pd.DataFrame) -> TrainingTable:
    """Physics and features for every usable row (one physics pass per GPU setting)."""
    rows, dropped = usable(measurements)
    if rows.empty:
        return TrainingTable(pd.DataFrame(), rows, dropped)
    workloads = {ref: resolve(ref) for ref in rows["workload_ref"].unique()}
    # each row's workload on its machine: with the host dispatch its collection measured, where it states one
    dispatch = [None if np.isnan(d) else float(d) for d in rows["host_dispatch_s"].to_numpy(dtype=float)]
    for ref, d in {(r, d) for r, d in zip(rows["workload_ref"], dispatch) if d is not None}:
        workloads[ref, d] = replace(workloads[ref], host_dispatch_s=d)
    keys = [r if d is None else (r, d) for r, d in zip(rows["workload_ref"], dispatch)]
    clock, limit = setting_of(rows)
    X_parts, phys_t, phys_e = [], np.empty(len(rows)), np.empty(len(rows))
    host_t, host_e = np.empty((len(rows), 2)), np.empty((len(rows), 2))  # at the measured hosts' range's ends
    for gpu_name, c, lim, idx in setting_groups(rows["gpu"], clock, limit):
        spec = lookup_gpu(gpu_name)
        X, totals, _ = design_matrix([workloads[keys[i]] for i in idx], spec,
                                     None if c is None else min(c, spec.boost_clock_mhz), lim)
        X.index = idx
        X_parts.append(X)
        phys_t[idx], phys_e[idx] = totals.time_s, totals.energy_j
        host_t[idx], host_e[idx] = totals.host_range_time_s, totals.host_range_energy_j
    X = pd.concat(X_parts).sort_index()
    rows = rows.assign(physics_time_s=phys_t, physics_energy_j=phys_e,
                       **dict(zip(HOST_RANGE_COLUMNS, np.column_stack([host_t, host_e]).T)))
    log.info("training table: %d rows (%s dropped)", len(rows), dropped)
    return TrainingTable(X.reset_index(drop=True), rows, dropped)
