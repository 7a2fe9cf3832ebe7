"""Sweeps: every combination of GPUs, clocks, power limits, batch sizes, lengths and dtypes for one model and phase,
estimated in one vectorised pass (`estimate_many`), with the Pareto front of energy against time and the best point
under constraints."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.gpus import gpu as lookup_gpu
from joulecast.estimator.many import estimate_many
from joulecast.features.power import MIN_CLOCK_RATIO

OBJECTIVES = ("energy", "time")
# The axes of the front: a pass's energy against its time, or, where the points do different work (several batch
# sizes or lengths), energy per token against time per token (the inverse of throughput).
FRONTS = {"pass": ("time_s", "energy_j"), "token": ("s_per_token", "energy_per_token_j")}
# A sweep larger than this is refused before any work: at ~2,000 hybrid estimates a CPU-second it would take
# minutes, and its points table would not fit a report (split it, or use a cluster).
MAX_POINTS = 1_000_000
# Configurations a partition holds (a task of a Dask sweep): about 10 s of hybrid estimates, 2 of physics.
PART_ROWS = 20_000


@dataclass(frozen=True)
class SweepResult:
    points: pd.DataFrame          # every configuration estimated, with tokens_per_s, feasible and pareto columns
    skipped: dict[str, int]       # configurations left out, by reason (a clock or limit the GPU does not allow)
    objective: str
    front: str                    # a key of FRONTS
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def axes(self) -> tuple[str, str]:
        """(time-like, energy-like) columns of the front."""
        return FRONTS[self.front]

    @property
    def pareto(self) -> pd.DataFrame:
        """The feasible points no other feasible point beats on both axes, fastest first."""
        return self.points[self.points["pareto"]].sort_values(self.axes[0])

    @property
    def best(self) -> pd.Series | None:
        feasible = self.points[self.points["feasible"]]
        if not len(feasible):
            return None
        return feasible.loc[feasible[self.axes[1] if self.objective == "energy" else self.axes[0]].idxmin()]


def grid(model: str, phase: str, *, gpus: Sequence[str], batches: Sequence[int], seqs: Sequence[int],
         dtypes: Sequence[str] = ("bf16",), sm_clocks: Sequence[float | None] = (None,),
         power_limits: Sequence[float | None] = (None,)) -> tuple[pd.DataFrame, dict[str, int]]:
    """The configurations of a sweep (one row each), less the clocks and power limits each GPU does not allow, and
    how many were left out for which reason."""
    size = len(gpus) * len(batches) * len(seqs) * len(dtypes) * len(sm_clocks) * len(power_limits)
    if size > MAX_POINTS:
        raise InputError("sweep", f"{size:,} configurations; at most {MAX_POINTS:,} (narrow the lists)")
    frame = pd.DataFrame(list(itertools.product(gpus, batches, seqs, dtypes, sm_clocks, power_limits)),
                         columns=["gpu", "batch", "seq", "dtype", "sm_clock_mhz", "power_limit_w"])
    frame.insert(0, "model", model)
    frame.insert(1, "phase", phase)
    frame[["sm_clock_mhz", "power_limit_w"]] = frame[["sm_clock_mhz", "power_limit_w"]].astype(float)
    specs = {g: lookup_gpu(g) for g in gpus}
    boost = frame["gpu"].map(lambda g: specs[g].boost_clock_mhz)
    clock_ok = frame["sm_clock_mhz"].isna() | frame["sm_clock_mhz"].between(MIN_CLOCK_RATIO * boost, boost)
    low = frame["gpu"].map(lambda g: specs[g].idle_power_max_clock_w)
    high = frame["gpu"].map(lambda g: 1.5 * specs[g].power_limit_w)
    limit_ok = frame["power_limit_w"].isna() | ((frame["power_limit_w"] > low) & (frame["power_limit_w"] <= high))
    skipped = {"clock outside the GPU's range": int((~clock_ok).sum()),
               "power limit outside the GPU's range": int((clock_ok & ~limit_ok).sum())}
    return frame[clock_ok & limit_ok].reset_index(drop=True), {k: v for k, v in skipped.items() if v}


def pareto_mask(energy: np.ndarray, time: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Per point, whether it is a candidate that no other candidate beats (no more energy and no more time, one of
    them less): sorted by time, a point is on the front where its energy is below every faster point's."""
    out = np.zeros(len(energy), dtype=bool)
    idx = np.flatnonzero(candidates)
    if not len(idx):
        return out
    order = idx[np.lexsort((energy[idx], time[idx]))]
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], energy[order][:-1]]))
    out[order[energy[order] < best_before]] = True
    return out


