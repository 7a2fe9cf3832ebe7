"""The carbon of an estimate's energy: its grid's intensity (gCO2e a kWh, a country's annual average from
data/distributed/grid_carbon.yaml, one given, or an hourly series from the job's start, repeating, as a plan's sites
take it) times the datacenter's PUE (its average or hyperscale figure there, or one given), the GPU's energy only: the
host's and the network's power are not counted (a plan's sites count them, `joulecast.estimator.plan`). On a series
the energy is spread evenly over the job's time (a serving load without a duration: around the clock, the series'
mean; a load served window by window: each window's energy over its own hours). An interval of energy is one of
carbon, the intensity and PUE taken as given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.data.files import kind_of
from joulecast.data.job_file import MAX_G_PER_KWH, MAX_SERIES_HOURS, reference

DEFAULT_GRID = "WORLD"   # as a plan's site that names none
DEFAULT_PUE = "average"  # the industry average, as a plan's site that names none
PUE_RANGE = (1.0, 3.0)   # as a job file's sites take it
# An estimate's energy figures (J) and the carbon figures (g) they give, each with its interval's where it has one.
CARBON_FIGURES = {"energy_j": "carbon_g", "energy_interval_j": "carbon_interval_g",
                  "energy_per_request_j": "carbon_per_request_g",
                  "energy_per_output_token_j": "carbon_per_output_token_g",
                  "energy_per_output_token_interval_j": "carbon_per_output_token_interval_g",
                  "energy_per_token_j": "carbon_per_token_g"}


@dataclass(frozen=True)
class Grid:
    """Where the energy is drawn: a grid's carbon intensity and the datacenter's PUE."""

    name: str            # a country code of grid_carbon.yaml, "given", or "series"
    g_per_kwh: float     # gCO2e a kWh (a series: its mean)
    pue: float           # the facility's energy over the IT equipment's
    series: tuple[float, ...] = ()  # hourly gCO2e a kWh from the job's start, repeating

    def intensity(self, seconds: Any = None) -> Any:
        """gCO2e a kWh over a job of `seconds` (a number or an array) from its start: the series' mean over those
        hours (the whole series where `seconds` is None), else the grid's one figure."""
        if not self.series or seconds is None:
            return self.g_per_kwh if seconds is None else np.full(np.shape(seconds), self.g_per_kwh)
        series = np.asarray(self.series)
        hours = np.maximum(np.asarray(seconds, float) / 3600.0, 1e-9)
        laps, rest = np.divmod(hours, len(series))
        whole = np.floor(rest).astype(int)
        done = np.concatenate([[0.0], np.cumsum(series)])  # the series summed to each whole hour
        return (laps * done[-1] + done[whole] + (rest - whole) * series[np.minimum(whole, len(series) - 1)]) / hours

    def mean_between(self, start_s: Any, end_s: Any) -> Any:
        """gCO2e a kWh over each span of a job's time from `start_s` to `end_s` seconds (arrays; each end after its
        start): the series' integral over the span, over its length."""
        start, end = np.asarray(start_s, float), np.asarray(end_s, float)
        summed = [np.where(t > 0, self.intensity(t) * t, 0.0) for t in (start, end)]  # the integral from the start
        return (summed[1] - summed[0]) / (end - start)

    def grams(self, joules: Any, seconds: Any = None) -> Any:
        """gCO2e of `joules` drawn evenly over `seconds` from the job's start (`intensity`)."""
        return joules / 3.6e6 * self.pue * self.intensity(seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"grid": self.name, "g_per_kwh": self.g_per_kwh, "pue": self.pue,
                **({"series_hours": len(self.series)} if self.series else {}),
                "counts": "the GPU's energy x PUE (the host's and the network's power not counted)"}


def grid_at(name: str | None = None, carbon_intensity: float | None = None, pue: float | str | None = None,
            carbon_series: Sequence[float] | None = None) -> Grid:
    """A `Grid` from a country code of grid_carbon.yaml (`name`, default WORLD), a `carbon_intensity` (gCO2e a
    kWh) or a `carbon_series` (hourly gCO2e a kWh from the job's start, repeating), and a PUE (a number from 1 to 3,
    or 'average' / 'hyperscale', default the average); one InputError naming the field otherwise."""
    table = reference("grid_carbon")
    given = [k for k, v in (("grid", name), ("carbon_intensity", carbon_intensity), ("carbon_series", carbon_series))
             if v is not None]
    if len(given) > 1:
        raise InputError(given[1], f"give one of grid, carbon_intensity and carbon_series, not {' and '.join(given)}")
    pue_value = _pue(table["pue"], DEFAULT_PUE if pue is None else pue)
    if carbon_series is not None:
        series = check_series(carbon_series, "carbon_series")
        return Grid("series", float(np.mean(series)), pue_value, series)
    if carbon_intensity is not None:
        number = isinstance(carbon_intensity, (int, float)) and not isinstance(carbon_intensity, bool)
        if not number or not 0 <= carbon_intensity <= MAX_G_PER_KWH:  # NaN fails the range
            raise InputError("carbon_intensity", f"must be gCO2e a kWh from 0 to {MAX_G_PER_KWH:,.0f}, got "
                                                 f"{carbon_intensity!r}")
        where, intensity = "given", float(carbon_intensity)
    else:
        if isinstance(name, (int, float)) and not isinstance(name, bool):  # carbon(est, 300): meant the intensity
            raise InputError("grid", f"a country code, got the number {name!r}; a grid's gCO2e a kWh is "
                                     "carbon_intensity (--carbon-intensity)")
        known = table["g_per_kwh"]
        where = DEFAULT_GRID if name is None else str(name).upper()
        if where not in known:
            raise InputError("grid", f"unknown {name!r}; known: {', '.join(known)} (or give a carbon intensity, "
                                     "gCO2e a kWh)")
        intensity = float(known[where])
    return Grid(where, intensity, pue_value)


