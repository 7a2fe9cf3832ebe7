"""Accuracy figures: MAPE, median and 90th-percentile absolute percentage error of energy, time and power per
partition, and interval coverage and width."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

QUANTITIES = (("energy", "energy_j"), ("time", "time_s"), ("power", "power_w"))
# Rows that share these share one error offset: a model family on one GPU is off as a whole (coverage_chance).
OFFSET_GROUPS = ("model_family", "gpu")
COVERAGE_TARGET = (86.0, 94.0)  # the hybrid issue's target for 90 % intervals: within +-4 points, per partition
SIMULATED_VALUES = 2_000_000  # coverage_chance draws at most this many errors at a time (16 MB of floats)


def _p90(values: pd.Series) -> float:
    return float(np.percentile(values, 90))


def absolute_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """Absolute percentage errors `ape_energy`, `ape_time`, `ape_power` (%) of the pred_* columns against the measured."""
    return pd.DataFrame({f"ape_{q}": np.abs(frame[f"pred_{col}"].to_numpy(float) / frame[col].to_numpy(float) - 1) * 100
                         for q, col in QUANTITIES}, index=frame.index)


def error_table(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Per-partition errors (%) from columns energy_j/time_s/power_w (measured) and pred_* (estimated).

    `coverage` (% of rows whose measured energy lies in [lo_energy_j, hi_energy_j]) and `mean_width` (the interval's
    width relative to the estimate, %) are added when those columns are present; `time_coverage` likewise; and
    `in_domain` (% of rows inside the training domain, neither flagged out-of-domain nor spec-only) when flagged.
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
    if "in_domain" in f:
        f["inside"] = f["in_domain"].astype(float) * 100.0
        columns.update(in_domain=("inside", "mean"))
    key = by or "_all"
    if not by:
        f = f.assign(_all="all")
    # One aggregation per source column, then pick: pandas mislabels named aggregations that reuse a function.
    sources = sorted({c for c, _ in columns.values()})
    stats = f.groupby(key, dropna=False)[sources].agg(["size", "mean", "median", _p90])
    stats.columns = [f"{c}|{'p90' if s == '_p90' else s}" for c, s in stats.columns]
    out = pd.DataFrame({name: stats[f"{c}|{s}"] for name, (c, s) in columns.items()})
    return out.reset_index().rename(columns={key: "value"})


@dataclass(frozen=True)
class OffsetSpreads:
    """Per row of a scored frame: the spread (log units) of its group's offset (`tau`) and of rows about it
    (`sigma`); `by_stratum`: stratum -> {tau, sigma}."""
    tau: np.ndarray
    sigma: np.ndarray
    by_stratum: dict[str, dict[str, float]]


def _log_errors(frame: pd.DataFrame) -> np.ndarray:
    return np.log(frame["energy_j"].to_numpy(float) / frame["pred_energy_j"].to_numpy(float))


def _offset_groups(frame: pd.DataFrame, shared: tuple[str, ...]) -> np.ndarray:
    return pd.MultiIndex.from_frame(frame[list(shared)].astype(str)).factorize()[0]


def offset_spreads(frame: pd.DataFrame, shared: tuple[str, ...] = OFFSET_GROUPS,
                   strata: str | None = "gpu") -> OffsetSpreads:
    """The log errors log(measured / estimated) of a scored frame split, within each stratum (a GPU: some are
    modelled far better than others), by the one-way random-effects moments into an offset per group of rows
    sharing `shared` (spread tau) and a spread of rows about it (sigma); a stratum of one group takes the tau of
    all rows. Estimated once, they serve every partition of the same frame (`coverage_chance(spreads=...)`)."""
    e, group = _log_errors(frame), _offset_groups(frame, shared)
    stratum = frame[strata].astype(str).to_numpy() if strata else np.full(len(frame), "all")
    pooled_tau = _random_effects(e, group)[0]
    by_stratum = {}
    tau, sigma = np.zeros(len(frame)), np.zeros(len(frame))  # per row: its group's tau, its own sigma
    for name in np.unique(stratum):
        inside = stratum == name
        local = pd.factorize(group[inside])[0]
        t, sg = _random_effects(e[inside], local)
        by_stratum[str(name)] = {"tau": t if local.max() >= 1 else pooled_tau, "sigma": sg}
        tau[inside], sigma[inside] = by_stratum[str(name)]["tau"], sg
    return OffsetSpreads(tau, sigma, by_stratum)


def coverage_chance(frame: pd.DataFrame, by: str, shared: tuple[str, ...] = OFFSET_GROUPS,
                    strata: str | None = "gpu", level: float = 0.95, draws: int = 4000, seed: int = 0,
                    target: tuple[float, float] = COVERAGE_TARGET,
                    spreads: OffsetSpreads | None = None) -> pd.DataFrame:
    """How far each partition's energy-interval coverage may stray by chance when rows share an offset.

    Rows that share the values of `shared` (a model family on one GPU) share one error offset: a held-out family is
    off as a whole, so its rows are not independent draws and its coverage swings far more than its row count
    suggests. With the spreads of offsets and rows (`offset_spreads` of `strata`; `spreads` where they are already
    estimated for this frame), each partition is redrawn `draws` times, a normal offset per group and a normal error
    per row, against its own rows' interval edges; the central `level` range of the redrawn coverage is what chance
    allows, and `in_target` the share of draws (%) whose coverage lies within `target` (%); `p_in_target` is
    `coverage_p_value` of the partition's own count. Columns: value, rows, groups, coverage, chance_low, chance_high,
    in_target, p_in_target, and tau, sigma (log units, root mean square over the partition's rows);
    `attrs["offsets"]`: stratum -> {tau, sigma}.
    """
    if spreads is None:
        spreads = offset_spreads(frame, shared, strata)
    if len(spreads.tau) != len(frame):
        raise ValueError(f"spreads for {len(spreads.tau)} rows given with a frame of {len(frame)}")
    e, group, tau, sigma = _log_errors(frame), _offset_groups(frame, shared), spreads.tau, spreads.sigma
    below = np.log(frame["pred_energy_j"].to_numpy(float) / frame["lo_energy_j"].to_numpy(float))
    above = np.log(frame["hi_energy_j"].to_numpy(float) / frame["pred_energy_j"].to_numpy(float))
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2 * 100

    def inside(error: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return (error >= -below[rows]) & (error <= above[rows])

    out = []
    for value, rows in pd.Series(np.arange(len(frame))).groupby(frame[by].to_numpy()).groups.items():
        rows = np.asarray(rows)
        groups, first, inverse = np.unique(group[rows], return_index=True, return_inverse=True)
        group_tau = tau[rows][first]
        covered = np.empty(draws)
        step = max(1, SIMULATED_VALUES // len(rows))  # draws at a time: a large partition in bounded memory
        for start in range(0, draws, step):
            n = min(step, draws - start)
            x = ((rng.normal(0, 1, (n, len(groups))) * group_tau)[:, inverse]
                 + rng.normal(0, 1, (n, len(rows))) * sigma[rows])
            covered[start:start + n] = inside(x, rows).mean(axis=1) * 100
        low, high = np.percentile(covered, [tail, 100 - tail])
        seen = int(inside(e[rows], rows).sum())
        out.append({"value": value, "rows": len(rows), "groups": len(groups), "coverage": seen / len(rows) * 100,
                    "chance_low": float(low), "chance_high": float(high),
                    "in_target": float(np.mean((covered >= target[0]) & (covered <= target[1])) * 100),
                    "p_in_target": coverage_p_value(seen, len(rows), target),
                    "tau": float(np.sqrt(np.mean(tau[rows] ** 2))), "sigma": float(np.sqrt(np.mean(sigma[rows] ** 2)))})
    result = pd.DataFrame(out, columns=["value", "rows", "groups", "coverage", "chance_low", "chance_high",
                                        "in_target", "p_in_target", "tau", "sigma"])
    result.attrs["offsets"] = spreads.by_stratum
    return result


def calibrated_in_target(rows: int, level: float = 0.9, target: tuple[float, float] = COVERAGE_TARGET) -> float:
    """The chance (%) that a perfectly calibrated interval puts a partition of `rows` rows within `target` (%):
    each row inside with probability `level`, independently (no shared offsets). The ceiling of what any interval
    can be expected to reach: of 16 rows, 14 or 15 must be inside (87.5 or 93.75 %), which happens 60 % of the time."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    k = np.arange(rows + 1)
    share = k / rows * 100
    return _binomial_mass(rows, k[(share >= target[0] - 1e-9) & (share <= target[1] + 1e-9)], level) * 100


def coverage_p_value(inside: int, rows: int, target: tuple[float, float] = COVERAGE_TARGET) -> float:
    """How likely `inside` of `rows` rows covered, or a count further out, would be if the true coverage lay within
    `target` (%): 1 where the observed coverage does; else the one-sided binomial p-value at the nearer edge of the
    target (rows independent). Rows that share an offset are less independent than this assumes, so it overstates
    the evidence against the target: a partition it does not reject is consistent with the target."""
    if not 0 <= inside <= rows or rows < 1:
        raise ValueError(f"inside must lie within 0-{rows} and rows be at least 1, got {inside} of {rows}")
    share = inside / rows * 100
    if share > target[1]:
        return _binomial_mass(rows, np.arange(inside, rows + 1), target[1] / 100)
    if share < target[0]:
        return _binomial_mass(rows, np.arange(inside + 1), target[0] / 100)
    return 1.0


def _binomial_mass(rows: int, k: np.ndarray, p: float) -> float:
    """P(X in k) for X ~ Binomial(rows, p), summed in logs: exact for any row count without overflowing the
    binomial coefficient."""
    if not len(k):
        return 0.0
    if p <= 0 or p >= 1:  # all rows inside (p = 1) or none (p = 0)
        return float(np.isin(rows if p >= 1 else 0, k))
    log_pmf = (math.lgamma(rows + 1) - np.array([math.lgamma(i + 1) + math.lgamma(rows - i + 1) for i in k])
               + k * math.log(p) + (rows - k) * math.log1p(-p))
    return float(min(np.exp(log_pmf).sum(), 1.0))  # a sum of many terms may round past 1


def add_coverage_chance(table: pd.DataFrame, frame: pd.DataFrame, by: str | None,
                        shared: tuple[str, ...] = OFFSET_GROUPS, spreads: OffsetSpreads | None = None) -> pd.DataFrame:
    """`table` (error_table's of `frame` by `by`, None for all rows) with `coverage_chance`'s chance_low,
    chance_high, in_target and p_in_target per partition (NaN where `frame` has no intervals); its offsets per GPU
    (tau, sigma) go to `attrs["coverage_offsets"]`. `spreads`: `offset_spreads(frame)`, where one frame is
    partitioned several ways."""
    columns = ("chance_low", "chance_high", "in_target", "p_in_target")
    if "lo_energy_j" not in frame:  # physics alone has no interval
        out = table.assign(**{c: np.nan for c in columns})
        out.attrs["coverage_offsets"] = {}
        return out
    key = by or "_all"
    chance = coverage_chance(frame.assign(**{c: frame[c].astype(str) for c in shared}, _all="all"), key, shared,
                             spreads=spreads)
    out = table.assign(**{c: table["value"].map(chance.set_index("value")[c]).to_numpy() for c in columns})
    out.attrs["coverage_offsets"] = chance.attrs["offsets"]
    return out


def _random_effects(values: np.ndarray, group: np.ndarray) -> tuple[float, float]:
    """(between-group, within-group) standard deviations of `values` by the one-way ANOVA moments (unbalanced).
    Groups of one row each leave no spread within: it is all counted between, which draws the same rows."""
    if not len(values):
        return 0.0, 0.0
    n, k = len(values), int(group.max()) + 1
    size = np.bincount(group, minlength=k).astype(float)
    mean = np.bincount(group, values, minlength=k) / size
    within = float(np.sum((values - mean[group]) ** 2) / max(n - k, 1))
    if k < 2:
        return 0.0, float(np.sqrt(within))
    between = float(np.sum(size * (mean - values.mean()) ** 2) / (k - 1))
    n0 = (n - np.sum(size ** 2) / n) / (k - 1)  # the effective group size of unbalanced groups
    return float(np.sqrt(max(0.0, (between - within) / n0))), float(np.sqrt(within))
