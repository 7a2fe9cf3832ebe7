"""The audit's report: one self-contained HTML file (tables, figures inlined as PNG) and a JSON summary."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import pandas as pd

from joulecast.data.files import write_atomic
from joulecast.training import plots
from joulecast.training.audit import AuditResult

# Wide tables scroll inside their own box instead of widening the page (a 1,400 px window shows the page whole);
# figures shrink to the page's width.
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:13px}img{max-width:100%;height:auto}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}.fail{background:#fdd}.pass{background:#dfd}
h1 small{font-weight:normal;color:#555}.caveat{background:#fff4d6;padding:0.5em 1em;border-left:4px solid #e0a800}"""


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def _table(frame: pd.DataFrame, verdicts: "pd.Series | None" = None) -> str:
    """An HTML table; rows with a verdict (`verdicts`, True or False a row; default the `pass` column) are shaded
    green or red."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    if verdicts is None:
        verdicts = frame["pass"] if "pass" in frame else pd.Series(None, index=frame.index)
    for record, verdict in zip(frame.round(2).to_dict(orient="records"), verdicts.to_numpy(dtype=object)):
        cls = {True: " class='pass'", False: " class='fail'"}.get(verdict, "") if isinstance(verdict, bool) else ""
        cells = "".join(f"<td>{'' if pd.isna(v) else html.escape(str(v))}</td>" for v in record.values())
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<div class='wide'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def render_html(result: AuditResult) -> str:
    s = result.summary
    verdict = "PASS" if s["pass"] else f"FAIL ({len(s['failed'])} gated partitions above target)"
    overall = pd.DataFrame([{k: s.get(k) for k in ("rows", "energy_mape", "energy_median_ape", "energy_p90_ape",
                                                     "time_mape", "time_median_ape", "time_p90_ape", "power_mape",
                                                     "power_median_ape", "power_p90_ape", "coverage", "mean_width")}])
    worst = pd.DataFrame(s["worst"])
    frame = result.frame
    figures = [plots.parity_figure(frame, "energy per iteration, estimated (with interval) vs measured"),
               plots.error_histogram(frame, s["target_pct"]), plots.partition_figure(result.partitions, s["target_pct"]),
               plots.size_figure(frame)]
    parts = [
        f"<h1>joulecast accuracy audit <small>{html.escape(verdict)}</small></h1>",
        f"<p>Estimator: {html.escape(str(s.get('estimator')))}<br>Data: {html.escape(str(s.get('data')))}<br>"
        f"Target: MAPE ≤ {s['target_pct']:g} % on {', '.join(s['gate_on'])}, gated by {', '.join(s['gate_by'])} "
        f"(partitions with at least {s['min_rows']} rows). Errors are absolute percentage errors of the per-iteration "
        f"energy (J), time (s) and average power (W); coverage is the share of rows whose measured energy lies in "
        f"the estimate's interval, chance_low to chance_high the range of coverage (%) chance allows it 95 % of the "
        f"time when a model family's rows on one GPU share an error offset; width is relative to the estimate.</p>",
        *([f"<p class='caveat'>The estimator was trained on {html.escape(', '.join(s['in_sample_sources']))}: these "
           "figures measure its fit, not its accuracy on new data (see train's cross-validation and experiments/)."
           "</p>"] if s.get("in_sample_sources") else []),
        "<h2>Overall</h2>", _table(overall),
        "<h2>Per partition</h2>", _table(result.partitions.drop(columns=["gated"])),
        "<h2>Figures</h2>", *(f"<p>{_png(f)}</p>" for f in figures),
        "<h2>Ten worst rows (by energy error)</h2>", _table(worst) if len(worst) else "<p>none</p>",
    ]
    return _page("joulecast audit", parts)


def _page(title: str, parts: list[str]) -> str:
    """A self-contained page: `title` (escaped), the reports' style, `parts` in order."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}"
            f"</style></head><body>{''.join(parts)}</body></html>")


def write_retrain_report(folder: str | Path, *, gpu: str, champion: str, promoted: bool, reasons: list[str],
                         comparison: pd.DataFrame, figures: dict[str, dict]) -> Path:
    """`folder/report.html`: a retrain's decision on one page (promoted or not and why, each partition's MAPE before
    and after, a regression red, a gain green), linking the two audits' own reports (`before/`, `after/`)."""
    decision = "promoted to champion" if promoted else "not promoted: the champion stays"
    rows = "".join(
        f"<tr><td>{name}</td><td>{html.escape(who)}</td><td>{f['rows']}</td><td>{f['energy_mape']:.2f}</td>"
        f"<td>{f['time_mape']:.2f}</td><td>{f['power_mape']:.2f}</td>"
        f"<td>{'' if f.get('coverage') is None else format(f['coverage'], '.1f')}</td>"
        f"<td><a href='{name}/report.html'>{name}/report.html</a></td></tr>"
        for name, who in (("before", f"champion: {champion}"), ("after", "candidate, out of fold"))
        for f in [figures[name]])
    change = comparison["change"].to_numpy(dtype=float)
    verdicts = pd.Series([False if r else (True if c < 0 else None)
                          for r, c in zip(comparison["regressed"].to_numpy(bool), change)], index=comparison.index)
    parts = [f"<h1>joulecast retrain: {html.escape(gpu)} <small>{html.escape(decision)}</small></h1>",
             "<ul>" + "".join(f"<li>{html.escape(r)}</li>" for r in reasons) + "</ul>",
             f"<h2>On {html.escape(gpu)}'s measurements</h2>",
             "<div class='wide'><table><tr><th>audit</th><th>estimator</th><th>rows</th><th>energy MAPE %</th>"
             f"<th>time MAPE %</th><th>power MAPE %</th><th>coverage %</th><th>report</th></tr>{rows}</table></div>",
             "<p>Where the champion was trained on these rows, its figures are its fit, not its accuracy; the "
             "decision compares cross-validated figures, below.</p>",
             "<h2>Each partition, MAPE (%) before and after</h2>",
             "<p>A partition regressed (red) where its MAPE rose by more than the tolerance; green where it fell.</p>",
             _table(comparison, verdicts)]
    page = _page(f"joulecast retrain {gpu}", parts)
    path = Path(folder) / "report.html"
    write_atomic(path, lambda tmp: tmp.write_text(page))
    return path


def write_report(result: AuditResult, folder: str | Path) -> list[Path]:
    """Write `report.html` and `audit.json` into `folder` (atomically); returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report, summary = folder / "report.html", folder / "audit.json"
    text = json.dumps(result.summary, indent=1, default=str)
    write_atomic(summary, lambda tmp: tmp.write_text(text))
    page = render_html(result)
    write_atomic(report, lambda tmp: tmp.write_text(page))
    return [report, summary]
