"""`joulecast audit`: run an estimator on a measurement set and score it against a target, per partition.

An aggregate hides errors that cancel, so every partition (GPU, model family, phase, dtype, dominant kernel class,
source) gets its own MAPE, median and 90th-percentile error, interval coverage with the range chance allows it, and
pass or fail. A partition with fewer than `min_rows` rows is reported but not gated: the mean of three errors says
little.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from joulecast.data.errors import InputError
from joulecast.estimator.api import scored_frame
from joulecast.estimator.loading import load_estimator
from joulecast.features.kinds import KINDS as KERNEL_CLASSES
from joulecast.training import evaluate
from joulecast.training.dataset import NO_WORKLOAD, dropped_text, training_table
from joulecast.training.evaluate import absolute_errors, add_coverage_chance, error_table, offset_spreads
from joulecast.training.gates import GATE_ON, MIN_ROWS, PARTITIONS, TARGET_PCT, TOLERANCE_PTS  # noqa: F401

QUANTITIES = tuple(q for q, _ in evaluate.QUANTITIES)  # energy, time, power
AUDIT_EXPERIMENT = "joulecast-audit"  # the MLflow experiment audits log to
WORST_COLUMNS = ("measurement_id", "source", "gpu", "model", "phase", "batch", "seq", "dtype", "energy_j",
                 "pred_energy_j", "lo_energy_j", "hi_energy_j", "ape_energy", "ape_time", "ape_power", "flags")


@dataclass
class AuditResult:
    summary: dict[str, Any]      # JSON-ready: overall figures, `partitions`, `worst`, `pass`
    partitions: pd.DataFrame     # one row per (by, value)
    frame: pd.DataFrame          # every scored row: measured, estimated, interval, errors

    @property
    def passed(self) -> bool:
        return bool(self.summary["pass"])


def describe_estimator(uri: str | None, model: Any) -> str:
    if model is None:
        return "physics"
    meta = model.cv.get("meta", {})
    name = uri or "shipped default"
    return f"{name} (trained {meta.get('trained_at', '?')} on {meta.get('rows', '?')} rows, data {meta.get('data_digest', '?')})"


def score_measurements(measurements: pd.DataFrame, estimator: Any = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every usable measurement with its estimate (pred_*), interval, absolute errors (%) and flags.

    `estimator`: None (shipped default), "physics", a folder, an MLflow URI, or a loaded `ResidualModel`.
    Returns the scored frame and the count of rows dropped by reason.
    """
    model = estimator if hasattr(estimator, "predict") else load_estimator(estimator)
    table = training_table(measurements)
    if table.rows.empty:
        # a set of whole jobs (Zeus' epochs) or of applications' own kernels (NV-DVFS) names no workload to lower
        whole = set(table.dropped) == {NO_WORKLOAD}
        raise InputError("measurements", f"no usable rows to audit (dropped: {dropped_text(table.dropped)})" + (
            "; its rows name no workload that an estimate can lower: the scripts in experiments/ score such sets "
            "(zeus_power_limits.py, volta_power.py)" if whole else ""))
    corr = None if model is None else model.predict(table.X, table.rows["gpu"])
    return scored_rows(table.rows, table.X, corr, model), table.dropped


def scored_rows(rows: pd.DataFrame, X: pd.DataFrame, corr: Mapping[str, np.ndarray] | None,
                model: Any = None) -> pd.DataFrame:
    """Rows of a training table scored with corrections `corr` (None: physics alone; a model's out-of-fold
    corrections score what cross-validation saw), with each row's dominant kernel class and flags."""
    frame = scored_frame(rows, corr)
    shares = X[[f"share_{c}" for c in KERNEL_CLASSES]].to_numpy()
    frame["kernel_class"] = np.asarray(KERNEL_CLASSES)[np.argmax(shares, axis=1)]
    frame = frame.assign(**absolute_errors(frame))
    inside = None if corr is None else corr.get("in_domain")
    frame["flags"] = "" if inside is None else model.flags(inside, frame["gpu"])
    return frame


