"""The carbon of an estimate's energy: its grid's intensity (gCO2e a kWh, a country's annual average from
data/distributed/grid_carbon.yaml, or one given) times the datacenter's PUE (its average or hyperscale figure there,
or one given), the GPU's energy only: the host's and the network's power are not counted (a plan's sites count them,
`joulecast.estimator.plan`). An interval of energy is one of carbon, the intensity and PUE taken as given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joulecast.data.errors import InputError
from joulecast.data.files import kind_of
from joulecast.data.job_file import reference

DEFAULT_GRID = "WORLD"   # as a plan's site that names none
DEFAULT_PUE = "average"  # the industry average, as a plan's site that names none
MAX_G_PER_KWH = 2_000.0  # over any grid's annual average (coal-fired generation is about 1,000)
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

    name: str            # a country code of grid_carbon.yaml, or "given"
    g_per_kwh: float     # gCO2e a kWh
    pue: float           # the facility's energy over the IT equipment's

    def grams(self, joules: float) -> float:
        return joules / 3.6e6 * self.pue * self.g_per_kwh

    def to_dict(self) -> dict[str, Any]:
        return {"grid": self.name, "g_per_kwh": self.g_per_kwh, "pue": self.pue,
                "counts": "the GPU's energy x PUE (the host's and the network's power not counted)"}


def grid_at(name: str | None = None, carbon_intensity: float | None = None, pue: float | str | None = None) -> Grid:
    """A `Grid` from a country code of grid_carbon.yaml (`name`, default WORLD) or a `carbon_intensity` (gCO2e a
    kWh), and a PUE (a number from 1 to 3, or 'average' / 'hyperscale', default the average); one InputError naming
    the field otherwise."""
    table = reference("grid_carbon")
    if name is not None and carbon_intensity is not None:
        raise InputError("grid", "give a grid or a carbon intensity, not both")
    if carbon_intensity is not None:
        number = isinstance(carbon_intensity, (int, float)) and not isinstance(carbon_intensity, bool)
        if not number or not 0 <= carbon_intensity <= MAX_G_PER_KWH:  # NaN fails the range
            raise InputError("carbon_intensity", f"must be gCO2e a kWh from 0 to {MAX_G_PER_KWH:,.0f}, got "
                                                 f"{carbon_intensity!r}")
        where, intensity = "given", float(carbon_intensity)
    else:
        known = table["g_per_kwh"]
        where = DEFAULT_GRID if name is None else str(name).upper()
        if where not in known:
            raise InputError("grid", f"unknown {name!r}; known: {', '.join(known)} (or give a carbon intensity, "
                                     "gCO2e a kWh)")
        intensity = float(known[where])
    return Grid(where, intensity, _pue(table["pue"], DEFAULT_PUE if pue is None else pue))


def _pue(named: Mapping[str, float], value: float | str) -> float:
    if isinstance(value, str) and value in named:
        return float(named[value])
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not PUE_RANGE[0] <= value <= PUE_RANGE[1]:
        raise InputError("pue", f"must be a number from {PUE_RANGE[0]:g} to {PUE_RANGE[1]:g}, or one of "
                                f"{', '.join(named)}, got {value!r}")
    return float(value)


def carbon(estimate: Any, grid: Grid | str | None = None, carbon_intensity: float | None = None,
           pue: float | str | None = None) -> dict[str, Any]:
    """The carbon (gCO2e) of an estimate's energy figures (an `Estimate`, a job's, or its `to_dict()`), each as
    CARBON_FIGURES names it, and the grid as `carbon`: at `grid` (a `Grid`, or a country code with `pue`), or at
    `carbon_intensity` (default: WORLD's average, the average PUE; `grid_at`). A figure the estimate leaves empty (a
    serving load's energy without a duration) stays None."""
    where = grid if isinstance(grid, Grid) else grid_at(grid, carbon_intensity, pue)
    if not isinstance(estimate, Mapping) and not callable(getattr(estimate, "to_dict", None)):
        raise InputError("estimate", "an estimate (joulecast.estimate, generate, serve, train_run) or its to_dict(), "
                                     f"got {kind_of(estimate)}")
    figures = estimate if isinstance(estimate, Mapping) else estimate.to_dict()
    out: dict[str, Any] = {}
    for energy, grams in CARBON_FIGURES.items():
        if energy in figures:
            value = figures[energy]
            out[grams] = (None if value is None else [where.grams(float(v)) for v in value]
                          if isinstance(value, (list, tuple)) else where.grams(float(value)))
    return {**out, "carbon": where.to_dict()}


# A table's energy columns (J) and the carbon columns (g) they give (`with_carbon`).
CARBON_COLUMNS = {"energy_j": "carbon_g", "energy_lo_j": "carbon_lo_g", "energy_hi_j": "carbon_hi_g",
                  "energy_per_token_j": "carbon_per_token_g"}


def with_carbon(table: Any, where: Grid) -> Any:
    """A table of estimates (`estimate_many`'s, a sweep's points) with the grid, its intensity and PUE, and the
    carbon of each energy column it has (CARBON_COLUMNS), each column scaled at once."""
    scale = where.grams(1.0)
    return table.assign(grid=where.name, g_per_kwh=where.g_per_kwh, pue=where.pue,
                        **{grams: table[joules] * scale for joules, grams in CARBON_COLUMNS.items() if joules in table})
