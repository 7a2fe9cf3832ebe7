"""A load served window by window as a self-contained HTML report (`estimate --phase serve --requests FILE --window S
--report DIR`): its figures, and bar charts over time of its power, arrivals, the instances serving it where
autoscaled, the requests left waiting where queued, its requests' mean prompt where its windows have lengths of their
own, the time within which 99 % of its requests have their first token and 99 % of its gaps between tokens come,
and its carbon where read on an hourly series, each an inline SVG; the busiest windows in a table. No script, no
external file, no plotting library: the core install renders it."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.files import write_atomic
from joulecast.render import binned, duration, figure, plural
from joulecast.sweep_report import page, table

_W, _H, _PAD, _TOP = 760, 150, 56, 24  # the charts' size, their side and bottom margins, their top one
# Each chart's bars' colour (Tableau's), by its class
_COLOURS = {"power": "#ff7f0e", "rate": "#1f77b4", "instances": "#7f7f7f", "prompt": "#9467bd", "queue": "#d62728",
            "carbon": "#2ca02c", "latency": "#8c564b"}
MAX_BARS = 600  # a chart's bars at most: past it, each bar the mean of as many windows as fit in one
BUSIEST = 10    # windows in the table of the busiest
_TICKS = (0, 0.25, 0.5, 0.75, 1)  # the time axis' labels, as shares of the span


def bars_svg(values: np.ndarray, span_s: float, label: str, cls: str) -> str:
    """A bar chart of `values` over `span_s` seconds (a bar a window, or the mean of several: MAX_BARS at most),
    its vertical axis from 0 to the largest, its time axis in hours or days from the first request."""
    n = min(len(values), MAX_BARS)
    shown = binned(np.asarray(values, float), n)
    top = float(shown.max()) or 1.0
    width = (_W - 2 * _PAD) / n
    heights = shown / top * (_H - _PAD - _TOP)
    rects = "".join(f"<rect class='{cls}' x='{_PAD + k * width:.2f}' y='{_H - _PAD - h:.2f}' "
                    f"width='{max(width, 0.5):.2f}' height='{h:.2f}' fill='{_COLOURS.get(cls, '#1f77b4')}'><title>"
                    f"{html.escape(duration(k * span_s / n))}: {figure(v)}</title></rect>"
                    for k, (h, v) in enumerate(zip(heights, shown)))
    ticks = "".join(f"<text x='{_PAD + f * (_W - 2 * _PAD):.1f}' y='{_H - _PAD + 16}' text-anchor='middle' "
                    f"font-size='11'>{html.escape(duration(f * span_s)) if f else '0'}</text>" for f in _TICKS)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{_W}' height='{_H}' role='img' aria-label='"
            f"{html.escape(label)}'><rect x='{_PAD}' y='{_TOP}' width='{_W - 2 * _PAD}' height='{_H - _PAD - _TOP}' "
            f"fill='none' stroke='#999'/>{rects}{ticks}"
            f"<text x='{_PAD}' y='{_TOP - 8}' font-size='12'>{html.escape(label)} (at most {figure(top)})</text>"
            f"<text x='{_W / 2}' y='{_H - 12}' text-anchor='middle' font-size='11'>time from the first request</text>"
            "</svg>")


def render(job: Any, figures: dict[str, Any], source: str, origin_s: float | None = None) -> str:
    """The report of `job` (a `ServeEstimate` served window by window), its carbon `figures`
    (`joulecast.data.carbon.carbon`'s) and the requests it was read from (`source`: a line saying so), the windows'
    starts as UTC times where `origin_s` (the first arrival's, seconds since 1970) is known."""
    from joulecast.data.requests import utc_text
    from joulecast.render import carbon_line, own_lengths, serve_table, with_line

    w = job.windows
    span = float(w.duration_s.sum())
    charts = [bars_svg(w.power_w, span, "power, all instances (W)", "power"),
              bars_svg(w.request_rate, span, "arrivals (requests a second)", "rate")]
    if job.autoscale:
        charts.append(bars_svg(w.serving, span, "instances serving", "instances"))
        if not np.allclose(w.serving, w.instances):  # reactive, its starts loading within windows
            charts.append(bars_svg(w.instances, span, "instances running (serving or starting)", "instances"))
    if job.queue and w.backlog.any():  # queued: the requests left waiting at each window's end
        charts.append(bars_svg(w.backlog, span, "requests waiting at the window's end", "queue"))
    if own_lengths(w):  # each window at its requests' lengths (none where it has no arrivals)
        charts.append(bars_svg(np.where(w.request_rate > 0, w.input_len, 0.0), span,
                               "a request's mean prompt (tokens)", "prompt"))
    # its latency window by window (none where a window has no arrivals, or its answers no gap)
    charts += [bars_svg(np.nan_to_num(np.where(w.request_rate > 0, values, np.nan)), span, label, "latency")
               for values, label in ((w.ttft_p99_s, "99 % of first tokens within (s)"),
                                     (w.itl_p99_s, "99 % of gaps between tokens within (s)"))
               if np.isfinite(values[w.request_rate > 0]).any()]
    if figures.get("window_carbon_g") is not None:  # on an hourly series, each window's own hours
        charts.append(bars_svg(np.asarray(figures["window_carbon_g"]) / (w.duration_s / 3600), span,
                               "carbon (g CO2e an hour)", "carbon"))
    busiest = np.argsort(-w.request_rate, kind="stable")[:BUSIEST]
    starts = [utc_text(origin_s + s) if origin_s is not None else duration(s) for s in w.start_s[busiest]]
    rows = pd.DataFrame({"window": busiest + 1, "from": starts,
                         "requests/s": w.request_rate[busiest], "in flight an instance": w.batch[busiest],
                         "instances": w.instances[busiest], "prompt (tokens)": w.input_len[busiest],
                         "answer (tokens)": w.output_len[busiest], "time a token (s)": w.step_time_s[busiest],
                         "first token (s)": (w.prefill_s + w.slot_wait_s + w.wait_s)[busiest],
                         "99 % first token (s)": w.ttft_p99_s[busiest],
                         "99 % gap between tokens (s)": w.itl_p99_s[busiest],
                         "power (W)": w.power_w[busiest], "energy (kWh)": w.energy_j[busiest] / 3.6e6})
    title = f"Serving {job.model} on {job.gpu}, window by window"
    body = (f"<h1>{html.escape(title)}</h1><p>{html.escape(source)}</p>"
            f"<pre style='white-space:pre-wrap'>"
            f"{html.escape(with_line(serve_table(job, origin_s), carbon_line(figures)))}</pre>"
            f"<h2>Over time: {plural(len(w.request_rate), 'window')} of {html.escape(duration(w.window_s))}</h2>"
            + "".join(charts)
            + f"<h2>The busiest {plural(len(busiest), 'window')}</h2>" + table(rows, cls="busiest"))
    return page(title, body)


def write(job: Any, figures: dict[str, Any], source: str, folder: str | Path, origin_s: float | None = None) -> Path:
    path = Path(folder) / "report.html"
    text = render(job, figures, source, origin_s)
    write_atomic(path, lambda tmp: tmp.write_text(text))
    return path