def _clean(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN to None."""
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else round(float(value), 4)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def audit(frame: pd.DataFrame, *, target: float = TARGET_PCT, gate_on: Sequence[str] = GATE_ON,
          gate_by: Sequence[str] = tuple(PARTITIONS), min_rows: int = MIN_ROWS, worst: int = 10,
          meta: dict[str, Any] | None = None) -> AuditResult:
    """Score a frame from `score_measurements` against `target` (% MAPE) on the `gate_on` quantities."""
    for name, values, allowed in (("--gate-on", gate_on, QUANTITIES), ("--gate-by", gate_by, tuple(PARTITIONS))):
        bad = sorted(set(values) - set(allowed))
        if bad or not values:
            raise InputError(name, f"{bad[0] if bad else 'nothing'!r} is not allowed; choose from {', '.join(allowed)}")
    if not target > 0:
        raise InputError("--target", f"must be a positive percentage, got {target}")
    if not min_rows >= 1:  # a partition of no rows has no error to gate
        raise InputError("--min-rows", f"must be at least 1, got {min_rows}")

    def verdict(table: pd.DataFrame, gated: np.ndarray) -> pd.DataFrame:
        ok = np.all([table[f"{q}_mape"].to_numpy() <= target for q in gate_on], axis=0)
        missing = {c: np.nan for c in ("coverage", "mean_width") if c not in table}  # physics alone has no interval
        return table.drop(columns="in_target").assign(**missing, gated=gated, **{"pass": np.where(gated, ok, None)})

    # Beside each coverage, the range chance allows it, rows of a model family on one GPU sharing an offset; the
    # spreads of offsets and rows are estimated once, as every partition below holds the same rows.
    spreads = offset_spreads(frame)
    overall = add_coverage_chance(error_table(frame, None), frame, None, spreads=spreads)
    offsets = overall.attrs["coverage_offsets"]  # GPU -> spread of family offsets (tau) and of rows (sigma), log
    overall = verdict(overall, np.array([True]))
    parts = []
    for by, column in PARTITIONS.items():
        scored = frame.assign(**{column: frame[column].astype(str)})
        table = add_coverage_chance(error_table(scored, column), scored, column, spreads=spreads)
        parts.append(verdict(table, (by in gate_by) & (table["rows"].to_numpy() >= min_rows)).assign(by=by))
    partitions = pd.concat(parts, ignore_index=True)
    columns = ["by", "value", "rows"] + [c for c in overall.columns if c not in ("value", "rows")]
    partitions = partitions[columns]
    failed = partitions[partitions["gated"] & (partitions["pass"] == False)]  # noqa: E712 (object column)
    top = overall.iloc[0]
    worst_rows = frame.nlargest(worst, "ape_energy")[[c for c in WORST_COLUMNS if c in frame]]
    summary: dict[str, Any] = dict(meta or {})
    summary.update(
        rows=int(len(frame)), target_pct=target, gate_on=list(gate_on), gate_by=list(gate_by), min_rows=min_rows,
        coverage_offsets={gpu: {k: _clean(v) for k, v in o.items()} for gpu, o in offsets.items()},
        **{k: _clean(v) for k, v in top.items() if k not in ("value", "rows", "gated", "pass")},
        **{"pass": bool(top["pass"]) and failed.empty,
           "failed": [f"{r.by}={r.value}" for r in failed.itertuples()] + ([] if top["pass"] else ["overall"])},
        partitions=[{k: _clean(v) for k, v in r.items()} for r in partitions.to_dict(orient="records")],
        worst=[{k: _clean(v) for k, v in r.items()} for r in worst_rows.to_dict(orient="records")],
    )
    return AuditResult(summary=summary, partitions=partitions, frame=frame)


def log_audit(result: AuditResult, files: Sequence[str], tracking_uri: str, run_name: str,
              experiment: str = AUDIT_EXPERIMENT) -> str:
    """Log an audit's figures (overall and per partition) and its report files to MLflow; returns the run id."""
    import mlflow

    from joulecast.training.train import use_experiment

    use_experiment(tracking_uri, experiment)
    s = result.summary
    with mlflow.start_run(run_name=run_name) as run:
        mlflow.log_params({k: str(s.get(k)) for k in ("estimator", "data", "target_pct", "gate_on", "gate_by", "min_rows")})
        metrics = {k: v for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None}
        for r in result.partitions.itertuples():
            for q in ("energy_mape", "time_mape", "power_mape", "coverage"):
                value = getattr(r, q, None)
                if value is not None and not pd.isna(value):
                    metrics[f"{q}_{r.by}_{r.value}".replace(" ", "_")] = float(value)
        mlflow.log_metrics(metrics)
        mlflow.set_tags({"audit_pass": str(s["pass"]), "failed": ", ".join(s["failed"])[:5000]})
        for path in files:
            mlflow.log_artifact(str(path))
        return run.info.run_id
