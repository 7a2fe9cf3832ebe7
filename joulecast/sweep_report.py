"""A sweep's self-contained HTML report: the Pareto front of energy against time as an inline SVG (log axes, every
point, or past the points it labels one circle a pixel and colour; the frontier joined, each of its points with its
90 % interval), and the frontier's points in a table. No script, no external file, no plotting library: the core
install renders it."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.files import write_atomic
from joulecast.estimator.sweep import FLOAT_AXES
from joulecast.render import (figure, grid_place, plural, sample_of, setting_text, settings_shown, si,
                              trace_text, unmet_text)

_W, _H, _PAD = 760, 460, 60
_INSET = 0.04  # of an axis' span, each end
_LABELLED = 20_000  # points up to this many carry a hover label (the configuration and its figures)
# A feasible point's colour by its GPU (a plan's: its strategy) where a sweep has several (Tableau's ten less its red,
# the front's), with a legend: which GPU a point is, without hovering over each
_GROUP_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
COLUMNS = ("model", "gpu", "batch", "micro_batch_auto", "seq", "output_len", "lora_rank", "recompute", "dtype", "tp",
           "tp_auto", "instances", "headroom", "cold_start_s", "reaction_s", "sm_clock_mhz", "power_limit_w",
           "energy_j", "time_s", "power_w", "tokens_per_s", "wait_s", "ttft_s", "ttft_p99_s", "itl_p99_s",
           "energy_per_token_j", "grid", "carbon_g", "flags")
# a serving point's 99th percentiles, in the table where a constraint bounds them
_BOUNDED_ONLY = {"ttft_p99_s": "max_ttft_p99_s", "itl_p99_s": "max_itl_p99_s"}


def columns(result: Any) -> list[str]:
    """The table's columns for a sweep's points: COLUMNS with its two size columns (`SweepResult.sizes`; the one of a
    sweep over images, whose seq is 1), those the points have (the model, tensor parallelism and instances where they
    vary; the output length where it is an axis; a serving point's 99th percentiles where a constraint bounds
    them)."""
    named = [{"batch": result.sizes[0], "seq": result.sizes[1]}.get(c, c) for c in COLUMNS]
    return [c for c in named if c in result.points and (c not in ("model", "tp", "instances", *FLOAT_AXES)
                                                         or varies(result.points, c))
            and (c != result.sizes[1] or result.unit != "image")
            and (c not in _BOUNDED_ONLY or _BOUNDED_ONLY[c] in result.constraints)]


def headings(result: Any) -> dict[str, str]:
    """The shown name of a column whose name counts tokens, in a sweep over images (`SweepResult.unit`): its
    images."""
    if result.unit != "image":
        return {}
    return {c: c.replace("token", "image") for c in ("tokens_per_s", "energy_per_token_j", "s_per_token",
                                                     "carbon_per_token_g")}


def shown_table(frame: pd.DataFrame, result: Any) -> pd.DataFrame:
    """A sweep's points as its tables show them: its columns (`columns`), settings as `settings_shown` has them,
    token columns named for the sweep's unit (`headings`)."""
    return settings_shown(frame, columns(result)).rename(columns=headings(result))


def varies(points: pd.DataFrame, column: str) -> bool:
    """Whether the points have `column` with more than one value (a model or TP shown only where it does)."""
    return column in points and points[column].nunique() > 1


def _scale(values: np.ndarray, size: float, flip: bool) -> tuple[np.ndarray, float, float]:
    """Positions on a log axis of `size` pixels, the extremes _INSET of the span inside the frame (a point drawn on
    the frame's line is half hidden), and the axis' ends (log10)."""
    lo, hi = math.log10(values.min()), math.log10(values.max())
    hi = hi if hi > lo else lo + 1
    lo, hi = lo - _INSET * (hi - lo), hi + _INSET * (hi - lo)
    pos = (np.log10(values) - lo) / (hi - lo) * (size - 2 * _PAD) + _PAD
    return (size - pos if flip else pos), lo, hi


# A vertical axis' interval columns and the column they bound: a point's bars are its axis value scaled as its bounds
# scale that column (energy a token: energy_lo_j / energy_j of the same point)
_INTERVAL_COLUMNS = {"carbon": ("carbon_lo_g", "carbon_hi_g", "carbon_g"),
                     "energy": ("energy_lo_j", "energy_hi_j", "energy_j")}


