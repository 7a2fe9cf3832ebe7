"""A plan's self-contained HTML report: its strategies side by side, and with a sweep the Pareto front of energy
(or carbon) against time to finish, drawn by the sweep report's inline SVG (no script, no external file)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd

from joulecast.data.files import write_atomic
from joulecast.render import article, bandwidth_text, plan_batch_text, plural, settings_shown
from joulecast.sweep_report import page, svg, table


_FRONT_COLUMNS = ("strategy", "sites", "power_limit_w", "H", "P", "tau", "bits", "gbps", "time_h", "energy_kwh",
                  "energy_lo_kwh", "energy_hi_kwh", "carbon_kg", "compute_utilisation", "inter_site_gb",
                  "locally_met_share")


def render(result: Any, points: pd.DataFrame | None, front: str = "energy") -> str:
    job = result.job
    plans = pd.DataFrame([{"strategy": p.strategy, "time (h)": p.time_s / 3600,
                           "time low (h)": p.time_interval_s[0] / 3600, "time high (h)": p.time_interval_s[1] / 3600,
                           "energy (kWh)": p.energy_j / 3.6e6,
                           "energy low (kWh)": p.energy_interval_j[0] / 3.6e6,
                           "energy high (kWh)": p.energy_interval_j[1] / 3.6e6, "carbon (kg)": p.carbon_kg,
                           "compute utilisation": p.compute_utilisation,
                           f"J {article(job.unit)} {job.unit}": p.energy_per_token_j,
                           "locally met": p.locally_met_share,
                           "inter-site (GB)": p.bytes_per_link["inter_site"] / 1e9,
                           "Gbit/s for 90 %": bandwidth_text(p.bandwidth_for_90pct_gbps, len(job.sites)),
                           **{f"{k} (kWh)": v / 3.6e6 for k, v in p.energy_split_j.items()}} for p in result.plans])
    parts = [f"<h1>joulecast plan: {html.escape(job.name)}</h1>",
             f"<p>{html.escape(job.model_name)}, {plural(job.gpus, 'GPU')} on {plural(len(job.sites), 'site')}, "
             f"{plural(job.steps, 'step')} of {plan_batch_text(job)}.</p>",
             "<h2>Strategies</h2>", table(plans, "plans")]
    if points is not None and len(points):
        # in the strategies table's units: hours and kWh, not seconds and joules
        points = points.assign(time_h=points["time_s"] / 3600, energy_kwh=points["energy_j"] / 3.6e6,
                               energy_lo_kwh=points["energy_lo_j"] / 3.6e6, energy_hi_kwh=points["energy_hi_j"] / 3.6e6,
                               inter_site_gb=points["inter_site_bytes"] / 1e9)
        axis = "energy_kwh" if front == "energy" else "carbon_kg"
        shown = points.assign(feasible=True)
        names = [f"{r.strategy} on {r.sites}: H {r.H} P {r.P} tau {r.tau} {r.bits}-bit at {r.gbps:g} Gbit/s"
                 + (f", GPUs at {r.power_limit_w:g} W" if r.power_limit_w == r.power_limit_w else "")  # NaN: the file's
                 for r in shown.itertuples()]
        labels = {"time_h": "time to finish (h)", axis: "energy (kWh)" if front == "energy" else "carbon (kg CO2)"}
        parts += [f"<h2>The Pareto front: {html.escape(labels[axis])} against time to finish</h2>",
                  f"<p>{len(points):,} points swept; {int(points['pareto'].sum())} on the front.</p>",
                  svg(shown, ("time_h", axis), names=names, labels=labels, group="strategy"),
                  "<h2>Its points</h2>", table(settings_shown(points[points["pareto"]].sort_values("time_s"),
                                                             _FRONT_COLUMNS))]
    return page(f"joulecast plan {job.name}", "".join(parts))


def write(result: Any, points: pd.DataFrame | None, folder: str | Path, front: str = "energy") -> Path:
    path = Path(folder) / "plan.html"
    page = render(result, points, front)
    write_atomic(path, lambda tmp: tmp.write_text(page))
    return path