def check_series(values: Any, field: str) -> tuple[float, ...]:
    """An hourly carbon series: 1 to MAX_SERIES_HOURS numbers, each gCO2e a kWh from 0 to MAX_G_PER_KWH; one line
    naming the field (and the hour) otherwise."""
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise InputError(field, f"must be a list of hourly figures (gCO2e a kWh), got {kind_of(values)}")
    if not 0 < len(values) <= MAX_SERIES_HOURS:
        raise InputError(field, f"must hold 1 to {MAX_SERIES_HOURS:,} hourly figures (a year of hours), got "
                                f"{len(values):,}")
    for hour, v in enumerate(values):  # a check of input, not a hot path
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= MAX_G_PER_KWH:
            raise InputError(f"{field}[{hour}]", f"must be gCO2e a kWh from 0 to {MAX_G_PER_KWH:,.0f}, got {v!r}")
    return tuple(float(v) for v in values)


def _pue(named: Mapping[str, float], value: float | str) -> float:
    if isinstance(value, str) and value in named:
        return float(named[value])
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not PUE_RANGE[0] <= value <= PUE_RANGE[1]:
        raise InputError("pue", f"must be a number from {PUE_RANGE[0]:g} to {PUE_RANGE[1]:g}, or one of "
                                f"{', '.join(named)}, got {value!r}")
    return float(value)


def carbon(estimate: Any, grid: Grid | str | None = None, carbon_intensity: float | None = None,
           pue: float | str | None = None, carbon_series: Sequence[float] | None = None) -> Any:
    """The carbon (gCO2e) of an estimate's energy figures (an `Estimate`, a job's, or its `to_dict()`), each as
    CARBON_FIGURES names it, and the grid as `carbon` (its `g_per_kwh` the intensity applied): at `grid` (a `Grid`,
    or a country code with `pue`), at `carbon_intensity`, or on `carbon_series` over the job's time (`duration_s`
    or `time_s`; none: the series' mean) (default: WORLD's average, the average PUE; `grid_at`). A figure the
    estimate leaves empty (a serving load's energy without a duration) stays None. A table of estimates
    (`estimate_many`'s) comes back with its carbon columns (`with_carbon`, over each row's `time_s`)."""
    where = grid if isinstance(grid, Grid) else grid_at(grid, carbon_intensity, pue, carbon_series)
    if isinstance(estimate, pd.DataFrame):
        return with_carbon(estimate, where, estimate["time_s"].to_numpy() if "time_s" in estimate else None)
    if not isinstance(estimate, Mapping) and not callable(getattr(estimate, "to_dict", None)):
        raise InputError("estimate", "an estimate (joulecast.estimate, generate, serve, train_run) or its to_dict(), "
                                     f"got {kind_of(estimate)}")
    figures = estimate if isinstance(estimate, Mapping) else estimate.to_dict()
    seconds = figures.get("duration_s") or figures.get("time_s")
    factor, out = float(where.grams(1.0, seconds)), {}
    windows = figures.get("windows")
    if windows:  # a load served window by window (`estimator.serving.ServeWindows`): each window's energy at its hours
        start, energy = np.asarray(windows["start_s"], float), np.asarray(windows["energy_j"], float)
        grams = energy / 3.6e6 * where.pue * where.mean_between(start, start + np.asarray(windows["duration_s"]))
        factor, out["window_carbon_g"] = float(grams.sum() / energy.sum()), grams.tolist()
    for energy, grams in CARBON_FIGURES.items():
        if energy in figures:
            value = figures[energy]
            out[grams] = (None if value is None else [factor * float(v) for v in value]
                          if isinstance(value, (list, tuple)) else factor * float(value))
    intensity = factor * 3.6e6 / where.pue if windows else float(where.intensity(seconds))
    return {**out, "carbon": {**where.to_dict(), "g_per_kwh": intensity}}


# A table's energy columns (J) and the carbon columns (g) they give (`with_carbon`).
CARBON_COLUMNS = {"energy_j": "carbon_g", "energy_lo_j": "carbon_lo_g", "energy_hi_j": "carbon_hi_g",
                  "energy_per_token_j": "carbon_per_token_g"}


def with_carbon(table: Any, where: Grid, seconds: Any = None, intensity: Any = None) -> Any:
    """A table of estimates (`estimate_many`'s, a sweep's points) with the grid, the intensity applied and PUE, and
    the carbon of each energy column it has (CARBON_COLUMNS), each column scaled at once; on a series over each row's
    `seconds` (an array; none: the series' mean), or at each row's `intensity` where given (gCO2e a kWh: a load
    served window by window, each window's energy at its own hours, `Grid.mean_between`)."""
    if intensity is None:
        g_per_kwh, scale = where.intensity(seconds), where.grams(1.0, seconds)
    else:
        g_per_kwh = np.asarray(intensity, float)
        scale = 1.0 / 3.6e6 * where.pue * g_per_kwh  # as `Grid.grams` orders it
    return table.assign(grid=where.name, g_per_kwh=g_per_kwh, pue=where.pue,
                        **{grams: table[joules] * scale for joules, grams in CARBON_COLUMNS.items() if joules in table})