def _front_interval(points: pd.DataFrame, axis: str, values: np.ndarray, front: np.ndarray) -> np.ndarray:
    """The front's points' 90 % interval on the vertical `axis` (n x 2, NaN off the front or where the points carry
    no bounds for it)."""
    out = np.full((len(values), 2), np.nan)
    lo, hi, of = _INTERVAL_COLUMNS["carbon" if axis.startswith("carbon") else "energy"]
    if not {lo, hi, of} <= set(points.columns) or not front.any():
        return out
    base = points[of].to_numpy(float)[front]
    with np.errstate(divide="ignore", invalid="ignore"):
        bounds = values[front, None] * points[[lo, hi]].to_numpy(float)[front] / base[:, None]
    out[front] = np.where((bounds > 0) & np.isfinite(bounds), bounds, np.nan)
    return out


def _ticks(lo: float, hi: float) -> list[float]:
    """Ticks at 1, 2 and 5 of each decade within [10^lo, 10^hi]; at each whole digit where fewer than three fall
    inside (an axis within a decade: 3, 4, 5, 6 M); the two ends where even those are fewer."""
    for digits in ((1, 2, 5), range(1, 10)):
        ticks = [m * 10.0 ** e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in digits
                 if lo <= math.log10(m * 10.0 ** e) <= hi]
        if len(ticks) >= 3:
            return ticks
    return sorted({10.0 ** lo, *ticks, 10.0 ** hi})


def _tick(value: float) -> str:
    """A tick's label: 1,000 and 0.0002 as written; from 100,000 up with an SI prefix (500 k, 2.25 M: the axis
    names its unit), 1e-05 below 0.0001."""
    if value >= 1e5:
        return si(value, "").rstrip()
    return f"{value:.3g}" if value < 1e-4 else figure(value)


_LABELS = {"time_s": "time a pass (s)", "energy_j": "energy a pass (J)",
           "s_per_token": "time a token (s; 1 / tokens a second)", "energy_per_token_j": "energy a token (J)",
           "carbon_g": "carbon a pass (g CO2e)", "carbon_per_token_g": "carbon a token (g CO2e)"}