def check_options(objective: str, front: str, max_time_s: float | None, min_tokens_per_s: float | None,
                  max_power_w: float | None) -> None:
    """A sweep's objective, front and constraints, checked before any work."""
    if objective not in OBJECTIVES:
        raise InputError("--objective", f"unknown {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    if front not in (*FRONTS, "auto"):
        raise InputError("--front", f"unknown {front!r}; allowed: {', '.join(FRONTS)}, auto")
    for name, value in (("--max-time", max_time_s), ("--min-throughput", min_tokens_per_s), ("--max-power", max_power_w)):
        if value is not None and not (np.isfinite(value) and value > 0):
            raise InputError(name, f"must be a positive number, got {value!r}")


def estimate_part(configs: pd.DataFrame, estimator: Any) -> pd.DataFrame:
    """One partition of a sweep (a task on a Dask worker, or a step here)."""
    return estimate_many(configs, estimator=estimator)


def estimate_all(configs: pd.DataFrame, estimator: Any = None, run: Any = None,
                 progress: Any = None) -> pd.DataFrame:
    """`estimate_many` of every configuration, in partitions of at most PART_ROWS run by `run` (an executor,
    `joulecast.data.executors`; default in-process), gathered in order: the same rows whatever ran them."""
    from joulecast.data.executors import InProcess

    run = run or InProcess()
    count = max(1, -(-len(configs) // PART_ROWS), 2 * run.workers if run.workers > 1 else 1)
    bounds = np.linspace(0, len(configs), min(count, len(configs)) + 1).astype(int)
    parts = [configs.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return pd.concat(run.map(estimate_part, parts, estimator, progress=progress), ignore_index=True)


def sweep(configs: pd.DataFrame, *, objective: str = "energy", front: str = "auto", max_time_s: float | None = None,
          min_tokens_per_s: float | None = None, max_power_w: float | None = None, estimator: Any = None,
          skipped: dict[str, int] | None = None, run: Any = None, progress: Any = None) -> SweepResult:
    """Estimate every configuration; mark those meeting the constraints (`feasible`) and the Pareto front among
    them (`pareto`); throughput is tokens a second (a prefill's or a training step's batch x seq, a decode step's
    batch). `front`: "pass", "token", or "auto" (per token where the points differ in batch or length). `run` says
    where the partitions run (`joulecast.data.executors`; default here); `progress` is called with each partition's
    count as it finishes."""
    check_options(objective, front, max_time_s, min_tokens_per_s, max_power_w)
    if front == "auto":
        front = "token" if len(configs[["batch", "seq"]].drop_duplicates()) > 1 else "pass"
    points = estimate_all(configs, estimator, run, progress)
    tokens = points["batch"] * np.where(points["phase"] == "decode", 1, points["seq"])
    points["tokens_per_s"] = tokens / points["time_s"]
    points["energy_per_token_j"] = points["energy_j"] / tokens
    points["s_per_token"] = points["time_s"] / tokens
    feasible = np.ones(len(points), dtype=bool)
    for column, bound, upper in (("time_s", max_time_s, True), ("tokens_per_s", min_tokens_per_s, False),
                                 ("power_w", max_power_w, True)):
        if bound is not None:
            feasible &= (points[column] <= bound) if upper else (points[column] >= bound)
    points["feasible"] = feasible
    x, y = FRONTS[front]
    points["pareto"] = pareto_mask(points[y].to_numpy(), points[x].to_numpy(), feasible)
    constraints = {k: v for k, v in (("max_time_s", max_time_s), ("min_tokens_per_s", min_tokens_per_s),
                                     ("max_power_w", max_power_w)) if v is not None}
    return SweepResult(points=points, skipped=dict(skipped or {}), objective=objective, front=front,
                       constraints=constraints)