def svg(points: Any, axes: tuple[str, str] = ("time_s", "energy_j"), names: list[str] | None = None,
        labels: dict[str, str] | None = None, sizes: tuple[str, str] = ("batch", "seq"), group: str = "gpu") -> str:
    """Energy (vertical) against time (horizontal), a pass's or a token's, log-log; feasible points blue (coloured
    by their `group` column, with a legend, where it has two to nine values: a sweep's GPUs, a plan's strategies),
    others grey, the Pareto front red and joined, each of its points with its 90 % interval where the points carry
    the bounds (`_front_interval`). `names` label the points (default: a sweep's configuration, its
    size columns `sizes`), `labels` the axes (default: a sweep's)."""
    labels = labels or _LABELS
    sizes_shown = [c.replace("_", "-") for c in sizes]
    drawn_at = np.isfinite(points[axes[0]].to_numpy(float)) & np.isfinite(points[axes[1]].to_numpy(float))
    undrawn = int((~drawn_at).sum())  # points without figures (a request rate past its GPU's capacity): no place
    if not drawn_at.any():
        return f"<p>No point to draw: {plural(undrawn, 'point')} without figures (past their GPU's capacity).</p>"
    if undrawn:
        points, names = points[drawn_at], None if names is None else [n for n, k in zip(names, drawn_at) if k]
    t, e = points[axes[0]].to_numpy(float), points[axes[1]].to_numpy(float)
    front = points["pareto"].to_numpy(bool)
    bars = _front_interval(points, axes[1], e, front)  # (n, 2) of the front's points, NaN elsewhere
    x, xlo, xhi = _scale(t, _W, False)
    drawn_bars = np.isfinite(bars).all(axis=1)
    every, ylo, yhi = _scale(np.concatenate([e, bars[drawn_bars].ravel()]), _H, True)  # the axis holds the bars too
    y, bar_y = every[:len(e)], np.full(bars.shape, np.nan)
    bar_y[drawn_bars] = every[len(e):].reshape(-1, 2)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{_W}' height='{_H}' role='img' "
             "aria-label='energy against time, Pareto front'>",
             f"<rect x='0' y='0' width='{_W}' height='{_H}' fill='white'/>",
             f"<rect x='{_PAD}' y='{_PAD}' width='{_W - 2 * _PAD}' height='{_H - 2 * _PAD}' fill='none' stroke='#999'/>"]
    for v in _ticks(xlo, xhi):
        px = (math.log10(v) - xlo) / (xhi - xlo) * (_W - 2 * _PAD) + _PAD
        if _PAD - 1 <= px <= _W - _PAD + 1:
            parts.append(f"<line x1='{px:.1f}' y1='{_PAD}' x2='{px:.1f}' y2='{_H - _PAD}' stroke='#eee'/>"
                         f"<text x='{px:.1f}' y='{_H - _PAD + 16}' font-size='11' "
                         f"text-anchor='middle'>{_tick(v)}</text>")
    for v in _ticks(ylo, yhi):
        py = _H - ((math.log10(v) - ylo) / (yhi - ylo) * (_H - 2 * _PAD) + _PAD)
        if _PAD - 1 <= py <= _H - _PAD + 1:
            parts.append(f"<line x1='{_PAD}' y1='{py:.1f}' x2='{_W - _PAD}' y2='{py:.1f}' stroke='#eee'/>"
                         f"<text x='{_PAD - 6}' y='{py + 4:.1f}' font-size='11' text-anchor='end'>{_tick(v)}</text>")
    parts.append(f"<text x='{_W / 2}' y='{_H - 12}' font-size='13' text-anchor='middle'>{labels[axes[0]]}</text>"
                 f"<text x='16' y='{_H / 2}' font-size='13' text-anchor='middle' "
                 f"transform='rotate(-90 16 {_H / 2})'>{labels[axes[1]]}</text>")
    feasible = points["feasible"].to_numpy(bool)
    if len(points) > _LABELLED:
        names = [""] * len(points)
    elif names is None:
        grid = points["grid"] if "grid" in points else pd.Series("", index=points.index)
        tp = points["tp"] if varies(points, "tp") else pd.Series(np.nan, index=points.index)
        out = points["output_len"] if "output_len" in points else pd.Series(np.nan, index=points.index)
        rank, redo = (points[c] if c in points else pd.Series(np.nan, index=points.index)  # a training run's axes
                      for c in ("lora_rank", "recompute"))
        model = points["model"] + " on " if varies(points, "model") else pd.Series("", index=points.index)
        shape = [" ".join(f"{name} {v}" for name, v in zip(sizes_shown, values))
                 for values in zip(*(points[c].astype(str) for c in sizes))]
        names = [f"{r.model}{r.gpu} {r.shape}"
                 + (f" output-len {r.out:.0f}" if r.out == r.out else "") + f" {r.dtype}"
                 + (f", TP {r.tp:.0f}" if r.tp == r.tp else "")
                 + (f", LoRA rank {r.rank:.0f}" if r.rank == r.rank else "")
                 + (f", recompute {r.redo}" if isinstance(r.redo, str) else "") + f", clock "
                 f"{r.sm_clock_mhz}, limit {r.power_limit_w}: {figure(r.energy_j)} J in {figure(r.time_s)} s"
                 + (f", {figure(r.carbon_g)} g CO2e {grid_place(r.grid)}" if r.grid else "")
                 for r in points[["gpu", "dtype", "energy_j", "time_s"]]
                 .assign(shape=shape, sm_clock_mhz=setting_text(points["sm_clock_mhz"]),
                         power_limit_w=setting_text(points["power_limit_w"]), grid=grid,
                         carbon_g=points.get("carbon_g", np.nan), tp=tp, out=out, model=model, rank=rank,
                         redo=redo).itertuples()]
    names = [html.escape(n) for n in names]
    groups = list(dict.fromkeys(points[group])) if group in points else []
    by_group = 1 < len(groups) <= len(_GROUP_COLOURS)
    colours = (np.array(_GROUP_COLOURS)[points[group].map({g: i for i, g in enumerate(groups)}).to_numpy()] if by_group
               else np.full(len(points), "#4c78a8"))
    fills = np.where(feasible, colours, "#bbb")
    drawn = np.flatnonzero(~front)
    if len(points) > _LABELLED:  # unlabelled: one circle a pixel and colour, not each of a million on a 760 x 460 plot
        cells = np.column_stack([np.round(x[drawn]), np.round(y[drawn]),
                                 np.unique(fills[drawn], return_inverse=True)[1]])
        drawn = drawn[np.sort(np.unique(cells, axis=0, return_index=True)[1])]
    for i in drawn:
        parts.append(f"<circle class='point' cx='{x[i]:.1f}' cy='{y[i]:.1f}' r='3' fill='{fills[i]}' "
                     f"fill-opacity='0.6'><title>{names[i]}</title></circle>")
    outside = ([(f"over the constraints or memory{f' ({undrawn:,} past capacity, not drawn)' if undrawn else ''}",
                 "#bbb")] if (~feasible).any() or undrawn else [])
    if by_group or outside:  # above the frame, clear of the points: each GPU's colour, the front's, the grey, in rows
        legend, lx, ly = ["<g class='legend'>"], float(_PAD), 14.0
        met = set(points.loc[feasible, group]) if by_group else set()  # a group all grey says so: its colour unseen
        shown = [*((g if g in met else f"{g} (none feasible)", c) for g, c in zip(groups, _GROUP_COLOURS) if by_group),
                 ("Pareto front (90 % interval)" if drawn_bars.any() else "Pareto front", "#d62728"), *outside]
        for name, colour in shown:
            width = 22 + 6.5 * len(str(name))   # the 11 px font's width, about
            if lx + width > _W - _PAD:
                lx, ly = float(_PAD), ly + 16
            legend.append(f"<circle cx='{lx + 4:.0f}' cy='{ly:.0f}' r='4' fill='{colour}'/><text x='{lx + 12:.0f}' "
                          f"y='{ly + 4:.0f}' font-size='11'>{html.escape(str(name))}</text>")
            lx += width
        parts.append("".join(legend) + "</g>")
    order = np.flatnonzero(front)[np.argsort(t[front])]
    for i in order[drawn_bars[order]]:  # each front point's 90 % interval on the vertical axis, capped
        lo, hi = bar_y[i]
        parts.append(f"<path class='interval' d='M{x[i]:.1f},{lo:.1f}V{hi:.1f}M{x[i] - 3:.1f},{lo:.1f}h6"
                     f"M{x[i] - 3:.1f},{hi:.1f}h6' stroke='#d62728' stroke-opacity='0.5' fill='none'/>")
    if len(order):
        path = " ".join(f"{x[i]:.1f},{y[i]:.1f}" for i in order)
        parts.append(f"<polyline class='pareto-line' points='{path}' fill='none' stroke='#d62728' stroke-width='2'/>")
        parts += [f"<circle class='pareto' cx='{x[i]:.1f}' cy='{y[i]:.1f}' r='5' fill='#d62728'><title>{names[i]}"
                  "</title></circle>" for i in order]
    parts.append("</svg>")
    return "".join(parts)


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}.wide{overflow-x:auto}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;"
         "text-align:right}th{background:#eee}")


def table(frame: Any, cls: str = "frontier", columns: Sequence[str] | None = None) -> str:
    """An HTML table of `frame`'s `columns` (default all) that it has: numbers to 4 significant digits, NaN blank."""
    columns = list(frame.columns) if columns is None else [c for c in columns if c in frame]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    rows = []
    for record in frame[columns].to_dict(orient="records"):
        cells = "".join(f"<td>{'' if v != v else html.escape(figure(v) if isinstance(v, float) else str(v))}</td>"
                        for v in record.values())
        rows.append(f"<tr>{cells}</tr>")
    return f"<div class='wide'><table class='{cls}'><tr>{head}</tr>{''.join(rows)}</table></div>"


def page(title: str, body: str) -> str:
    """A self-contained HTML page: `title`, the reports' style, `body`."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}"
            f"</style></head><body>{body}</body></html>")


# A job sweep's axes: the whole run's or generation's energy and time.
_JOB_LABELS = {**_LABELS, "time_s": "time of the job (s)", "energy_j": "energy of the job (J)",
               "carbon_g": "carbon of the job (g CO2e)"}
# a serving point is one engine step (`point_note`)
_SERVE_LABELS = {**_LABELS, "time_s": "time between a request's tokens (s)", "energy_j": "energy a step (J)",
                 "carbon_g": "carbon a step (g CO2e)", "ttft_s": "time to first token, mean (s)"}


_BOUNDS = {"max_time_s": "time at most {:g} s", "min_tokens_per_s": "at least {:g} tokens/s",
           "max_power_w": "power at most {:g} W", "max_wait_s": "a request's mean wait at most {:g} s",
           "max_ttft_s": "a request's mean time to first token at most {:g} s",
           "max_ttft_p99_s": "99 % of first tokens within {:g} s",
           "max_itl_p99_s": "99 % of tokens within {:g} s of the one before"}


def constraints_text(constraints: dict[str, float], unit: str = "token") -> str:
    """A sweep's constraints as a reader writes them ('time at most 6000 s'; throughput in its `unit`s), 'none' where
    there are none."""
    return ", ".join(_BOUNDS[k].replace("tokens", f"{unit}s").format(v) for k, v in constraints.items()) or "none"


def counted(points: Any) -> str:
    """A sweep's configurations, and on several grids its points."""
    grids = points["grid"].nunique() if "grid" in points else 1
    n = len(points) // grids
    return plural(n, "configuration") + (f" on {grids} grids ({len(points):,} points)" if grids > 1 else "")


def point_note(result: Any) -> str:
    """What a sweep's point is, for its report and its terminal table: one pass, a whole job, or a serving load's
    step."""
    phases = set(result.points["phase"])
    if not phases & {"serve", "train-run", "generate"}:  # a single pass's settings, fixed for every point
        return "Each point one pass"
    if "serve" not in phases:
        return "Each point a whole job"
    return ("Each point a steady serving load; its energy_j, time_s and carbon_g are one engine step's (time_s: "
            "each request's time between output tokens)")


def _colour_by(points: pd.DataFrame) -> str:
    """A sweep's points coloured by GPU, or by model where the models vary and the GPUs do not."""
    return "model" if varies(points, "model") and not varies(points, "gpu") else "gpu"


def _in_images(labels: dict[str, str]) -> dict[str, str]:
    """Axis labels for a sweep over images: a token's figures an image's."""
    return {k: v.replace("tokens", "images").replace("a token", "an image") for k, v in labels.items()}


# A job's fixed options shown with their units, named without them ("{sample}": an image or a text model's sequence)
_JOB_UNITS = {"loader_rate": ("loader rate", "{sample}s a second"),
              "forward_overhead_s": ("forward overhead", "s a layer and forward pass"),
              "offload_gb": ("offload", "GiB"), "h2d_gbps": ("host-to-device copies", "GB/s"),
              "window_s": ("windows of", "s, each at its own arrival rate")}


def job_text(job: dict[str, Any], unit: str) -> str:
    """A sweep's fixed job options as words: kv cache on (not True), fusions a, b (not a list), counts whole with
    their thousands, the rest with their units; over images, tokens named images."""
    sample = sample_of(unit)

    def shown(k: str, v: Any) -> str:
        name, after = _JOB_UNITS.get(k, (k.replace("_", " "), ""))
        name = name.replace("tokens", "images") if unit == "image" else name  # a vision run counts images
        if isinstance(v, bool):
            text = "on" if v else "off"
        elif isinstance(v, (list, tuple)):
            text = ", ".join(map(str, v))
        elif isinstance(v, int):
            text = f"{v:,}"
        else:
            text = figure(float(v)) if isinstance(v, float) else str(v)
        return f"{name} {text}" + (f" {after.format(sample=sample)}" if after else "")

    return ", ".join(shown(k, v) for k, v in job.items())


def render(result: Any, title: str) -> str:
    best = result.best
    job = job_text(result.job, result.unit)
    phases = set(result.points["phase"])  # a single pass's fixed options (result.job) make no job of it
    labels = (_SERVE_LABELS if "serve" in phases else _JOB_LABELS if phases & {"train-run", "generate"}
              else _LABELS)
    labels = _in_images(labels) if result.unit == "image" else labels
    sizes = result.sizes[:1] if result.unit == "image" else result.sizes  # an image's seq is 1 (`columns`)
    lines = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{counted(result.points)} estimated; {int(result.points['feasible'].sum()):,} fit in "
             f"memory{', serve their rate' if 'request_rate' in result.points else ''} and meet the constraints "
             f"({html.escape(constraints_text(result.constraints, result.unit))}); "
             f"{len(result.pareto):,} on the Pareto "
             f"front of {labels[result.axes[1]]} against {labels[result.axes[0]]}"
             + "".join(f"; {n:,} left out: {html.escape(k)}" for k, n in result.skipped.items()) + ".</p>",
             f"<p>{html.escape(point_note(result))}: {html.escape(job)}.</p>" if result.job else "",
             f"<p>The load read from {html.escape(result.trace['format'])}: {html.escape(trace_text(result.trace))}."
             "</p>" if result.trace else "",
             "<h2>The Pareto front</h2>", svg(result.points, result.axes, labels=labels, sizes=sizes,
                                              group=_colour_by(result.points)),
             f"<h2>Best by {html.escape(result.objective)}</h2>",
             table(shown_table(best.to_frame().T, result)) if best is not None
             else f"<p>{html.escape(unmet_text(result.points))}</p>",
             "<h2>Its points</h2>", table(shown_table(result.pareto, result))]
    return page(title, "".join(lines))


def write(result: Any, folder: str | Path, title: str) -> Path:
    path = Path(folder) / "report.html"
    page = render(result, title)
    write_atomic(path, lambda tmp: tmp.write_text(page))
    return path
